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
    Settings::from_sources(&SettingSources { flags: HashMap::new(), env, file: HashMap::new() }).unwrap()
}

/// A one-node job that runs `true` in ubuntu:22.04.
pub fn spec() -> JobSpec {
    JobSpec { image: "ubuntu:22.04".into(), command: vec!["true".into()], ..JobSpec::default() }
}
