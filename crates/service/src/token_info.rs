//! Who a request is: the facts of its token that handlers and the audit layer need.

use super::error::ApiError;
use axum::http::StatusCode;

/// Per-token facts the requests need.
#[derive(Debug, Clone)]
pub struct TokenInfo {
    pub id: String,
    pub org: String,
    /// Its label (who or what uses it), for the audit trail.
    pub name: String,
    /// An org admin token: it may also change the org's workspaces and secrets.
    pub admin: bool,
    /// Unix seconds after which it is refused; None: until revoked.
    pub expires_at: Option<i64>,
    /// The person it names (None: a machine's token).
    pub person: Option<String>,
}

impl TokenInfo {
    pub fn expired(&self, now: i64) -> bool {
        self.expires_at.is_some_and(|t| now >= t)
    }
}

impl TokenInfo {
    /// Refused unless an org admin's token: `what` is what only an admin does ("changes the org's secrets").
    pub fn admin_only(&self, what: &str) -> Result<(), ApiError> {
        if self.admin {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("only an org admin token {what} (`tao-slurm token create --org ORG --admin`)"),
        ))
    }
}
