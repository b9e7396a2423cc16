//! Refresh any number of jobs in one round trip: `squeue` for the user's live jobs, `sacct` only for
//! the ids squeue no longer lists, and the tail of each job's `status.json`, all in one remote script.

use crate::engine::{sections, SECTION};
use crate::error::Result;
use crate::remote::{Idempotency, Remote};
use crate::script::shell::quote;
use crate::slurm::{parse_sacct, parse_squeue, SacctRecord, SqueueRecord};
use crate::status::{last_status_line, map_status, PlatformStatus};
use crate::store::{JobRecord, StatusUpdate};
use std::collections::HashMap;

use crate::slurm::query::{SACCT_FIELDS, SQUEUE_FORMAT};

/// How far back sacct looks, so that its default window (since midnight) never hides a job.
const SACCT_LOOKBACK: &str = "now-30days";
/// Lines of status.json read per job: enough for the last status and progress message.
const STATUS_TAIL_LINES: u32 = 20;

/// What one refresh learned, before it is mapped to statuses.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Observations {
    /// None when squeue failed: nothing may be concluded from its silence.
    pub squeue: Option<Vec<SqueueRecord>>,
    /// None when sacct failed or was not needed.
    pub sacct: Option<Vec<SacctRecord>>,
    pub sacct_error: Option<String>,
    pub squeue_error: Option<String>,
    /// status.json text per platform job id.
    pub status_json: HashMap<String, String>,
}

/// The remote script for a set of (slurm job id, platform job id, status.json path). Pure.
pub fn refresh_script(jobs: &[(String, String, String)]) -> String {
    let ids: Vec<&str> = jobs.iter().map(|(s, _, _)| s.as_str()).collect();
    let mut s = String::new();
    s.push_str(&format!("sq=\"$(squeue --me -h -o {} 2>&1)\"; sq_rc=$?\n", quote(SQUEUE_FORMAT)));
    s.push_str(&format!("echo '{SECTION}squeue'\nprintf '%s\\n' \"$sq\"\necho \"{SECTION}rc squeue $sq_rc\"\n"));
    // Only ids that squeue does not list go to sacct (slower, and it lags the controller).
    s.push_str("missing=''\n");
    s.push_str(&format!("for id in {}; do\n", ids.iter().map(|i| quote(i)).collect::<Vec<_>>().join(" ")));
    s.push_str("  case \"\n$sq\" in *\"\n$id|\"*) ;; *) missing=\"$missing,$id\" ;; esac\ndone\n");
    s.push_str(&format!(
        "if [ \"$sq_rc\" -eq 0 ] && [ -n \"$missing\" ]; then\n  echo '{SECTION}sacct'\n  sacct -X -P -n -S {SACCT_LOOKBACK} -j \"${{missing#,}}\" --format={SACCT_FIELDS} 2>&1\n  echo \"{SECTION}rc sacct $?\"\nfi\n"
    ));
    for (_, job_id, path) in jobs {
        s.push_str(&format!(
            "if [ -f {p} ]; then echo '{SECTION}status_json {id}'; tail -n {STATUS_TAIL_LINES} {p}; echo; fi\n",
            p = quote(path),
            id = job_id
        ));
    }
    s.push_str("exit 0\n");
    s
}

/// Parse the refresh script's output. Pure.
pub fn parse_refresh_output(stdout: &str) -> Observations {
    let mut obs = Observations::default();
    let mut squeue_body = String::new();
    let mut sacct_body = String::new();
    for (name, arg, body) in sections(stdout) {
        match name.as_str() {
            "squeue" => squeue_body = body,
            "sacct" => sacct_body = body,
            "rc" => {
                let (which, code) = arg.split_once(' ').unwrap_or((&arg, ""));
                let ok = code.trim() == "0";
                match (which, ok) {
                    ("squeue", true) => obs.squeue = Some(parse_squeue(&squeue_body)),
                    ("squeue", false) => obs.squeue_error = Some(squeue_body.trim().to_string()),
                    ("sacct", true) => obs.sacct = Some(parse_sacct(&sacct_body)),
                    ("sacct", false) => obs.sacct_error = Some(sacct_body.trim().to_string()),
                    _ => {}
                }
            }
            "status_json" => {
                obs.status_json.insert(arg, body);
            }
            _ => {}
        }
    }
    obs
}

/// Decide each job's new status from the observations. Jobs about which nothing reliable was learned
/// get no update: no terminal verdict from missing data. Pure.
pub fn decide(jobs: &[JobRecord], obs: &Observations) -> Vec<(String, StatusUpdate)> {
    let mut updates = Vec::new();
    for job in jobs {
        let Some(slurm_id) = &job.slurm_job_id else {
            continue;
        };
        let status_json = obs.status_json.get(&job.job_id).map(String::as_str);
        let progress = status_json.and_then(last_status_line).and_then(|l| l.message);
        if let Some(rec) = obs.squeue.as_ref().and_then(|q| q.iter().find(|r| &r.job_id == slurm_id)) {
            let verdict = map_status(&rec.state, None, status_json);
            let mut message = verdict.message;
            if verdict.status == PlatformStatus::Pending && !rec.reason.is_empty() && rec.reason != "None" {
                message = format!("{message}, reason {}", rec.reason);
            }
            if let Some(p) = &progress {
                message = format!("{message}; last progress: {p}");
            }
            updates.push((
                job.job_id.clone(),
                StatusUpdate {
                    status: verdict.status,
                    message,
                    slurm_state: Some(rec.state.to_string()),
                    exit_code: None,
                    node_list: Some(rec.node_list.clone()).filter(|n| !n.is_empty()),
                },
            ));
            continue;
        }
        let Some(sacct) = &obs.sacct else { continue };
        let Some(rec) = sacct.iter().find(|r| &r.job_id == slurm_id) else {
            continue;
        };
        let mut verdict = map_status(&rec.state, rec.exit_code, status_json);
        if verdict.status == PlatformStatus::Error && rec.exit_code == Some(124) {
            // The script exits 124 only once its timeout requeues are used up.
            let times = if job.plan.requeue { job.plan.max_timeout_requeues + 1 } else { 1 };
            verdict.message = format!(
                "timed out {times} times: the inner timeout of {} s was reached on every run",
                job.plan.timeout_seconds
            );
        }
        updates.push((
            job.job_id.clone(),
            StatusUpdate {
                status: verdict.status,
                message: verdict.message,
                slurm_state: Some(rec.state_text.clone()),
                exit_code: rec.exit_code,
                node_list: Some(rec.node_list.clone()).filter(|n| !n.is_empty() && n != "None assigned"),
            },
        ));
    }
    updates
}

/// Refresh the given jobs (those with a Slurm id) in one round trip and store what changed.
pub fn refresh(remote: &dyn Remote, store: &crate::store::Store, jobs: &[JobRecord]) -> Result<Observations> {
    let targets: Vec<(String, String, String)> = jobs
        .iter()
        .filter_map(|j| j.slurm_job_id.as_ref().map(|s| (s.clone(), j.job_id.clone(), j.plan.layout.status_json())))
        .collect();
    if targets.is_empty() {
        return Ok(Observations::default());
    }
    let out = remote.run_script(&refresh_script(&targets), Idempotency::Idempotent)?;
    let obs = parse_refresh_output(&out.stdout);
    if let Some(e) = &obs.squeue_error {
        tracing::warn!(error = %e, "squeue failed; statuses left as they were");
    }
    if let Some(e) = &obs.sacct_error {
        tracing::warn!(error = %e, "sacct failed; finished jobs left as they were");
    }
    for (job_id, update) in decide(jobs, &obs) {
        store.update_status(&job_id, &update)?;
    }
    Ok(obs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::{settings, spec};
    use crate::store::now_secs;

    fn job(id: &str, slurm: &str) -> JobRecord {
        let plan = crate::plan::resolve_with_id(&spec(), &settings(), id).unwrap();
        JobRecord {
            job_id: id.into(),
            name: None,
            spec_json: "{}".into(),
            plan,
            status: PlatformStatus::Pending,
            message: String::new(),
            slurm_job_id: Some(slurm.into()),
            slurm_state: None,
            exit_code: None,
            node_list: None,
            login_host: None,
            created_at: now_secs(),
            updated_at: now_secs(),
        }
    }

    #[test]
    fn script_is_valid_bash_and_runs_against_stand_ins() {
        let jobs = vec![("11".to_string(), "a".to_string(), "/nonexistent/a/status.json".to_string())];
        let script = refresh_script(&jobs);
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path();
        std::fs::write(bin.join("squeue"), "#!/bin/sh\necho '10|RUNNING|None|node1|x|4:00:00'\n").unwrap();
        std::fs::write(bin.join("sacct"), "#!/bin/sh\necho \"ARGS $*\"\necho '11|COMPLETED|0:0|0:0|node2|a|b'\n")
            .unwrap();
        for f in ["squeue", "sacct"] {
            std::process::Command::new("chmod").arg("+x").arg(bin.join(f)).status().unwrap();
        }
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(&script)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .output()
            .unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(stdout.contains("-j 11 "), "sacct asked only for the id squeue did not list: {stdout}");
        let obs = parse_refresh_output(&stdout);
        assert_eq!(obs.squeue.as_ref().unwrap().len(), 1);
        assert_eq!(obs.sacct.as_ref().unwrap()[0].job_id, "11");
    }

    #[test]
    fn decisions() {
        let jobs = vec![job("a", "10"), job("b", "11"), job("c", "12"), job("d", "13")];
        let obs = Observations {
            squeue: Some(parse_squeue("10|PENDING|Resources|||4:00:00\n")),
            sacct: Some(parse_sacct("11|FAILED|3:0|0:0|node1|a|b\n12|CANCELLED by 0|0:15|0:0|node1|a|b\n")),
            ..Observations::default()
        };
        let d = decide(&jobs, &obs);
        let get = |id: &str| d.iter().find(|(j, _)| j == id).map(|(_, u)| u.clone());
        assert_eq!(get("a").unwrap().status, PlatformStatus::Pending);
        assert!(get("a").unwrap().message.contains("Resources"));
        assert_eq!(get("b").unwrap().status, PlatformStatus::Error);
        assert_eq!(get("b").unwrap().exit_code, Some(3));
        assert_eq!(get("c").unwrap().status, PlatformStatus::Canceled);
        assert!(get("d").is_none(), "a job neither command knows gets no verdict yet");
    }

    #[test]
    fn failed_squeue_changes_nothing() {
        let jobs = vec![job("a", "10")];
        let obs = parse_refresh_output(
            "@@tao-slurm:squeue\nslurm_load_jobs error: Socket timed out\n@@tao-slurm:rc squeue 1\n",
        );
        assert!(obs.squeue.is_none());
        assert!(decide(&jobs, &obs).is_empty());
    }
}
