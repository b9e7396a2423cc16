//! The attempts this process is submitting now (waiting in a group commit, or in its round trip).
//! The monitor does not resume them as interrupted: under load (a Slurm rate limit, a burst of a
//! thousand creates) a submission can wait longer than `RESUME_SUBMISSION_AFTER_SECS` in its queue,
//! and resuming it would only find it in flight, at the cost of a round trip (and, before its id is
//! in its lock, an `squeue` RPC). Another process's submissions are not known here: their locks
//! keep them from being submitted twice.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

fn names() -> &'static Mutex<HashMap<String, usize>> {
    static NAMES: OnceLock<Mutex<HashMap<String, usize>>> = OnceLock::new();
    NAMES.get_or_init(Default::default)
}

/// An attempt (by its Slurm job name) held in flight until dropped.
pub struct InFlight(String);

/// Hold the attempt named `slurm_job_name` in flight until the claim is dropped.
pub fn claim(slurm_job_name: &str) -> InFlight {
    *names().lock().unwrap_or_else(|e| e.into_inner()).entry(slurm_job_name.to_string()).or_default() += 1;
    InFlight(slurm_job_name.to_string())
}

/// Whether this process is submitting the attempt named `slurm_job_name`.
pub fn is_in_flight(slurm_job_name: &str) -> bool {
    names().lock().unwrap_or_else(|e| e.into_inner()).contains_key(slurm_job_name)
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut names = names().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = names.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                names.remove(&self.0);
            }
        }
    }
}
