//! TAO's `:list_files`, `:download` and `:download_selective_files` of a job: the files of its results
//! directory, and a gzip'd tar of all or some of them (plus its logs as `logs/main.out|err`), refused
//! above a size cap (the tar stream before compression; see `client::results`).

use super::common::{blocking, org_job, AppStateRef};
use super::error::{ApiError, ApiResult, ErrorBody};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use tao_slurm_engine::client::{ArchiveAsk, ArchiveOut};

/// The most bytes (before compression) one archive may hold, unless the service's environment says
/// otherwise (`TAO_SLURM_DOWNLOAD_MAX_BYTES`).
pub const MAX_ARCHIVE_BYTES: u64 = tao_slurm_engine::config::DEFAULT_DOWNLOAD_MAX_BYTES;

/// The cap in force (read once; a value that is not a positive number is the default, with a warning).
fn max_archive_bytes() -> u64 {
    static CAP: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *CAP.get_or_init(|| match std::env::var("TAO_SLURM_DOWNLOAD_MAX_BYTES") {
        Err(_) => MAX_ARCHIVE_BYTES,
        Ok(v) => v.trim().parse().ok().filter(|n| *n > 0).unwrap_or_else(|| {
            tracing::warn!(value = %v, "TAO_SLURM_DOWNLOAD_MAX_BYTES is not a positive number; using the default");
            MAX_ARCHIVE_BYTES
        }),
    })
}
/// The most files a listing shows.
const MAX_LISTED: usize = 10_000;

/// The query's pairs, a repeated key kept as many pairs (TAO's lists).
fn pairs(uri: &Uri) -> Vec<(String, String)> {
    form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// A flag as Python's `requests` sends it (`True`/`False`) or as people write it.
fn flag(pairs: &[(String, String)], name: &str, default: bool) -> ApiResult<bool> {
    match pairs.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str()) {
        None => Ok(default),
        Some("True" | "true" | "1" | "yes" | "y") => Ok(true),
        Some("False" | "false" | "0" | "no" | "n") => Ok(false),
        Some(other) => Err(ApiError::field(name, format!("{other:?} is not true or false"))),
    }
}

fn only_known(pairs: &[(String, String)], known: &[&str]) -> ApiResult<()> {
    match pairs.iter().find(|(k, _)| !known.contains(&k.as_str())) {
        Some((k, _)) => {
            Err(ApiError::field("query", format!("unknown parameter {k:?} (there are {})", known.join(", "))))
        }
        None => Ok(()),
    }
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/jobs/{job_id}:list_files", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path),
        ("retrieve_logs" = Option<bool>, Query, description = "Add the current attempt's logs/main.out and logs/main.err (default true)"),
        ("retrieve_specs" = Option<bool>, Query, description = "TAO's flag; the specs a job's container writes are in its results already")),
    responses((status = 200, description = "Paths relative to the job's results directory (empty before it has one), as TAO lists them", body = [String]),
        (status = 404, body = ErrorBody), (status = 401, body = ErrorBody), (status = 502, body = ErrorBody)))]
pub async fn list_files(
    state: AppStateRef,
    token: &super::token_info::TokenInfo,
    org: String,
    id: String,
    uri: Uri,
) -> ApiResult<Json<Vec<String>>> {
    let q = pairs(&uri);
    only_known(&q, &["retrieve_logs", "retrieve_specs"])?;
    let with_logs = flag(&q, "retrieve_logs", true)?;
    flag(&q, "retrieve_specs", true)?;
    let job = org_job(&state, &org, &id)?;
    let ws = super::common::workspace_of(&state, token, &job)?;
    let _in_pool = ws.pool.enter(&ws.id).await?;
    let files =
        blocking(move || ws.with_client(|c| c.list_results(&id, with_logs, MAX_LISTED)).map_err(ApiError::engine))
            .await?;
    Ok(Json(files.unwrap_or_default().into_iter().map(|f| f.path).collect()))
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/jobs/{job_id}:download_selective_files", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path),
        ("file_lists" = Option<Vec<String>>, Query, description = "Paths relative to the results directory, repeated (`file_lists=a&file_lists=b`); none: every file"),
        ("best_model" = Option<bool>, Query, description = "The newest checkpoint (*.pth, *.tlt, *.hdf5, *.ckpt, *.safetensors): tao-slurm does not know which one was best"),
        ("latest_model" = Option<bool>, Query, description = "The newest checkpoint"),
        ("tar_files" = Option<bool>, Query, description = "Must be true (the default): the answer is always a tar.gz")),
    responses((status = 200, description = "A gzip'd tar of the files", content_type = "application/gzip"),
        (status = 400, body = ErrorBody), (status = 404, description = "No such job, no results yet, or a file asked for is not there", body = ErrorBody),
        (status = 413, description = "More than the cap (128 MiB before compression by default): ask for fewer files", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 502, body = ErrorBody)))]
pub async fn download_selective(
    state: AppStateRef,
    token: &super::token_info::TokenInfo,
    org: String,
    id: String,
    uri: Uri,
) -> ApiResult<Response> {
    let q = pairs(&uri);
    only_known(&q, &["file_lists", "best_model", "latest_model", "tar_files"])?;
    if !flag(&q, "tar_files", true)? {
        return Err(ApiError::field("tar_files", "only tar.gz archives are served here (tar_files=true)"));
    }
    let ask = ArchiveAsk {
        names: q.iter().filter(|(k, _)| k == "file_lists").map(|(_, v)| v.clone()).collect(),
        latest_checkpoint: flag(&q, "best_model", false)? || flag(&q, "latest_model", false)?,
        with_logs: false,
        max_bytes: max_archive_bytes(),
    };
    archive(state, token, org, id, ask).await
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/jobs/{job_id}:download", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path)),
    responses((status = 200, description = "A gzip'd tar of the whole results directory and the current attempt's logs (logs/main.out, logs/main.err)", content_type = "application/gzip"),
        (status = 404, body = ErrorBody), (status = 413, description = "More than the cap (128 MiB before compression by default): use :download_selective_files", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 502, body = ErrorBody)))]
pub async fn download(
    state: AppStateRef,
    token: &super::token_info::TokenInfo,
    org: String,
    id: String,
    uri: Uri,
) -> ApiResult<Response> {
    only_known(&pairs(&uri), &[])?;
    let ask =
        ArchiveAsk { names: Vec::new(), latest_checkpoint: false, with_logs: true, max_bytes: max_archive_bytes() };
    archive(state, token, org, id, ask).await
}

async fn archive(
    state: AppStateRef,
    token: &super::token_info::TokenInfo,
    org: String,
    id: String,
    ask: ArchiveAsk,
) -> ApiResult<Response> {
    let job = org_job(&state, &org, &id)?;
    let ws = super::common::workspace_of(&state, token, &job)?;
    let _in_pool = ws.pool.enter(&ws.id).await?;
    let jid = id.clone();
    let out = blocking(move || ws.with_client(|c| c.results_archive(&jid, &ask)).map_err(ApiError::engine)).await?;
    match out {
        ArchiveOut::Bytes(bytes) => Ok((
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "application/gzip".to_string()),
                (header::CONTENT_DISPOSITION, format!("attachment; filename=\"{id}.tar.gz\"")),
            ],
            bytes,
        )
            .into_response()),
        ArchiveOut::TooLarge(n) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "the files asked for hold {n} bytes or more, more than the {}-byte cap of a download (TAO_SLURM_DOWNLOAD_MAX_BYTES); ask for fewer with :download_selective_files?file_lists=..., or copy them from {} on the cluster",
                max_archive_bytes(),
                job.out.backend_details.slurm_metadata.results_dir
            ),
        )),
        ArchiveOut::Missing(m) => Err(ApiError::not_found(format!(
            "not in the results of job {id}: {} (see :list_files)",
            m.join(", ")
        ))),
        ArchiveOut::NoResults => Err(ApiError::not_found(format!("job {id} has no results directory yet"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_python_flags_are_read() {
        let uri: Uri = "/x?file_lists=a.pth&file_lists=b%20c.json&tar_files=True&best_model=False".parse().unwrap();
        let q = pairs(&uri);
        assert_eq!(q.iter().filter(|(k, _)| k == "file_lists").count(), 2);
        assert_eq!(q[1].1, "b c.json");
        assert!(flag(&q, "tar_files", false).unwrap());
        assert!(!flag(&q, "best_model", true).unwrap());
        assert!(flag(&q, "latest_model", true).unwrap());
        let bad: Uri = "/x?tar_files=maybe".parse().unwrap();
        assert_eq!(flag(&pairs(&bad), "tar_files", true).unwrap_err().body.field.as_deref(), Some("tar_files"));
        assert!(only_known(&q, &["file_lists"]).is_err());
    }
}
