//! The org's secrets over HTTP: an org admin puts and deletes values (sealed by
//! [`super::org_secrets::SecretBox`]), any token of the org lists their names; no route returns a value.

use super::error::ApiError;
use super::org_secrets::{check, KEY_FILE_SETTING};

/// A secret's value, as PUT sends it (never returned by any route).
#[derive(Debug, Clone, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretPut {
    pub value: String,
}

/// One of the org's secrets, by name only.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct SecretNameOut {
    pub name: String,
    /// `stored` (through this API) or `operator` (mapped from the service's environment).
    pub source: String,
}

#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct SecretList {
    pub secrets: Vec<SecretNameOut>,
}

fn db_error(m: String) -> ApiError {
    tracing::warn!(error = %m, "org secrets");
    ApiError::internal("the service cannot keep the org's secrets; the operator finds why in its log")
}

#[utoipa::path(put, path = "/api/v2/orgs/{org}/secrets/{name}", tag = "secrets", security(("bearer" = [])),
    params(("org" = String, Path), ("name" = String, Path)), request_body = SecretPut,
    responses((status = 204, description = "Stored, encrypted; the value is never returned"),
        (status = 400, body = super::error::ErrorBody), (status = 401, body = super::error::ErrorBody),
        (status = 403, description = "Not an org admin token", body = super::error::ErrorBody),
        (status = 503, description = "The operator set no key file (TAO_SLURM_SECRETS_KEY_FILE)", body = super::error::ErrorBody)))]
pub async fn put_secret(
    axum::extract::State(state): axum::extract::State<super::common::AppStateRef>,
    axum::Extension(token): axum::Extension<super::token_info::TokenInfo>,
    axum::extract::Path((org, name)): axum::extract::Path<(String, String)>,
    headers: axum::http::HeaderMap,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<axum::http::StatusCode, ApiError> {
    token.admin_only("changes the org's secrets")?;
    let req: SecretPut = super::common::parse_json(&headers, body)?;
    check(&name, &req.value)?;
    let sbox = state.secret_box.as_ref().ok_or_else(|| {
        ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "secrets_unavailable",
            format!("this service keeps no secrets: its operator set no {KEY_FILE_SETTING}"),
        )
    })?;
    let (nonce, sealed) = sbox.seal(&org, &name, &req.value).map_err(ApiError::internal)?;
    tao_slurm_engine::spec::Secret::new(req.value);
    state
        .records
        .secrets()
        .put(&org, &name, &nonce, &sealed, tao_slurm_engine::client::now_secs())
        .map_err(db_error)?;
    tracing::info!(%org, secret = %name, token = %token.id, "secret stored");
    Ok(axum::http::StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/secrets", tag = "secrets", security(("bearer" = [])),
    params(("org" = String, Path)),
    responses((status = 200, description = "The names of the org's secrets (never values)", body = SecretList),
        (status = 401, body = super::error::ErrorBody), (status = 403, body = super::error::ErrorBody)))]
pub async fn list_secrets(
    axum::extract::State(state): axum::extract::State<super::common::AppStateRef>,
    axum::extract::Path(org): axum::extract::Path<String>,
) -> Result<axum::Json<SecretList>, ApiError> {
    let mut secrets: Vec<SecretNameOut> = state
        .records
        .secrets()
        .list(&org)
        .map_err(db_error)?
        .into_iter()
        .map(|(name, _, _)| SecretNameOut { name, source: "stored".into() })
        .collect();
    for name in state.operator.org(&org).secret_env.keys() {
        if !secrets.iter().any(|s| &s.name == name) {
            secrets.push(SecretNameOut { name: name.clone(), source: "operator".into() });
        }
    }
    secrets.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(axum::Json(SecretList { secrets }))
}

#[utoipa::path(delete, path = "/api/v2/orgs/{org}/secrets/{name}", tag = "secrets", security(("bearer" = [])),
    params(("org" = String, Path), ("name" = String, Path)),
    responses((status = 204, description = "Removed"), (status = 404, body = super::error::ErrorBody),
        (status = 401, body = super::error::ErrorBody), (status = 403, body = super::error::ErrorBody)))]
pub async fn delete_secret(
    axum::extract::State(state): axum::extract::State<super::common::AppStateRef>,
    axum::Extension(token): axum::Extension<super::token_info::TokenInfo>,
    axum::extract::Path((org, name)): axum::extract::Path<(String, String)>,
) -> Result<axum::http::StatusCode, ApiError> {
    token.admin_only("changes the org's secrets")?;
    if !state.records.secrets().delete(&org, &name).map_err(db_error)? {
        return Err(ApiError::not_found(format!("org {org} stored no secret {name}")));
    }
    Ok(axum::http::StatusCode::NO_CONTENT)
}
