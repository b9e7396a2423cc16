//! Refresh any number of jobs in one round trip: `squeue` for the user's live jobs, `sacct` only for
//! the ids squeue no longer lists, and the tail of each job's `status.json`, all in one remote script.

use crate::engine::retry::{handle_failures, is_attempt_failure, RetryPolicy};
use crate::engine::{sections, unprefix_lines, PREFIX_LINES, SECTION};
use crate::error::Result;
use crate::remote::{Idempotency, Remote};
use crate::script::shell::quote;
use crate::slurm::{explain_pending, parse_sacct, parse_squeue, SacctRecord, SqueueRecord};
use crate::status::{last_status_line, last_status_raw, map_status, PlatformStatus};
use crate::store::{JobRecord, StatusUpdate};
use std::collections::{BTreeMap, HashMap};

use crate::slurm::query::{SACCT_FIELDS, SQUEUE_FORMAT};

/// How far back sacct looks, so that its default window (since midnight) never hides a job.
const SACCT_LOOKBACK: &str = "now-30days";
/// Every state, for sacct's `-s` (see the name lookup).
pub(crate) const SACCT_ALL_STATES: &str = "PD,R,RQ,RS,S,CA,CD,F,TO,NF,PR,OOM,BF,DL,RV";
/// Lines of status.json read per job: enough for the last status and progress message.
const STATUS_TAIL_LINES: u32 = 20;

/// What one refresh learned, before it is mapped to statuses.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Observations {
    /// None when squeue failed: nothing may be concluded from its silence.
    pub squeue: Option<Vec<SqueueRecord>>,
    /// sacct by job id; None when it failed or was not needed.
    pub sacct: Option<Vec<SacctRecord>>,
    /// sacct by job name, for jobs whose submission outcome is unknown.
    pub sacct_by_name: Option<Vec<SacctRecord>>,
    pub sacct_error: Option<String>,
    pub squeue_error: Option<String>,
    /// status.json text per platform job id.
    pub status_json: HashMap<String, String>,
    /// Slurm job ids that submitters wrote into attempts' lock directories, per platform job id.
    pub lock_ids: HashMap<String, String>,
}

/// One job to refresh.
#[derive(Debug, Clone, PartialEq)]
pub struct RefreshTarget {
    pub job_id: String,
    /// None when the submission's outcome is unknown: the job is then looked up by its name.
    pub slurm_job_id: Option<String>,
    pub job_name: String,
    /// The attempt's submission lock directory, where the submitter writes the Slurm job id.
    pub submit_lock: String,
    pub status_json: String,
}

impl RefreshTarget {
    pub fn of(job: &JobRecord) -> RefreshTarget {
        RefreshTarget {
            job_id: job.job_id.clone(),
            slurm_job_id: job.slurm_job_id.clone(),
            job_name: job.attempt_name.clone(),
            submit_lock: format!("{}/sbatch/.submit-{}", job.plan.layout.job_dir, job.attempt_name),
            status_json: job.plan.layout.status_json(),
        }
    }
}

/// A submitted job that neither squeue nor sacct knows after this long was lost by the scheduler
/// (sacct lags the controller by a second or so right after a job starts or ends).
pub const LOST_JOB_GRACE_SECS: i64 = 300;

/// The remote script for a set of jobs. Pure.
pub fn refresh_script(jobs: &[RefreshTarget]) -> String {
    let ids: Vec<String> = jobs.iter().filter_map(|j| j.slurm_job_id.as_deref().map(quote)).collect();
    let names: Vec<String> = jobs.iter().filter(|j| j.slurm_job_id.is_none()).map(|j| quote(&j.job_name)).collect();
    let mut s = String::new();
    s.push_str(&format!("sq=\"$(squeue --me -t all -h -O {} 2>&1)\"; sq_rc=$?\n", quote(SQUEUE_FORMAT)));
    s.push_str(&format!("echo '{SECTION}squeue'\nprintf '%s\\n' \"$sq\"\necho \"{SECTION}rc squeue $sq_rc\"\n"));
    // Only ids that squeue does not list go to sacct (slower, and it lags the controller). `comm` on
    // sorted lists keeps this linear in the number of jobs.
    s.push_str("missing=''\n");
    if !ids.is_empty() {
        s.push_str(&format!(
            "missing=\"$(comm -13 <(printf '%s\\n' \"$sq\" | cut -d'|' -f1 | sort -u) <(printf '%s\\n' {} | sort -u) | paste -sd, -)\"\n",
            ids.join(" ")
        ));
        s.push_str(&format!(
            "if [ \"$sq_rc\" -eq 0 ] && [ -n \"$missing\" ]; then\n  echo '{SECTION}sacct'\n  sacct -X -P -n -S {SACCT_LOOKBACK} -j \"$missing\" --format={SACCT_FIELDS} 2>&1\n  echo \"{SECTION}rc sacct $?\"\nfi\n"
        ));
    }
    for job in jobs.iter().filter(|j| j.slurm_job_id.is_none()) {
        s.push_str(&format!(
            "if [ -s {l}/slurm_job_id ]; then echo \"{SECTION}lock_id {id} $(cat {l}/slurm_job_id)\"; fi\n",
            l = quote(&job.submit_lock),
            id = job.job_id
        ));
    }
    if !names.is_empty() {
        s.push_str(&format!(
            // With a time window sacct skips jobs that were never eligible (held, then cancelled)
            // unless the states are listed explicitly.
            "echo '{SECTION}sacct_by_name'\nsacct -X -P -n -S {SACCT_LOOKBACK} -E now -s {SACCT_ALL_STATES} --name={} --format={SACCT_FIELDS} 2>&1\necho \"{SECTION}rc sacct_by_name $?\"\n",
            names.join(",")
        ));
    }
    // status.json of the jobs that may have progress or a verdict: running ones and those squeue no
    // longer lists (pending jobs are skipped). Grouped by results directory so each path is sent once;
    // lines are prefixed with `|` so that no line the container writes can pose as a marker.
    // Which Slurm ids need their status.json: running or finished ones, and `u` (jobs found by name).
    // awk does the set arithmetic: a shell loop over thousands of lines costs seconds.
    s.push_str(
        "need=\"$(printf '%s\\n' \"$sq\" | awk -F'|' '$2 !~ /^(PENDING|CONFIGURING|REQUEUED|REQUEUE_HOLD)$/ {print $1}'; printf '%s\\n' ${missing//,/ } u)\"\n",
    );
    let mut by_root: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for job in jobs {
        if let Some(root) = job.status_json.strip_suffix(&format!("/{}/status.json", job.job_id)) {
            // Jobs found by name have no id yet: `u` always reads.
            let key = job.slurm_job_id.as_deref().unwrap_or("u");
            by_root.entry(root).or_default().push(format!("{key}:{}", job.job_id));
        }
    }
    for (root, pairs) in by_root {
        s.push_str(&format!(
            "awk -F: 'NR == FNR {{ ok[$1] = 1; next }} ok[$1] {{ print $2 }}' <(printf '%s\\n' \"$need\") <(printf '%s\\n' {}) | \
             while read -r j; do f={}/\"$j\"/status.json; if [ -f \"$f\" ]; then echo \"{SECTION}status_json $j\"; tail -n {STATUS_TAIL_LINES} \"$f\" | {PREFIX_LINES}; fi; done\n",
            pairs.iter().map(|p| quote(p)).collect::<Vec<_>>().join(" "),
            quote(root)
        ));
    }
    s
}

/// Parse the refresh script's output. Pure.
pub fn parse_refresh_output(stdout: &str) -> Observations {
    let mut obs = Observations::default();
    let mut bodies: HashMap<String, String> = HashMap::new();
    for (name, arg, body) in sections(stdout) {
        match name.as_str() {
            "rc" => {
                let (which, code) = arg.split_once(' ').unwrap_or((&arg, ""));
                let body = bodies.remove(which).unwrap_or_default();
                let ok = code.trim() == "0";
                match (which, ok) {
                    ("squeue", true) => obs.squeue = Some(parse_squeue(&body)),
                    ("squeue", false) => obs.squeue_error = Some(body.trim().to_string()),
                    ("sacct", true) => obs.sacct = Some(parse_sacct(&body)),
                    ("sacct_by_name", true) => obs.sacct_by_name = Some(parse_sacct(&body)),
                    ("sacct" | "sacct_by_name", false) => obs.sacct_error = Some(body.trim().to_string()),
                    _ => {}
                }
            }
            "lock_id" => {
                if let Some((job, id)) = arg.split_once(' ') {
                    if !id.trim().is_empty() {
                        obs.lock_ids.insert(job.to_string(), id.trim().to_string());
                    }
                }
            }
            "status_json" => {
                let text: String = unprefix_lines(&body);
                obs.status_json.insert(arg, text);
            }
            other => {
                bodies.insert(other.to_string(), body);
            }
        }
    }
    obs
}

/// What a refresh decided for one job.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub job_id: String,
    /// A Slurm job found by name for a job whose submission outcome was unknown.
    pub adopt: Option<String>,
    pub update: StatusUpdate,
}

fn numeric_id(id: &str) -> u64 {
    id.parse().unwrap_or(0)
}

/// The script exits 124 only once its timeout requeues are used up.
fn timed_out_message(job: &JobRecord) -> String {
    let times = if job.plan.requeue { job.plan.max_timeout_requeues + 1 } else { 1 };
    format!("timed out {times} times: the inner timeout of {} s was reached on every run", job.plan.timeout_seconds)
}

/// Decide each job's new status from the observations. Jobs about which nothing reliable was learned
/// get no decision: no terminal verdict from missing data. Pure.
pub fn decide(jobs: &[JobRecord], obs: &Observations, now: i64) -> Vec<Decision> {
    let mut decisions = Vec::new();
    for job in jobs {
        let status_json = obs.status_json.get(&job.job_id).map(String::as_str);
        let progress_raw = status_json.and_then(last_status_raw);
        let progress = status_json.and_then(last_status_line).and_then(|l| l.message);
        let name = &job.attempt_name;
        let (slurm_id, adopt) = match &job.slurm_job_id {
            Some(id) => (id.clone(), None),
            None if obs.lock_ids.contains_key(&job.job_id) => {
                let id = obs.lock_ids[&job.job_id].clone();
                (id.clone(), Some(id))
            }
            None => {
                // Outcome unknown: find the job by its unique name (newest first), never resubmit.
                let live = obs
                    .squeue
                    .as_ref()
                    .and_then(|q| q.iter().filter(|r| &r.name == name).max_by_key(|r| numeric_id(&r.job_id)));
                let done = obs
                    .sacct_by_name
                    .as_ref()
                    .and_then(|a| a.iter().filter(|r| &r.name == name).max_by_key(|r| numeric_id(&r.job_id)));
                match live.map(|r| r.job_id.clone()).or_else(|| done.map(|r| r.job_id.clone())) {
                    Some(id) => (id.clone(), Some(id)),
                    // Not found yet: the retry engine resubmits the attempt once it is safe to (the
                    // submission script itself guarantees one sbatch per attempt).
                    None => {
                        continue;
                    }
                }
            }
        };
        if let Some(rec) = obs.squeue.as_ref().and_then(|q| q.iter().find(|r| r.job_id == slurm_id)) {
            let mut verdict = map_status(&rec.state, rec.exit_code, status_json);
            if verdict.status == PlatformStatus::Error && rec.exit_code == Some(124) {
                verdict.message = timed_out_message(job);
            }
            let mut message = verdict.message;
            if verdict.status == PlatformStatus::Pending && !rec.reason.is_empty() && rec.reason != "None" {
                message = match explain_pending(&rec.reason) {
                    Some((words, advice)) => format!("{message}, reason {}: {words} ({advice})", rec.reason),
                    None => format!("{message}, reason {}", rec.reason),
                };
            }
            if let Some(p) = &progress {
                message = format!("{message}; last progress: {p}");
            }
            decisions.push(Decision {
                job_id: job.job_id.clone(),
                adopt,
                update: StatusUpdate {
                    status: verdict.status,
                    message,
                    slurm_state: Some(rec.state.to_string()),
                    exit_code: if rec.state.is_finished() { rec.exit_code } else { None },
                    node_list: Some(rec.node_list.clone()).filter(|n| !n.is_empty() && n != "(null)"),
                    progress: progress_raw,
                },
            });
            continue;
        }
        let by_id = obs.sacct.as_ref().and_then(|a| a.iter().find(|r| r.job_id == slurm_id));
        let by_name = obs.sacct_by_name.as_ref().and_then(|a| a.iter().find(|r| r.job_id == slurm_id));
        if let Some(rec) = by_id.or(by_name) {
            // Right after a job ends, slurmdbd may hold a half-written record (JobName "allocation",
            // sometimes a wrong exit code). Only a record that carries our job name is settled.
            if !rec.name.is_empty() && &rec.name != name {
                continue;
            }
            // FAILED with exit code 0:0 is a contradiction sacct shows for a moment before the real
            // exit code arrives (seen in CI): not settled either.
            if rec.state == crate::slurm::SlurmState::Failed
                && rec.exit_code == Some(0)
                && rec.exit_signal.unwrap_or(0) == 0
            {
                continue;
            }
        }
        let Some(rec) = by_id.or(by_name) else {
            // Neither squeue nor sacct (both answered) knows the job: past the grace, it is lost.
            if obs.squeue.is_some() && obs.sacct.is_some() && now - job.created_at > LOST_JOB_GRACE_SECS {
                decisions.push(Decision {
                    job_id: job.job_id.clone(),
                    adopt,
                    update: StatusUpdate {
                        status: PlatformStatus::Error,
                        message: format!(
                            "lost by the scheduler: Slurm job {slurm_id} is neither in squeue (which listed {} of your jobs) nor in sacct (searched since {SACCT_LOOKBACK})",
                            obs.squeue.as_ref().map(Vec::len).unwrap_or(0)
                        ),
                        slurm_state: job.slurm_state.clone(),
                        exit_code: None,
                        node_list: None,
                        progress: progress_raw,
                    },
                });
            }
            continue;
        };
        let mut verdict = map_status(&rec.state, rec.exit_code, status_json);
        if verdict.status == PlatformStatus::Error && rec.exit_code == Some(124) {
            verdict.message = timed_out_message(job);
        }
        decisions.push(Decision {
            job_id: job.job_id.clone(),
            adopt,
            update: StatusUpdate {
                status: verdict.status,
                message: verdict.message,
                slurm_state: Some(rec.state_text.clone()),
                exit_code: rec.exit_code,
                node_list: Some(rec.node_list.clone()).filter(|n| !n.is_empty() && n != "None assigned"),
                progress: progress_raw,
            },
        });
    }
    decisions
}

/// Refresh the given jobs in one round trip and store what changed; returns the observations and the
/// host that answered.
pub fn refresh(
    remote: &dyn Remote,
    store: &crate::store::Store,
    policy: &RetryPolicy,
    jobs: &[JobRecord],
) -> Result<Observations> {
    let targets: Vec<RefreshTarget> = jobs.iter().map(RefreshTarget::of).collect();
    if targets.is_empty() {
        return Ok(Observations::default());
    }
    let started = std::time::Instant::now();
    let out = remote.run_script(&refresh_script(&targets), Idempotency::Idempotent)?;
    let remote_done = started.elapsed();
    let obs = parse_refresh_output(&out.stdout);
    record(remote, store, policy, jobs, &obs, &out.host)?;
    tracing::debug!(
        jobs = jobs.len(),
        remote_ms = remote_done.as_millis() as u64,
        total_ms = started.elapsed().as_millis() as u64,
        "refresh"
    );
    Ok(obs)
}

/// Store what a refresh's observations decide.
pub fn record(
    remote: &dyn Remote,
    store: &crate::store::Store,
    policy: &RetryPolicy,
    jobs: &[JobRecord],
    obs: &Observations,
    host: &str,
) -> Result<()> {
    if let Some(e) = &obs.squeue_error {
        tracing::warn!(error = %e, "squeue failed; statuses left as they were");
    }
    if let Some(e) = &obs.sacct_error {
        tracing::warn!(error = %e, "sacct failed; finished jobs left as they were");
    }
    let decisions = decide(jobs, obs, crate::store::now_secs());
    // Failures of an attempt are classified first (they may become retries, not verdicts).
    let (failed, settled): (Vec<&Decision>, Vec<&Decision>) =
        decisions.iter().partition(|d| is_attempt_failure(&d.update));
    let by_id: HashMap<&str, &JobRecord> = jobs.iter().map(|j| (j.job_id.as_str(), j)).collect();
    let failed: Vec<(&JobRecord, &Decision)> =
        failed.into_iter().filter_map(|d| by_id.get(d.job_id.as_str()).map(|j| (*j, d))).collect();
    handle_failures(remote, store, policy, &failed)?;
    // An adopted job may still be held, without its log directory, if its submitter died between
    // sbatch and release: finish those two steps (both are harmless when already done).
    let adopted: Vec<String> = settled
        .iter()
        .filter_map(|d| {
            let job = by_id.get(d.job_id.as_str())?;
            let id = d.adopt.as_ref()?;
            Some(format!(
                "mkdir -p {} && scontrol release {} >/dev/null 2>&1\n",
                quote(&job.plan.layout.log_dir(&job.attempt_name, id)),
                quote(id)
            ))
        })
        .collect();
    if !adopted.is_empty() {
        remote.run_script(&(adopted.concat() + "exit 0\n"), Idempotency::Idempotent)?;
    }
    let became_terminal: Vec<&JobRecord> = settled
        .iter()
        .filter(|d| d.update.status.is_terminal())
        .filter_map(|d| by_id.get(d.job_id.as_str()).copied())
        .collect();
    store.in_transaction(|| {
        for d in settled {
            if let Some(id) = &d.adopt {
                store.set_submitted(&d.job_id, id, host)?;
                store.add_event(
                    &d.job_id,
                    "adopted",
                    &format!("found Slurm job {id} by its name after an unknown submission outcome"),
                )?;
            }
            store.update_status(&d.job_id, &d.update)?;
        }
        Ok::<(), crate::error::Error>(())
    })?;
    remove_secrets(remote, &became_terminal)
}

/// A terminal job's secrets file is deleted (one round trip for all of them).
pub fn remove_secrets(remote: &dyn Remote, jobs: &[&JobRecord]) -> Result<()> {
    let dirs: Vec<String> =
        jobs.iter().filter(|j| !j.plan.secret_names.is_empty()).map(|j| quote(&j.plan.layout.secrets_dir())).collect();
    if !dirs.is_empty() {
        remote.run_script(&format!("rm -rf {}\n", dirs.join(" ")), Idempotency::Idempotent)?;
    }
    Ok(())
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
            progress: None,
            attempt: 1,
            attempt_name: format!("tao-job-{id}"),
            next_retry_at: None,
            excluded_nodes: String::new(),
        }
    }

    #[test]
    fn script_is_valid_bash_and_runs_against_stand_ins() {
        let jobs = vec![RefreshTarget {
            job_id: "a".into(),
            slurm_job_id: Some("11".into()),
            job_name: "tao-job-a".into(),
            submit_lock: "/nonexistent/lock".into(),
            status_json: "/nonexistent/a/status.json".into(),
        }];
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
        let jobs = vec![job("a", "10"), job("b", "11"), job("c", "12"), job("d", "13"), job("e", "14"), job("f", "15")];
        let obs = Observations {
            squeue: Some(parse_squeue("10|PENDING|Resources|||4:00:00|x\n")),
            sacct: Some(parse_sacct(
                "11|FAILED|3:0|0:0|node1|a|b\n12|CANCELLED by 0|0:15|0:0|node1|a|b\n14|FAILED|0:0|0:0|node1|a|b|allocation\n15|FAILED|0:0|0:0|node1|a|b|tao-job-f\n",
            )),
            ..Observations::default()
        };
        let d = decide(&jobs, &obs, now_secs());
        let get = |id: &str| d.iter().find(|x| x.job_id == id).map(|x| x.update.clone());
        assert_eq!(get("a").unwrap().status, PlatformStatus::Pending);
        assert!(get("a").unwrap().message.contains("Resources"));
        assert_eq!(get("b").unwrap().status, PlatformStatus::Error);
        assert_eq!(get("b").unwrap().exit_code, Some(3));
        assert_eq!(get("c").unwrap().status, PlatformStatus::Canceled);
        assert!(get("d").is_none(), "a job neither command knows gets no verdict yet");
        assert!(get("e").is_none(), "a half-written sacct record (JobName allocation) is not a verdict");
        assert!(get("f").is_none(), "FAILED with exit code 0:0 is not settled yet");
        let later = now_secs() + LOST_JOB_GRACE_SECS + 1;
        let d = decide(&jobs, &obs, later);
        let lost = d.iter().find(|x| x.job_id == "d").unwrap();
        assert_eq!(lost.update.status, PlatformStatus::Error);
        assert!(lost.update.message.contains("lost by the scheduler"), "{}", lost.update.message);
    }

    #[test]
    fn unknown_submissions_are_found_by_name_or_by_their_lock() {
        let mut unknown = job("u", "0");
        unknown.slurm_job_id = None;
        let name = unknown.plan.layout.job_name.clone();
        let obs = Observations {
            squeue: Some(parse_squeue(&format!("30|RUNNING|None|node1|x|4:00:00|0|{name}\n"))),
            sacct_by_name: Some(vec![]),
            ..Observations::default()
        };
        let d = decide(std::slice::from_ref(&unknown), &obs, now_secs());
        assert_eq!(d[0].adopt.as_deref(), Some("30"));
        assert_eq!(d[0].update.status, PlatformStatus::Running);
        let nothing = Observations { squeue: Some(vec![]), sacct_by_name: Some(vec![]), ..Observations::default() };
        assert!(
            decide(std::slice::from_ref(&unknown), &nothing, now_secs() + 3600).is_empty(),
            "not found: no verdict"
        );
        let locked = Observations {
            squeue: Some(vec![]),
            sacct: Some(parse_sacct("31|COMPLETED|0:0|0:0|node1|a|b\n")),
            lock_ids: [("u".to_string(), "31".to_string())].into(),
            ..Observations::default()
        };
        let d = decide(std::slice::from_ref(&unknown), &locked, now_secs());
        assert_eq!(d[0].adopt.as_deref(), Some("31"));
        assert_eq!(d[0].update.status, PlatformStatus::Complete);
    }

    #[test]
    fn failed_squeue_changes_nothing() {
        let jobs = vec![job("a", "10")];
        let obs = parse_refresh_output(
            "@@tao-slurm:squeue\nslurm_load_jobs error: Socket timed out\n@@tao-slurm:rc squeue 1\n",
        );
        assert!(obs.squeue.is_none());
        assert!(decide(&jobs, &obs, now_secs()).is_empty());
    }
}
