//! Streams end with their token: a long reply (an event stream, which carries the log followers'
//! lines too) checks the token that opened it every second and ends within a few seconds of its
//! revocation or expiry (the service reloads the tokens every second).

use super::state::AppState;
use axum::body::Body;
use axum::http::header::CONTENT_TYPE;
use axum::response::Response;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;

/// How often a stream checks its token.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// `response`, cut when the token `token_id` stops being valid, if it is an event stream.
pub fn end_with_token(state: Arc<AppState>, token_id: String, response: Response) -> Response {
    let streaming =
        response.headers().get(CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !streaming {
        return response;
    }
    let (parts, body) = response.into_parts();
    let token_gone = Box::pin(async move {
        while state.token_valid(&token_id) {
            tokio::time::sleep(CHECK_EVERY).await;
        }
        tracing::info!(token = %token_id, "a stream ended: its token was revoked or expired");
    });
    Response::from_parts(parts, Body::from_stream(body.into_data_stream().take_until(token_gone)))
}
