//! The API's errors: `{error_desc, error_code}` as the TAO service sends them (`error_code` an integer,
//! as TAO's ErrorRsp has it: here the HTTP status), plus a stable `error_type` and the field at fault
//! when a request is invalid.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tao_slurm_engine::error::ErrorKind;
use utoipa::ToSchema;

/// An error reply.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong and what to do, in words.
    pub error_desc: String,
    /// An integer, as TAO's ErrorRsp has it: the HTTP status of the reply.
    pub error_code: u16,
    /// A stable code: `invalid_field`, `unauthorized`, `forbidden`, `not_found`, `conflict`,
    /// `payload_too_large`, `unsupported_media_type`, `cluster_unreachable`, `cluster_command_failed`,
    /// `workspace_unavailable`, `database_unavailable` (503), `preflight_failed`, `secrets_unavailable`,
    /// `rate_limited` (429), `busy` (503), `not_implemented` (501), `internal`. The 429 and 503 come
    /// with a `Retry-After` header.
    pub error_type: String,
    /// The request field at fault (`gpus`, `backend_details.cluster_name`, `status`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
    /// Seconds after which the request may succeed (`Retry-After`), for 429 and 503.
    pub retry_after: Option<u64>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.body.error_desc)
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    /// This refusal carried through the engine (`Error::Refused`), to come back as it is.
    pub fn refused(self) -> tao_slurm_engine::Error {
        tao_slurm_engine::Error::Refused(Box::new(self))
    }

    pub fn new(status: StatusCode, code: &str, desc: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorBody {
                error_desc: desc.into(),
                error_code: status.as_u16(),
                error_type: code.into(),
                field: None,
            },
            retry_after: None,
        }
    }

    /// The same error, saying when to come back.
    pub fn retry_after(mut self, secs: u64) -> ApiError {
        self.retry_after = Some(secs);
        self
    }

    /// A request field is invalid (400).
    pub fn field(field: impl Into<String>, desc: impl Into<String>) -> ApiError {
        let field = field.into();
        let mut e =
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_field", format!("invalid {field}: {}", desc.into()));
        e.body.field = Some(field);
        e
    }

    /// A field the core refused (400, naming it).
    pub fn from_spec(e: tao_slurm_engine::spec::SpecError) -> ApiError {
        ApiError::field(e.field, e.message)
    }

    pub fn not_found(what: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", what)
    }

    pub fn conflict(desc: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "conflict", desc)
    }

    pub fn unauthorized(desc: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", desc)
    }

    /// A failure of the service itself: the detail (which may name local files) goes to its log, the
    /// reply says only where to look.
    pub fn internal(desc: impl Into<String>) -> ApiError {
        tracing::warn!(error = %desc.into(), "internal error");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the service failed; the operator finds why in its log",
        )
    }

    /// An error of the engine, with the status that fits its kind.
    pub fn engine(e: tao_slurm_engine::Error) -> ApiError {
        let kind = e.kind();
        let status = status_of(kind);
        match (kind, e) {
            (_, tao_slurm_engine::Error::Spec(s)) => ApiError::field(s.field.clone(), s.message),
            // The service's own refusal from a hook it gave the engine, as it made it.
            (_, tao_slurm_engine::Error::Refused(r)) => match r.downcast::<ApiError>() {
                Ok(own) => *own,
                Err(other) => ApiError::new(status, "invalid_field", other.to_string()),
            },
            (ErrorKind::NotFound, e) => ApiError::not_found(e.to_string()),
            (ErrorKind::Ambiguous, e) => ApiError::field("job_id", e.to_string()),
            // Local files' paths stay in the service's log, never in a reply.
            (ErrorKind::State, e) => ApiError::internal(format!("local state: {e}")),
            (ErrorKind::MissingSettings | ErrorKind::Config, e) => {
                tracing::warn!(error = %e, "a workspace's settings");
                ApiError::new(
                    status,
                    "workspace_unavailable",
                    "the workspace's settings are incomplete; the operator finds why in the service's log",
                )
            }
            (ErrorKind::Unreachable | ErrorKind::OutcomeUnknown, e) => {
                ApiError::new(status, "cluster_unreachable", e.to_string())
            }
            (ErrorKind::RemoteCommand | ErrorKind::Invalid, e) => {
                ApiError::new(status, "cluster_command_failed", e.to_string())
            }
        }
    }
}

/// The HTTP status of each kind of engine error.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Invalid | ErrorKind::Ambiguous => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::MissingSettings | ErrorKind::Config => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Unreachable | ErrorKind::OutcomeUnknown | ErrorKind::RemoteCommand => StatusCode::BAD_GATEWAY,
        ErrorKind::State => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        }
        if let Some(secs) = self.retry_after {
            r.headers_mut().insert(header::RETRY_AFTER, secs.into());
        }
        r
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
