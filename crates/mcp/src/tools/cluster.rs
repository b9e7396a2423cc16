//! Tools about the cluster rather than a job: preflight, check_paths, image_import,
//! credentials_status.

use crate::args::{CheckPathsArgs, ImageImportArgs};
use crate::reply::{Reply, ToolError};
use schemars::JsonSchema;
use serde::Serialize;
use tao_slurm_engine::client::PathCheck;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::Client;

/// One preflight check (the core's).
pub type CheckOut = tao_slurm_engine::preflight::Check;

#[derive(Debug, Serialize, JsonSchema)]
pub struct PreflightOut {
    pub ok: bool,
    pub checks: Vec<CheckOut>,
}

pub fn preflight(settings: &Settings) -> Reply<PreflightOut> {
    let checks = tao_slurm_engine::client::preflight(settings).checks;
    let ok = checks.iter().all(|c| c.ok || !c.required);
    let failed: Vec<_> = checks.iter().filter(|c| !c.ok && c.required).collect();
    let warned = checks.iter().filter(|c| !c.ok && !c.required).count();
    let (summary, next) = if ok {
        let warnings = if warned > 0 { format!(", {warned} warning(s)") } else { String::new() };
        (
            format!("preflight passed: {} checks{warnings}", checks.len()),
            "check the job's dataset paths with check_paths, then submit (dry_run first if unsure)".to_string(),
        )
    } else {
        let names: Vec<String> = failed
            .iter()
            .map(|c| format!("{}{}", c.name, c.host.as_ref().map(|h| format!(" [{h}]")).unwrap_or_default()))
            .collect();
        // The remediation texts verbatim, each once (one per host would repeat the SSH prompt).
        let mut remediations: Vec<&str> = Vec::new();
        for r in failed.iter().filter_map(|c| c.remediation.as_deref()) {
            if !remediations.contains(&r) {
                remediations.push(r);
            }
        }
        (
            format!("preflight FAILED: {}", names.join(", ")),
            format!(
                "do not submit. Show the user this remediation verbatim, ask for what it needs, then call preflight again:\n{}",
                remediations.join("\n\n")
            ),
        )
    };
    Reply::new(summary, next, PreflightOut { ok, checks })
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct PathOut {
    pub uri: String,
    /// exists, missing, not_checked (fetched inside the job) or refused.
    pub state: String,
    pub detail: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CheckPathsOut {
    /// Every path exists (or is fetched inside the job).
    pub ok: bool,
    pub paths: Vec<PathOut>,
}

pub fn check_paths(client: &Client, args: CheckPathsArgs) -> Result<Reply<CheckPathsOut>, ToolError> {
    if args.uris.is_empty() {
        return Err(ToolError::invalid("uris", "give at least one path, e.g. lustre:///lustre/datasets/coco"));
    }
    let results = client.check_paths(&args.uris).map_err(|e| ToolError::engine(e, "uris"))?;
    let paths: Vec<PathOut> = results
        .into_iter()
        .map(|(uri, r)| {
            let (state, detail) = match r {
                PathCheck::Exists(p) => ("exists", p),
                PathCheck::Missing(p) => ("missing", p),
                PathCheck::NotChecked(u) => ("not_checked", format!("{u}: fetched inside the job, not checked here")),
                PathCheck::Refused(m) => ("refused", m),
            };
            PathOut { uri, state: state.to_string(), detail }
        })
        .collect();
    let bad: Vec<&PathOut> = paths.iter().filter(|p| p.state == "missing" || p.state == "refused").collect();
    let ok = bad.is_empty();
    let (summary, next) = if ok {
        (format!("all {} path(s) usable", paths.len()), "submit the job with these paths".to_string())
    } else {
        (
            format!("{} of {} path(s) missing or refused: {}", bad.len(), paths.len(), bad.iter().map(|p| p.uri.as_str()).collect::<Vec<_>>().join(", ")),
            "stop: ask the user for corrected paths on the cluster's shared storage (lustre:///...); do not write a job with these".to_string(),
        )
    };
    Ok(Reply::new(summary, next, CheckPathsOut { ok, paths }))
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ImageOut {
    pub image: String,
    pub sqsh_path: String,
    /// cached, waited (another submitter converted it) or converted.
    pub how: String,
    pub seconds: f64,
}

pub fn image_import(client: &Client, args: ImageImportArgs) -> Result<Reply<ImageOut>, ToolError> {
    let p = client.prepare_image(&args.image, args.force).map_err(|e| ToolError::engine(e, "image"))?;
    Ok(Reply::new(
        format!("{} {} -> {} ({:.1} s)", p.how, p.image, p.sqsh_path, p.seconds),
        "submit jobs with this image: they use the cached squashfs file",
        ImageOut { image: p.image, sqsh_path: p.sqsh_path, how: p.how, seconds: (p.seconds * 100.0).round() / 100.0 },
    ))
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CredentialsOut {
    /// ~/.config/enroot/.credentials on the cluster has an nvcr.io entry and mode 600.
    pub installed: bool,
    pub exists: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    pub has_nvcr_io: bool,
    pub has_authn_nvidia_com: bool,
    pub path: String,
    pub host: String,
}

pub fn credentials_status(client: &Client) -> Result<Reply<CredentialsOut>, ToolError> {
    let c = client.enroot_credentials_status().map_err(|e| ToolError::engine(e, "job_id"))?;
    let (summary, next) = if c.installed {
        (
            format!("enroot credentials for nvcr.io are installed on {} ({})", c.host, c.path),
            "private nvcr.io images can be pulled".to_string(),
        )
    } else {
        let why = match (&c.mode, c.has_nvcr_io) {
            (None, _) => "missing".to_string(),
            (Some(_), false) => "no nvcr.io entry".to_string(),
            (Some(m), true) => format!("mode {m}, not 600"),
        };
        (
            format!("enroot credentials are not installed on {} ({why})", c.host),
            "only private nvcr.io images need them. Installing is a step for the user, not you: ask them to run `tao-slurm credentials enroot` in their own terminal with NGC_KEY set; never ask for the key in the chat".to_string(),
        )
    };
    Ok(Reply::new(
        summary,
        next,
        CredentialsOut {
            installed: c.installed,
            exists: c.exists,
            mode: c.mode,
            has_nvcr_io: c.has_nvcr_io,
            has_authn_nvidia_com: c.has_authn_nvidia_com,
            path: c.path,
            host: c.host,
        },
    ))
}
