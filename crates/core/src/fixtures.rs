//! Settings and a spec for tests, shared with the engine's tests through the `test-fixtures` feature
//! (a crate's own test items are invisible to other crates).

use crate::config::{SettingSources, Settings};
use crate::spec::JobSpec;
use std::collections::HashMap;

/// Settings of a user `alice` on host `login`, results under /lustre/alice.
pub fn settings() -> Settings {
    let env = [
        ("SLURM_USER", "alice"),
        ("SLURM_HOSTNAME", "login"),
        ("HOME", "/home/alice"),
        ("SLURM_BASE_RESULTS_DIR", "/lustre/alice"),
        // No GPU sampler: the script tests count a job's steps (the sampler's own tests turn it on).
        ("TAO_SLURM_GPU_SAMPLE_SECS", "0"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Settings::from_sources(&SettingSources { flags: HashMap::new(), env, file: HashMap::new(), uid: Some(1000) })
        .unwrap()
}

/// A one-node job that runs `true` in ubuntu:22.04.
pub fn spec() -> JobSpec {
    JobSpec { image: "ubuntu:22.04".into(), command: vec!["true".into()], ..JobSpec::default() }
}

/// The summary of a job just recorded from `plan`: Pending, attempt 1, Slurm job `slurm_job_id`,
/// created at `now`; tests change the fields they are about.
pub fn summary(plan: &crate::plan::Plan, slurm_job_id: Option<&str>, now: i64) -> crate::model::JobSummary {
    use crate::model::{JobFacts, JobSummary};
    let job_id = plan.layout.job_id.clone();
    JobSummary {
        facts: JobFacts {
            name: None,
            status: crate::status::PlatformStatus::Pending,
            message: String::new(),
            slurm_job_id: slurm_job_id.map(String::from),
            slurm_state: None,
            exit_code: None,
            node_list: None,
            login_host: None,
            created_at: now,
            updated_at: now,
            attempt: 1,
            next_retry_at: None,
            excluded_nodes: String::new(),
            image: plan.image.pyxis.clone(),
            nodes: plan.resources.nodes,
            gpus_per_node: plan.resources.gpus_per_node,
            partition: plan.partition.clone(),
            cluster: None,
            pending_reason: None,
            sweep_id: None,
            sweep_index: None,
            checkpoint: None,
            gpu: None,
            job_id: job_id.clone(),
        },
        progress: None,
        attempt_name: format!("tao-job-{job_id}"),
        layout: plan.layout.clone(),
        timeout_seconds: plan.timeout_seconds,
        timeout_runs: 1,
        has_secrets: false,
        status_sig: None,
        submitted_at: None,
        unseen_since: None,
        gate: None,
        checkpoint_patterns: Vec::new(),
    }
}
