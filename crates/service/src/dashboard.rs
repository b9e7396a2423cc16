//! The dashboard: one page of plain HTML, CSS and JavaScript embedded in the binary (no CDN, nothing
//! built at run time). It holds no data: it asks the API for everything, with the token the user
//! gives it, and follows the event streams.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The dashboard's policy with `nonce` the only way a script runs: not `'self'`, which would let a
/// `<script src>` of the service's own origin run in the dashboard, and `/tensorboard/` (a job's
/// TensorBoard, the job's own files) is on that origin.
fn policy(nonce: &str) -> String {
    format!(
        "default-src 'self'; script-src 'nonce-{nonce}'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
         frame-src 'none'; worker-src 'none'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
    )
}

fn asset(content_type: &'static str, body: String, nonce: &str) -> Response {
    let policy =
        header::HeaderValue::from_str(&policy(nonce)).unwrap_or(header::HeaderValue::from_static("default-src 'none'"));
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, header::HeaderValue::from_static(content_type)),
            (header::CACHE_CONTROL, header::HeaderValue::from_static("no-cache")),
            (header::X_CONTENT_TYPE_OPTIONS, header::HeaderValue::from_static("nosniff")),
            (header::HeaderName::from_static("x-frame-options"), header::HeaderValue::from_static("DENY")),
            (header::CONTENT_SECURITY_POLICY, policy),
        ],
        body,
    )
        .into_response()
}

/// A nonce for one page (128 random bits, hex); none (no script runs) if the system's generator fails.
fn nonce() -> String {
    let mut bytes = [0u8; 16];
    match getrandom::fill(&mut bytes) {
        Ok(()) => bytes.iter().map(|b| format!("{b:02x}")).collect(),
        Err(_) => "unavailable".into(),
    }
}

pub async fn index() -> Response {
    let nonce = nonce();
    asset("text/html; charset=utf-8", INDEX.replace("{{NONCE}}", &nonce), &nonce)
}

pub async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS.to_string(), &nonce())
}

pub async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS.to_string(), &nonce())
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_pages_own_script_runs_not_one_of_the_services_origin() {
        let policy = super::policy("abc");
        assert!(policy.contains("script-src 'nonce-abc';"), "{policy}");
        assert!(!policy.contains("script-src 'self'") && policy.contains("worker-src 'none'"), "{policy}");
        assert!(super::INDEX.contains(r#"<script src="/assets/app.js" nonce="{{NONCE}}" defer>"#));
        assert_eq!(super::INDEX.matches("<script").count(), 1, "one script, the nonced one");
        let (a, b) = (super::nonce(), super::nonce());
        assert!(a.len() == 32 && a != b, "{a} {b}");
    }
}
