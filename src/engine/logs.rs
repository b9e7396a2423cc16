//! Read a job's main.out and main.err in one round trip.

use crate::engine::{sections, SECTION};
use crate::error::{Error, Result};
use crate::remote::{Idempotency, Remote};
use crate::script::shell::quote;
use crate::store::JobRecord;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JobLogs {
    pub job_id: String,
    pub slurm_job_id: String,
    pub stdout_path: String,
    pub stderr_path: String,
    pub stdout: String,
    pub stderr: String,
}

/// `tail` (or `cat` when `tail_lines` is None) of both files, in marked sections. Pure.
pub fn logs_script(out_path: &str, err_path: &str, tail_lines: Option<u32>) -> String {
    let reader = match tail_lines {
        Some(n) => format!("tail -n {n}"),
        None => "cat".to_string(),
    };
    let mut s = String::new();
    for (name, path) in [("stdout", out_path), ("stderr", err_path)] {
        s.push_str(&format!(
            "echo '{SECTION}{name}'\nif [ -f {p} ]; then {reader} {p}; else echo '{SECTION}missing'; fi\n",
            p = quote(path)
        ));
    }
    s.push_str("exit 0\n");
    s
}

pub fn read_logs(remote: &dyn Remote, job: &JobRecord, tail_lines: Option<u32>) -> Result<JobLogs> {
    let slurm_job_id = job
        .slurm_job_id
        .clone()
        .ok_or_else(|| Error::RemoteCommand(format!("job {} has no Slurm job yet, so it has no logs", job.job_id)))?;
    let dir = job.plan.layout.log_dir(&slurm_job_id);
    let (out_path, err_path) = (format!("{dir}/main.out"), format!("{dir}/main.err"));
    let out = remote.run_script(&logs_script(&out_path, &err_path, tail_lines), Idempotency::Idempotent)?;
    let mut logs = JobLogs {
        job_id: job.job_id.clone(),
        slurm_job_id,
        stdout_path: out_path,
        stderr_path: err_path,
        stdout: String::new(),
        stderr: String::new(),
    };
    let mut in_stdout = true;
    for (name, _, body) in sections(&out.stdout) {
        let slot = match name.as_str() {
            "stdout" => {
                in_stdout = true;
                &mut logs.stdout
            }
            "stderr" => {
                in_stdout = false;
                &mut logs.stderr
            }
            "missing" if in_stdout => {
                logs.stdout = "(not written yet)\n".into();
                continue;
            }
            "missing" => {
                logs.stderr = "(not written yet)\n".into();
                continue;
            }
            _ => continue,
        };
        *slot = body;
    }
    Ok(logs)
}
