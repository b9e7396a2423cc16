//! The submit tool: the same checks and the same secret handling as `tao-slurm submit` (values by
//! variable name, from this server's environment or a secrets file; never in an argument or result).

use crate::args::SubmitArgs;
use crate::hints::after_submit;
use crate::reply::{Reply, ToolError};
use schemars::JsonSchema;
use serde::Serialize;
use tao_slurm_engine::client::{MonitorChoice, PlanSummary, PreviewChecks, Secrets, Submission, SubmitOptions};
use tao_slurm_engine::spec::{JobSpec, SpecError};
use tao_slurm_engine::Client;

#[derive(Debug, Serialize, JsonSchema)]
pub struct SubmitOut {
    pub dry_run: bool,
    pub job_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slurm_job_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub login_host: Option<String>,
    pub job_dir: String,
    /// What the job asks of the cluster: the client's plan summary (its job_dir and secret_env are
    /// also fields of this result, where they were first).
    pub resources: PlanSummary,
    /// Names of the secret variables the job gets (never their values).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secret_env: Vec<String>,
    /// E.g. training data fetched from s3:// inside the job (the GPUs idle while it downloads).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// dry_run: the checks that passed with the cluster.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<String>,
    /// dry_run: the batch script that would be submitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// dry_run: the files that would be staged on shared storage.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub staged_files: Vec<String>,
    /// A sweep's or pipeline's id: status, list (sweep_id), wait and cancel take it for all its jobs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep_id: Option<String>,
    /// A sweep's variants or a pipeline's steps: each one's job id, Slurm job id and values or name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobs: Option<serde_json::Value>,
    /// A background monitor was started (it performs retries while nobody calls status or wait).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monitor_started: Option<bool>,
}

/// The job the arguments describe: the job file (if any) with the arguments laid over it, as the
/// CLI lays its flags over it.
pub fn to_spec(args: &SubmitArgs) -> Result<JobSpec, ToolError> {
    let value = serde_json::to_value(args).expect("submit arguments serialise");
    let mut fields: JobSpec = serde_path_to_error::deserialize(value).map_err(|e| {
        // The sweep, steps and cosmos_rl arguments are free-form objects, checked only here.
        let path = e.path().to_string();
        if path.starts_with("sweep") || path.starts_with("steps") || path.starts_with("cosmos_rl") {
            return ToolError::invalid(&path, e.inner().to_string());
        }
        // Only a field of SubmitArgs that JobSpec lacks gets here: a bug, named as such.
        ToolError::failed(
            format!("internal: submit field {} is not a job field: {}", e.path(), e.inner()),
            "report this bug",
        )
    })?;
    if let Some(cosmos) = &mut fields.cosmos_rl {
        // A config named by path is read here, relative to this server's working directory.
        tao_slurm_engine::spec_file::read_cosmos_config(cosmos, std::path::Path::new("."))
            .map_err(|e| spec_error(&e.field.clone(), e))?;
    }
    let base = match &args.spec_file {
        Some(p) => tao_slurm_engine::spec_file::read_job_file(std::path::Path::new(p))
            .map_err(|e| spec_error("spec_file", e))?,
        None => JobSpec::default(),
    };
    Ok(base.overlay(fields))
}

fn spec_error(field: &str, e: SpecError) -> ToolError {
    ToolError::invalid(field, e.message)
}

/// A missing secret value, said with what to do: the value belongs in this server's environment.
fn secret_error(e: tao_slurm_engine::Error, field: &str) -> ToolError {
    match e {
        tao_slurm_engine::Error::Spec(s) if s.field == "secret_env" => ToolError::invalid("secret_env", s.message).with_next(
            "the value must be in the environment of this MCP server (or in secret_env_file): ask the user to set it there and restart the server; never put a secret value in a tool argument",
        ),
        e => ToolError::engine(e, field),
    }
}

pub fn submit(client: &Client, args: SubmitArgs) -> Result<Reply<SubmitOut>, ToolError> {
    let spec = to_spec(&args)?;
    let file = args.secret_env_file.as_ref().map(std::path::PathBuf::from);
    if args.dry_run {
        return dry_run(client, &spec, file);
    }
    let opts = SubmitOptions {
        secrets: Secrets::Lookup { file },
        monitor: MonitorChoice::Asked(args.monitor),
        admit: None,
        progress: None,
        recorded: None,
    };
    let outcome = client.submit(&spec, opts).map_err(|e| secret_error(e, "job_id"))?;
    let p = &outcome.plan;
    let mut out = SubmitOut {
        dry_run: false,
        job_id: outcome.submission.first_job().to_string(),
        slurm_job_id: None,
        login_host: None,
        job_dir: p.job_dir.clone(),
        resources: p.clone(),
        secret_env: p.secret_env.clone(),
        warnings: outcome.warnings.clone(),
        checks: Vec::new(),
        script: None,
        staged_files: Vec::new(),
        sweep_id: None,
        jobs: None,
        monitor_started: outcome.monitor_started,
    };
    let summary = match &outcome.submission {
        Submission::Job(j) => {
            (out.slurm_job_id, out.login_host) = (Some(j.slurm_job_id.clone()), Some(j.login_host.clone()));
            format!("submitted job {} (Slurm job {} via {})", j.job_id, j.slurm_job_id, j.login_host)
        }
        Submission::Sweep(s) => {
            (out.slurm_job_id, out.login_host) = (Some(s.slurm_array_id.clone()), Some(s.login_host.clone()));
            out.sweep_id = Some(s.sweep_id.clone());
            out.jobs = Some(serde_json::to_value(&s.variants).expect("serialisable"));
            format!(
                "submitted sweep {} ({} variants, Slurm job array {} via {})",
                s.sweep_id,
                s.variants.len(),
                s.slurm_array_id,
                s.login_host
            )
        }
        Submission::Pipeline(p) => {
            out.slurm_job_id = Some(p.steps[0].slurm_job_id.clone());
            out.sweep_id = Some(p.pipeline_id.clone());
            out.jobs = Some(serde_json::to_value(&p.steps).expect("serialisable"));
            let names: Vec<String> = p.steps.iter().map(|s| format!("{} ({})", s.name, s.job_id)).collect();
            format!("submitted pipeline {}: {}", p.pipeline_id, names.join(", "))
        }
    };
    Ok(Reply::new(summary, after_submit(outcome.submission.id()), out))
}

/// The online checks a submit would make, and the files it would stage (the client's one preview,
/// for a job, a sweep or a pipeline); nothing is submitted.
fn dry_run(
    client: &Client,
    spec: &JobSpec,
    secrets_file: Option<std::path::PathBuf>,
) -> Result<Reply<SubmitOut>, ToolError> {
    let checks = PreviewChecks::Online(Secrets::Lookup { file: secrets_file });
    // A missing secret value fails here as it would in a submit.
    let preview = client.preview(spec, checks).map_err(|e| secret_error(e, "job_id"))?;
    let plan = &preview.plan;
    let summary = PlanSummary::of(plan);
    let mut checks = vec!["settings and every job field are valid".to_string()];
    if !plan.required_paths.is_empty() {
        checks.push(format!("input paths exist on the cluster: {}", plan.required_paths.join(", ")));
    }
    checks.push(format!("partition {} exists and allows the wall time", plan.partition));
    if !plan.secret_names.is_empty() {
        checks.push(format!("secret values found for {}", plan.secret_names.join(", ")));
    }
    let jobs = if !preview.variants.is_empty() {
        Some(serde_json::to_value(&preview.variants).expect("variants serialise"))
    } else if !preview.steps.is_empty() {
        Some(serde_json::to_value(&preview.steps).expect("steps serialise"))
    } else {
        None
    };
    let kind = match (&preview.array, preview.steps.len()) {
        (Some(array), _) => {
            format!("a sweep of {} variants (one job array --array={array}); its first: ", preview.variants.len())
        }
        (None, 0) => String::new(),
        (None, n) => format!("a pipeline of {n} steps; its first: "),
    };
    let out = SubmitOut {
        sweep_id: None,
        jobs,
        dry_run: true,
        job_id: plan.layout.job_id.clone(),
        slurm_job_id: None,
        login_host: None,
        job_dir: summary.job_dir.clone(),
        resources: summary.clone(),
        secret_env: summary.secret_env.clone(),
        warnings: preview.warnings.clone(),
        checks,
        script: preview.files.last().map(|f| f.contents.clone()),
        staged_files: preview.files.iter().map(|f| f.path.clone()).collect(),
        monitor_started: None,
    };
    Ok(Reply::new(
        format!(
            "dry run passed: {kind}{} node(s) x {} GPU(s) on {}, nothing submitted",
            out.resources.nodes, out.resources.gpus_per_node, out.resources.partition
        ),
        "show the user the plan if they asked for it, then call submit without dry_run",
        out,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{parse, schema};
    use serde_json::json;

    #[test]
    fn every_job_field_is_a_submit_argument() {
        // A field added to JobSpec must be offered by the submit tool too, or `spec::doors` says why not.
        let submit = schema::<SubmitArgs>();
        let offered = submit["properties"].as_object().unwrap();
        assert!(offered.len() > 30, "{offered:?}");
        let missing = tao_slurm_engine::spec::doors::missing_at(tao_slurm_engine::spec::doors::Door::Mcp, |name| {
            offered.contains_key(name)
        });
        assert!(missing.is_empty(), "JobSpec fields missing from the submit tool's arguments: {missing:?}");
    }

    #[test]
    fn workdir_cosmos_rl_and_notify_reach_the_job() {
        let args: SubmitArgs = parse(
            json!({
                "image": "x/y:1", "command": ["python", "launch.py"], "workdir": ".",
                "notify": ["https://hooks.example/T0"],
                "cosmos_rl": {"config_text": "[policy.parallelism]\ntp_size = 8\n", "commands": {"controller": ["ctl"]}}
            })
            .as_object()
            .unwrap()
            .clone(),
        )
        .unwrap();
        let spec = to_spec(&args).unwrap();
        assert_eq!(spec.workdir.as_deref(), Some("."));
        assert_eq!(spec.notify, vec!["https://hooks.example/T0"]);
        let cosmos = spec.cosmos_rl.unwrap();
        assert!(cosmos.config_text.unwrap().contains("tp_size = 8"));
        assert_eq!(cosmos.commands.controller, vec!["ctl"]);
        let bad = parse::<SubmitArgs>(json!({"image": "x", "cosmos_rl": {"nope": 1}}).as_object().unwrap().clone())
            .map_err(|e| e.field)
            .and_then(|a| to_spec(&a).map_err(|e| e.field))
            .unwrap_err();
        assert!(bad.as_deref().is_some_and(|f| f.starts_with("cosmos_rl")), "{bad:?}");
    }

    #[test]
    fn arguments_become_the_job_they_name() {
        let args: SubmitArgs = parse(
            json!({
                "image": "ubuntu:22.04", "command": ["python", "train.py"], "gpus": 2, "nodes": 1,
                "env": {"A": "b"}, "secret_env": ["HF_TOKEN"], "sbatch_options": {"begin": "now+1hour"},
                "requeue": false, "dry_run": true, "monitor": true
            })
            .as_object()
            .unwrap()
            .clone(),
        )
        .unwrap();
        let spec = to_spec(&args).unwrap();
        assert_eq!(spec.image, "ubuntu:22.04");
        assert_eq!(spec.command, vec!["python", "train.py"]);
        assert_eq!((spec.gpus, spec.nodes, spec.requeue), (Some(2), Some(1), Some(false)));
        assert_eq!(spec.env["A"], "b");
        assert_eq!(spec.secret_env, vec!["HF_TOKEN"]);
        assert_eq!(spec.sbatch_options["begin"], "now+1hour");
    }

    #[test]
    fn sweep_after_and_steps_arguments_become_the_job_they_name() {
        let args: SubmitArgs = parse(
            json!({
                "image": "ubuntu:22.04", "command": ["train"], "after": ["abc:notok"],
                "sweep": {"grid": {"LR": ["0.1", "0.2"]}, "max_concurrent": 1}
            })
            .as_object()
            .unwrap()
            .clone(),
        )
        .unwrap();
        let spec = to_spec(&args).unwrap();
        assert_eq!(spec.after, vec!["abc:notok"]);
        assert_eq!(spec.sweep.unwrap().variants().unwrap().len(), 2);
        let args: SubmitArgs = parse(
            json!({"image": "x", "command": ["a"], "steps": [{"name": "one"}, {"name": "two", "command": ["b"]}]})
                .as_object()
                .unwrap()
                .clone(),
        )
        .unwrap();
        assert_eq!(to_spec(&args).unwrap().pipeline().unwrap()[1].spec.command, vec!["b"]);
    }

    #[test]
    fn a_missing_secret_names_the_field_and_never_a_value() {
        let spec = JobSpec { secret_env: vec!["TAO_SLURM_TEST_SURELY_UNSET".into()], ..JobSpec::default() };
        let e = secret_error(tao_slurm_engine::client::secret_values(&spec.secret_env, None).unwrap_err(), "job_id");
        assert_eq!(e.field.as_deref(), Some("secret_env"));
        assert!(e.message.contains("TAO_SLURM_TEST_SURELY_UNSET has no value"), "{}", e.message);
    }
}
