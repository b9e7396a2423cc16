//! Settings and a spec for the engine's unit tests (the core's own fixtures are private to it).

use crate::config::{SettingSources, Settings};
use crate::spec::JobSpec;
use std::collections::HashMap;

pub fn settings() -> Settings {
    let env = [
        ("SLURM_USER", "alice"),
        ("SLURM_HOSTNAME", "login"),
        ("HOME", "/home/alice"),
        ("SLURM_BASE_RESULTS_DIR", "/lustre/alice"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Settings::from_sources(&SettingSources { flags: HashMap::new(), env, file: HashMap::new() }).unwrap()
}

pub fn spec() -> JobSpec {
    JobSpec { image: "ubuntu:22.04".into(), command: vec!["true".into()], ..JobSpec::default() }
}
