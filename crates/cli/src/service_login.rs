//! `login --service URL`: sign in to a team service through its identity provider, from a terminal
//! (no browser needed here): the service gives its page and a code; the person opens the page in any
//! browser, types the code, signs in and confirms; the service token they get is kept in a private
//! file for the tools that
//! call the service (TAO's client, scripts, agents). The token is never printed.

use std::path::PathBuf;
use std::time::{Duration, Instant};
use tao_slurm_engine::error::Error;
use tao_slurm_engine::spec::SpecError;

/// Where the token is kept unless `--token-file` says: `~/.config/tao/service-token.json`.
fn default_file() -> Result<PathBuf, Error> {
    let home = std::env::var_os("HOME").ok_or_else(|| SpecError::new("HOME", "not set: give --token-file"))?;
    Ok(PathBuf::from(home).join(".config/tao/service-token.json"))
}

/// Whether an `http://` URL names this machine (a token sent there never crosses a network).
fn is_loopback_url(base: &str) -> bool {
    let rest = base.trim_start_matches("http://");
    let host = rest.split(['/', '?']).next().unwrap_or("");
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn refuse(m: impl std::fmt::Display) -> Error {
    SpecError::new("--service", m.to_string()).into()
}

pub fn sign_in(service: &str, org: Option<&str>, token_file: Option<PathBuf>) -> Result<i32, Error> {
    let base = service.trim_end_matches('/');
    if !(base.starts_with("https://") || base.starts_with("http://")) {
        return Err(refuse(format!("{service:?} is not the service's http(s) URL")));
    }
    if base.starts_with("http://") && !is_loopback_url(base) {
        eprintln!(
            "warning: {base} is plain HTTP: your token will cross the network in clear; ask the operator for the service's https:// address"
        );
    }
    let file = match token_file {
        Some(f) => f,
        None => default_file()?,
    };
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(20))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(refuse)?;
    let start: serde_json::Value = http
        .post(format!("{base}/auth/device"))
        .json(&serde_json::json!({ "org": org }))
        .send()
        .and_then(|r| r.error_for_status())
        .and_then(|r| r.json())
        .map_err(|e| {
            refuse(format!("the service at {base} does not offer sign-in ({e}); ask its operator for a token"))
        })?;
    let (Some(code), Some(page), Some(user_code)) =
        (start["device_code"].as_str(), start["verification_uri"].as_str(), start["user_code"].as_str())
    else {
        return Err(refuse(format!("the service answered no device code: {start}")));
    };
    // Only what a code's page is: a person types the code there (a link with the code in it could be
    // sent to someone else).
    let user_code: String = user_code.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(16).collect();
    eprintln!(
        "Open this page in a browser:\n\n    {page}\n\nand type this code there (good once, for {} minutes):\n\n    {user_code}\n\nWaiting for the sign-in...",
        start["expires_in"].as_u64().unwrap_or(300) / 60
    );
    let deadline = Instant::now() + Duration::from_secs(start["expires_in"].as_u64().unwrap_or(600));
    let every = Duration::from_secs(start["interval"].as_u64().unwrap_or(2).clamp(1, 30));
    let issued = loop {
        std::thread::sleep(every);
        let r = http
            .post(format!("{base}/auth/device/token"))
            .json(&serde_json::json!({ "device_code": code }))
            .send()
            .map_err(|e| refuse(format!("cannot reach the service: {e}")))?;
        let ok = r.status().is_success();
        let body: serde_json::Value = r.json().unwrap_or_default();
        if ok {
            break body;
        }
        match body["error"].as_str() {
            Some("authorization_pending") if Instant::now() < deadline => continue,
            Some("authorization_pending") => {
                return Err(refuse("the link was not used in time; run `tao-slurm login --service` again"))
            }
            _ => {
                let why = body["error_description"].as_str().unwrap_or("the service refused the sign-in");
                return Err(refuse(format!("not signed in: {why}")));
            }
        }
    };
    let kept = serde_json::json!({
        "service": base,
        "org": issued["org"],
        "person": issued["person"],
        "admin": issued["admin"],
        "expires_at": issued["expires_at"],
        "token": issued["token"],
    });
    tao_slurm_engine::private::write_private_file(&file, format!("{kept:#}\n").as_bytes())
        .map_err(|e| SpecError::new("--token-file", format!("cannot write {}: {e}", file.display())))?;
    let until = issued["expires_at"].as_i64().map(tao_slurm_engine::client::rfc3339).unwrap_or_default();
    eprintln!(
        "Signed in to {base} as {} (org {}) until {until}; the token is in {} (mode 600)",
        issued["person"].as_str().unwrap_or("?"),
        issued["org"].as_str().unwrap_or("?"),
        file.display()
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_this_machines_http_goes_without_a_warning() {
        for quiet in ["http://127.0.0.1:8570", "http://localhost:1/x", "http://[::1]:8570/", "http://127.0.0.9"] {
            assert!(super::is_loopback_url(quiet), "{quiet}");
        }
        for warned in
            ["http://tao.example.org", "http://10.0.0.1:8570", "http://localhost.evil.org", "http://[2001:db8::1]:1"]
        {
            assert!(!super::is_loopback_url(warned), "{warned}");
        }
    }
}
