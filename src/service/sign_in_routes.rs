//! The sign-in's routes (`/auth/...`, public): the dashboard's and the terminal's way through the
//! identity provider (`sign_in`), and the person's token made at the end.

use super::common::AppStateRef;
use super::operator::SignInRules;
use super::sign_in::{
    chosen_org, cookie_of, esc, page, page_with, random_code, Device, Issued, Membership, SignIn, COOKIE, MAX_PENDING,
    PENDING_FOR,
};
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::time::Instant;

/// Make the person's token (shown once) in the service's records, and have the service accept it.
fn issue(state: &AppStateRef, rules: &SignInRules, m: &Membership, org: &str, admin: bool) -> Result<Issued, String> {
    let now = crate::client::now_secs();
    let tokens = state.records.tokens();
    let (rec, token) = tokens.create(org, "sign-in", Some(&m.person), Some(rules.token_secs), now)?;
    if admin {
        tokens.make_admin(&rec.id)?;
    }
    state.reload_tokens_now()?;
    tracing::info!(%org, person = %m.person, token = %rec.id, admin, "signed in");
    Ok(Issued {
        token,
        org: org.to_string(),
        person: m.person.clone(),
        admin,
        expires_at: rec.expires_at.unwrap_or(now),
    })
}

/// [`issue`] on a blocking thread (the records are a database).
async fn issue_off_runtime(
    state: &AppStateRef,
    s: &SignIn,
    m: Membership,
    org: String,
    admin: bool,
) -> Result<Issued, String> {
    let (st, rules) = (state.clone(), s.rules.clone());
    tokio::task::spawn_blocking(move || issue(&st, &rules, &m, &org, admin))
        .await
        .unwrap_or_else(|e| Err(e.to_string()))
}

fn not_set_up() -> Response {
    page(
        StatusCode::NOT_FOUND,
        "Sign-in is not set up",
        "The operator named no identity provider ([sign_in] in clusters.toml); ask them for a token.",
    )
}

fn sign_in_of(state: &AppStateRef) -> Option<&SignIn> {
    state.sign_in.as_deref()
}

#[derive(Deserialize)]
pub struct LoginQuery {
    org: Option<String>,
    /// A terminal's user code (`tao-slurm login`).
    device: Option<String>,
}

/// `GET /auth/login`: to the identity provider.
pub async fn login(State(state): State<AppStateRef>, Query(q): Query<LoginQuery>) -> Response {
    let Some(s) = sign_in_of(&state) else { return not_set_up() };
    // A terminal's sign-in: its device code, and the org it asked for.
    let (device, device_org) = match &q.device {
        None => (None, None),
        Some(user_code) => {
            let devices = s.devices.lock().unwrap_or_else(|e| e.into_inner());
            match devices.iter().find(|(_, d)| d.user_code == *user_code && d.outcome.is_none()) {
                Some((code, d)) => (Some(code.clone()), d.org.clone()),
                None => {
                    return page(
                        StatusCode::BAD_REQUEST,
                        "Unknown code",
                        "This sign-in link has expired or was used; run `tao-slurm login` again.",
                    )
                }
            }
        }
    };
    match s.start(device, q.org.or(device_org)).await {
        Ok((url, st)) => {
            let secure = if s.base().starts_with("https://") { "; Secure" } else { "" };
            let cookie =
                format!("{COOKIE}={st}; Path=/auth; HttpOnly; SameSite=Lax; Max-Age={}{secure}", PENDING_FOR.as_secs());
            let headers =
                [(header::LOCATION, url), (header::CACHE_CONTROL, "no-store".into()), (header::SET_COOKIE, cookie)];
            (StatusCode::FOUND, headers).into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot start a sign-in");
            page(
                StatusCode::BAD_GATEWAY,
                "Cannot sign in now",
                "The identity provider cannot be reached; the operator finds why in the service's log.",
            )
        }
    }
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// `GET /auth/callback`: the provider's answer; the person's token to the dashboard or the terminal.
pub async fn callback(
    State(state): State<AppStateRef>,
    headers: axum::http::HeaderMap,
    Query(q): Query<CallbackQuery>,
) -> Response {
    let Some(s) = sign_in_of(&state) else { return not_set_up() };
    // Only the browser that started this sign-in may finish it.
    if q.state.is_none() || cookie_of(&headers) != q.state {
        return page(
            StatusCode::BAD_REQUEST,
            "Sign-in not started here",
            "This answer belongs to a sign-in this browser did not start; start again.",
        );
    }
    let pending = q.state.as_ref().and_then(|st| s.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(st));
    let Some(p) = pending.filter(|p| p.at.elapsed() < PENDING_FOR) else {
        return page(StatusCode::BAD_REQUEST, "Sign-in expired", "This sign-in is unknown or too old; start again.");
    };
    let outcome = match (q.code, q.error) {
        (Some(code), None) => s.finish(code, &p).await,
        (_, e) => {
            // The error code is the URL's, so anyone's: kept to OAuth's characters, and short.
            let code: String = e
                .unwrap_or_else(|| "no code".into())
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || "_- ".contains(*c))
                .take(64)
                .collect();
            Err(format!("the identity provider did not sign you in ({code})"))
        }
    };
    let who = outcome.and_then(|m| chosen_org(&m, p.org.as_deref()).map(|(org, admin)| (m, org, admin)));
    if let Err(e) = &who {
        tracing::warn!(error = %e, "a sign-in was refused");
    }
    if let Some(code) = p.device {
        // A terminal's: the person confirms it (a link someone else sent must not sign their
        // terminal in silently).
        let mut devices = s.devices.lock().unwrap_or_else(|e| e.into_inner());
        let Some(d) = devices.get_mut(&code) else {
            return page(
                StatusCode::BAD_REQUEST,
                "Sign-in expired",
                "The terminal's code expired; run `tao-slurm login` again.",
            );
        };
        return match who {
            Ok((m, org, admin)) => {
                let confirm = random_code(16);
                let text = format!(
                    "Signed in as {} in org {}. A terminal asked to sign in as you with the code {}: sign it in only if you ran `tao-slurm login` just now and it shows this code.",
                    m.person, org, d.user_code
                );
                d.confirm = Some((confirm.clone(), m, org, admin));
                let form = format!(
                    "<form method=post action=\"/auth/device/confirm\"><input type=hidden name=confirm value=\"{}\"><button type=submit>Sign the terminal in</button></form>",
                    esc(&confirm)
                );
                page_with(StatusCode::OK, "Sign a terminal in?", &text, &form)
            }
            Err(e) => {
                d.outcome = Some(Err(e.clone()));
                page(StatusCode::FORBIDDEN, "Not signed in", &e)
            }
        };
    }
    let issued = match who {
        Ok((m, org, admin)) => issue_off_runtime(&state, s, m, org, admin).await,
        Err(e) => Err(e),
    };
    match issued {
        Ok(i) => {
            // To the dashboard, in the URL's fragment (never sent to a server), which it keeps and clears.
            let value = serde_json::json!({"org": i.org, "token": i.token, "person": i.person}).to_string();
            let fragment: String = form_urlencoded::byte_serialize(value.as_bytes()).collect();
            let to = format!("/#sign_in={fragment}");
            (StatusCode::FOUND, [(header::LOCATION, to), (header::CACHE_CONTROL, "no-store".into())]).into_response()
        }
        Err(e) => page(StatusCode::FORBIDDEN, "Not signed in", &e),
    }
}

#[derive(Deserialize)]
pub struct ConfirmForm {
    confirm: String,
}

/// `POST /auth/device/confirm`: the person signs their terminal in; its token is made now.
pub async fn confirm(State(state): State<AppStateRef>, axum::Form(f): axum::Form<ConfirmForm>) -> Response {
    let Some(s) = sign_in_of(&state) else { return not_set_up() };
    let found = {
        let mut devices = s.devices.lock().unwrap_or_else(|e| e.into_inner());
        devices.iter_mut().find_map(|(code, d)| match &d.confirm {
            Some((c, ..)) if *c == f.confirm && d.outcome.is_none() => d.confirm.take().map(|x| (code.clone(), x)),
            _ => None,
        })
    };
    let Some((code, (_, m, org, admin))) = found else {
        return page(
            StatusCode::BAD_REQUEST,
            "Nothing to confirm",
            "This confirmation is unknown or was used; run `tao-slurm login` again.",
        );
    };
    let issued = issue_off_runtime(&state, s, m, org, admin).await;
    let said = match &issued {
        Ok(i) => Ok(format!("Your terminal is signed in as {} in org {}.", i.person, i.org)),
        Err(e) => Err(e.clone()),
    };
    if let Some(d) = s.devices.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&code) {
        d.outcome = Some(issued);
    }
    match said {
        Ok(t) => page(StatusCode::OK, "Signed in", &t),
        Err(e) => {
            tracing::warn!(error = %e, "cannot make a signed-in person's token");
            page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Not signed in",
                "The service could not record your token; try again.",
            )
        }
    }
}

#[derive(Deserialize, Default)]
pub struct DeviceAsk {
    org: Option<String>,
}

/// `POST /auth/device`: a terminal's sign-in: a link for the person, a code for the terminal.
pub async fn device(State(state): State<AppStateRef>, body: Option<Json<DeviceAsk>>) -> Response {
    let Some(s) = sign_in_of(&state) else { return not_set_up() };
    s.forget_stale();
    let (device_code, user_code) = (random_code(32), random_code(6));
    {
        let mut devices = s.devices.lock().unwrap_or_else(|e| e.into_inner());
        if devices.len() >= MAX_PENDING {
            return (StatusCode::SERVICE_UNAVAILABLE, Json(serde_json::json!({"error": "slow_down"}))).into_response();
        }
        let org = body.and_then(|b| b.0.org);
        let d = Device { user_code: user_code.clone(), org, at: Instant::now(), confirm: None, outcome: None };
        devices.insert(device_code.clone(), d);
    }
    let verify = format!("{}/auth/login?device={user_code}", s.base());
    Json(serde_json::json!({
        "device_code": device_code,
        "user_code": user_code,
        "verification_uri_complete": verify,
        "expires_in": PENDING_FOR.as_secs(),
        "interval": 1,
    }))
    .into_response()
}

#[derive(Deserialize)]
pub struct DeviceTokenAsk {
    device_code: String,
}

/// `POST /auth/device/token`: the terminal's token once the person signed in (RFC 8628's answers).
pub async fn device_token(State(state): State<AppStateRef>, Json(ask): Json<DeviceTokenAsk>) -> Response {
    let Some(s) = sign_in_of(&state) else { return not_set_up() };
    let refuse = |error: &str, description: String| {
        (StatusCode::BAD_REQUEST, Json(serde_json::json!({"error": error, "error_description": description})))
            .into_response()
    };
    let mut devices = s.devices.lock().unwrap_or_else(|e| e.into_inner());
    let Some(d) = devices.get(&ask.device_code).filter(|d| d.at.elapsed() < PENDING_FOR) else {
        return refuse("expired_token", "this code is unknown or expired; run `tao-slurm login` again".into());
    };
    match &d.outcome {
        None => refuse("authorization_pending", "open the link and sign in".into()),
        Some(_) => match devices.remove(&ask.device_code).and_then(|d| d.outcome) {
            Some(Ok(issued)) => Json(issued).into_response(),
            Some(Err(e)) => refuse("access_denied", e),
            None => refuse("expired_token", "this code was used".into()),
        },
    }
}
