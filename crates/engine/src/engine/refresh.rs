//! Refresh any number of jobs in one round trip: `squeue` for the user's live jobs, `sacct` only for
//! the ids squeue no longer lists, and the tail of each job's `status.json` that changed since it was
//! last read, all in one remote script whose cost barely grows with the number of jobs.

use crate::ops::refresh::*;

use crate::engine::retry::handle_failures;
use crate::error::Result;
use crate::ops::failure::is_attempt_failure;
use crate::ops::failure::RetryPolicy;
use crate::remote::{Idempotency, Remote};
use crate::store::{JobRecord, JobSummary};
use std::collections::HashMap;

/// Observe the given jobs in one round trip: what squeue, sacct and their status.json say, and the
/// login host that answered.
pub fn observe(remote: &dyn Remote, jobs: &[JobSummary]) -> Result<(Observations, String)> {
    let targets: Vec<RefreshTarget> = jobs.iter().map(RefreshTarget::of).collect();
    let started = std::time::Instant::now();
    tracing::debug!(jobs = jobs.len(), "refresh observing");
    let out = remote.run_script(&refresh_script(&targets), Idempotency::Idempotent)?;
    drop(targets);
    let obs = parse_refresh_output(&out.stdout);
    tracing::debug!(jobs = jobs.len(), remote_ms = started.elapsed().as_millis() as u64, "refresh observed");
    Ok((obs, out.host))
}

/// Each squeue or sacct line not understood (the job it names gets no verdict from it and waits) is
/// logged once per process, not on every refresh.
fn log_unread(jobs: &[JobSummary], obs: &Observations) {
    use std::sync::{Mutex, OnceLock};
    /// Distinct lines remembered; past this the memory starts again (a line may then be logged again).
    const REMEMBERED: usize = 10_000;
    static SEEN: OnceLock<Mutex<std::collections::HashSet<String>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    for u in unread(jobs, obs) {
        let first = seen.lock().map_or(true, |mut s| {
            if s.len() >= REMEMBERED {
                s.clear();
            }
            s.insert(u.what.clone())
        });
        if first {
            tracing::warn!(job = %u.job_id, slurm_job = %u.slurm_job_id, source = u.source,
                "Slurm output not understood, so the job gets no verdict from it and waits: {}", u.what);
        }
    }
}

/// Observe and record, without submitting due retries (see [`crate::engine::cycle::Cycle`] for the
/// whole cycle); returns the ids of the jobs whose records changed.
pub fn refresh(
    remote: &dyn Remote,
    store: &crate::store::Store,
    policy: &RetryPolicy,
    jobs: &[JobSummary],
) -> Result<Vec<String>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let (obs, host) = observe(remote, jobs)?;
    record(remote, store, policy, jobs, &obs, &host)
}

/// What an observer records (`mcp --read-only`): the statuses the observations decide and the
/// progress of status.json, nothing that acts on the cluster. A failed attempt (which the full cycle
/// turns into a retry or a verdict) and an interrupted submission found again (which the full cycle
/// releases) are left as they were for a full cycle, so that an observer never takes a decision
/// that a full cycle would have taken differently. Returns the ids of the jobs it wrote.
pub fn record_observed(
    store: &crate::store::Store,
    jobs: &[JobSummary],
    obs: &Observations,
    host: &str,
) -> Result<Vec<String>> {
    let by_id: HashMap<&str, &JobSummary> = jobs.iter().map(|j| (j.job_id.as_str(), j)).collect();
    let now = crate::clock::now();
    let decisions: Vec<Decision> = decide(jobs, obs, now)
        .into_iter()
        .filter(|d| d.adopt.is_none() && !is_attempt_failure(&d.update))
        .filter(|d| by_id.get(d.job_id.as_str()).is_none_or(|j| !changes_nothing(j, &d.update)))
        .collect();
    let settled: Vec<&Decision> = decisions.iter().collect();
    let sigs = changed_sigs(obs, &by_id);
    let unseen = unseen_changes(jobs, obs, now);
    store_settled(store, host, &by_id, &settled, &sigs, &unseen, now)?;
    keep_kpis(store, obs, now)?;
    Ok(touched_ids(&decisions, &unseen, &sigs))
}

/// Store what a refresh's observations decide; returns the ids of the jobs it wrote. Besides the
/// store it may make three round trips, each a named step below: the evidence of failed attempts
/// (which become retries or verdicts), the release of adopted submissions, and the removal of the
/// secrets of jobs that ended.
pub fn record(
    remote: &dyn Remote,
    store: &crate::store::Store,
    policy: &RetryPolicy,
    jobs: &[JobSummary],
    obs: &Observations,
    host: &str,
) -> Result<Vec<String>> {
    if let Some(e) = &obs.squeue_error {
        tracing::warn!(error = %e, "squeue failed; statuses left as they were");
    }
    if let Some(e) = &obs.sacct_error {
        tracing::warn!(error = %e, "sacct failed; finished jobs left as they were");
    }
    log_unread(jobs, obs);
    let by_id: HashMap<&str, &JobSummary> = jobs.iter().map(|j| (j.job_id.as_str(), j)).collect();
    let now = crate::clock::now();
    let decisions: Vec<Decision> = decide(jobs, obs, now)
        .into_iter()
        .filter(|d| d.adopt.is_some() || by_id.get(d.job_id.as_str()).is_none_or(|j| !changes_nothing(j, &d.update)))
        .collect();
    // Restarts of a Slurm job are attempts of their own before anything ends one.
    let looked = record_looks(store, jobs, obs, now)?;
    // Failures of an attempt are classified first (they may become retries, not verdicts).
    let (failed, settled): (Vec<&Decision>, Vec<&Decision>) =
        decisions.iter().partition(|d| is_attempt_failure(&d.update));
    classify_failures(remote, store, policy, &by_id, &failed)?;
    release_adopted(remote, &by_id, &settled)?;
    let sigs = changed_sigs(obs, &by_id);
    let unseen = unseen_changes(jobs, obs, now);
    store_settled(store, host, &by_id, &settled, &sigs, &unseen, now)?;
    keep_kpis(store, obs, now)?;
    // GPU views kept; an idle or hung job told of, cancelled or restarted (after the statuses above,
    // and not a job this refresh found no longer running: its attempt ended, or was retried).
    let moved: std::collections::HashSet<&str> = decisions
        .iter()
        .filter(|d| d.update.status != crate::status::PlatformStatus::Running)
        .map(|d| d.job_id.as_str())
        .collect();
    let gpu = crate::engine::gpu::record(remote, store, policy, jobs, &moved, obs, now)?;
    // Whatever way a job just ended (settled here, or by the failure handling above), its secrets go.
    crate::engine::secrets::sweep_or_warn(remote, store);
    let mut touched = touched_ids(&decisions, &unseen, &sigs);
    touched.extend(looked);
    touched.extend(gpu);
    touched.sort();
    touched.dedup();
    Ok(touched)
}

/// What the refresh found of the running jobs that resume: a newer checkpoint is kept, and each
/// restart of the job's Slurm job (its own requeue after the inner timeout, or Slurm's after a
/// preemption) becomes its next attempt, with its cause and the checkpoint it started from. Returns
/// the ids of the jobs it wrote.
fn record_looks(store: &crate::store::Store, jobs: &[JobSummary], obs: &Observations, now: i64) -> Result<Vec<String>> {
    let mut touched = Vec::new();
    for job in jobs {
        if let Some(c) = obs.checkpoints.get(&job.job_id).filter(|c| job.checkpoint.as_ref() != Some(*c)) {
            store.set_checkpoint(&job.job_id, c)?;
            touched.push(job.job_id.clone());
        }
        let Some(starts) = obs.starts.get(&job.job_id).filter(|s| s.iter().any(|s| s.restart > 0)) else { continue };
        let attempts = store.attempts(&job.job_id)?;
        for (attempt, restart) in (job.attempt..).zip(crate::ops::refresh::new_restarts(job, &attempts, starts)) {
            let message = format!(
                "attempt {} ({}): Slurm job {} restarted, from {}",
                attempt + 1,
                restart.cause.map_or("requeued", |c| c.as_str()),
                restart.slurm_job_id,
                restart.checkpoint.as_deref().unwrap_or("no checkpoint")
            );
            if !store.record_restart(&job.job_id, attempt, restart, &message, now)? {
                break;
            }
            touched.push(job.job_id.clone());
        }
    }
    Ok(touched)
}

/// One round trip for the failed attempts' evidence, then a retry or a verdict for each; only these
/// few jobs need their whole records.
fn classify_failures(
    remote: &dyn Remote,
    store: &crate::store::Store,
    policy: &RetryPolicy,
    by_id: &HashMap<&str, &JobSummary>,
    failed: &[&Decision],
) -> Result<()> {
    if failed.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = failed.iter().map(|d| d.job_id.as_str()).collect();
    let records: HashMap<String, JobRecord> =
        store.get_many(&ids)?.into_iter().map(|r| (r.job_id.clone(), r)).collect();
    // Only jobs still on the Slurm job that was observed: one retried or resumed since has a new one
    // (a restart of the same Slurm job, recorded just before, keeps its name).
    let observed = |r: &JobRecord| by_id.get(r.job_id.as_str()).is_none_or(|j| j.attempt_name == r.attempt_name);
    let failed: Vec<(&JobRecord, &Decision)> =
        failed.iter().filter_map(|d| records.get(&d.job_id).filter(|r| observed(r)).map(|j| (j, *d))).collect();
    handle_failures(remote, store, policy, &failed)
}

/// An adopted job may lack its log directory if its submitter died after sbatch (and be held, if an
/// earlier version submitted it): one round trip finishes those steps (both harmless when done).
fn release_adopted(remote: &dyn Remote, by_id: &HashMap<&str, &JobSummary>, settled: &[&Decision]) -> Result<()> {
    let adopted: Vec<(String, String, bool)> = settled
        .iter()
        .filter_map(|d| {
            let job = by_id.get(d.job_id.as_str())?;
            let id = d.adopt.as_ref()?;
            let held = d.update.pending_reason.as_deref() == Some("JobHeldUser");
            Some((job.layout.log_dir(&job.attempt_name, id), id.clone(), held))
        })
        .collect();
    if !adopted.is_empty() {
        remote.run_script(&crate::ops::submit::release_adopted_script(&adopted), Idempotency::Idempotent)?;
    }
    Ok(())
}

/// The settled statuses, adoptions, status.json signatures and unseen marks, in one transaction.
fn store_settled(
    store: &crate::store::Store,
    host: &str,
    by_id: &HashMap<&str, &JobSummary>,
    settled: &[&Decision],
    sigs: &[(&String, &String)],
    unseen: &[(String, Option<i64>)],
    now: i64,
) -> Result<()> {
    if settled.is_empty() && sigs.is_empty() && unseen.is_empty() {
        return Ok(());
    }
    store.in_transaction(|| {
        for (id, since) in unseen {
            store.set_unseen_since(id, *since)?;
        }
        for d in settled {
            if let Some(id) = &d.adopt {
                store.set_submitted(&d.job_id, id, host, now)?;
                store.add_event(
                    &d.job_id,
                    "adopted",
                    &format!("found Slurm job {id} by its name after an unknown submission outcome"),
                    now,
                )?;
            }
            // The jobs were read before the round trip: a retry, resume, cancel or pause since then
            // moved the job on from what these observations are about.
            let read = by_id.get(d.job_id.as_str()).map(|j| crate::store::AsRead::of(j));
            store.update_status_of(&d.job_id, read, &d.update, now)?;
        }
        for (id, sig) in sigs {
            store.set_status_sig(id, sig)?;
        }
        Ok::<(), crate::error::Error>(())
    })
}

/// Keep the progress lines of every status.json this refresh read (the job's KPIs over time).
fn keep_kpis(store: &crate::store::Store, obs: &Observations, now: i64) -> Result<()> {
    for (job_id, text) in &obs.status_json {
        let lines = crate::kpi::progress_lines(text);
        if !lines.is_empty() {
            store.add_kpi_lines(job_id, &lines, now)?;
        }
    }
    Ok(())
}

/// The status.json signatures a refresh saw that differ from the stored ones (those files are read
/// again next time only when they change again).
fn changed_sigs<'a>(obs: &'a Observations, by_id: &HashMap<&str, &JobSummary>) -> Vec<(&'a String, &'a String)> {
    obs.status_sigs
        .iter()
        .filter(|(id, sig)| by_id.get(id.as_str()).is_some_and(|j| j.status_sig.as_ref() != Some(*sig)))
        .collect()
}

/// Every job a refresh wrote: by a decision, an unseen-since mark or a new status.json signature.
fn touched_ids(decisions: &[Decision], unseen: &[(String, Option<i64>)], sigs: &[(&String, &String)]) -> Vec<String> {
    let mut touched: Vec<String> = decisions.iter().map(|d| d.job_id.clone()).collect();
    touched.extend(unseen.iter().map(|(id, _)| id.clone()));
    touched.extend(sigs.iter().map(|(id, _)| (*id).clone()));
    touched.sort();
    touched.dedup();
    touched
}
