//! Dependencies that survive retries: the gate a job is submitted with, and, in every refresh cycle,
//! the re-pointing, releasing or cancelling of dependent jobs whose parents changed (the core's
//! `ops::depend` decides; one round trip runs what it decided).

use crate::ops::depend::*;

use crate::error::Result;
use crate::remote::{Idempotency, Remote};
use crate::spec::DependKind;
use crate::status::PlatformStatus;
use crate::store::{DependencyRow, StatusUpdate, Store};
use std::collections::BTreeMap;

fn edge(row: &DependencyRow) -> Edge {
    Edge {
        parent_id: row.parent.clone(),
        kind: DependKind::parse(&row.kind).unwrap_or(DependKind::Ok),
        parent_status: PlatformStatus::parse(&row.parent_status).unwrap_or(PlatformStatus::Pending),
        parent_slurm_id: row.parent_slurm_id.clone(),
    }
}

/// The gate a recorded job is first submitted with now; a job whose dependency can never be met is
/// recorded Canceled and refused (the `after` field names why).
pub fn gate_or_refuse(store: &Store, job_id: &str, now: i64) -> Result<Option<Gate>> {
    let gate = gate_of(store, job_id)?;
    if let Some(Gate::Never(message)) = &gate {
        store.update_status(job_id, &StatusUpdate::bare(PlatformStatus::Canceled, message.clone()), now)?;
        return Err(crate::spec::SpecError::new("after", format!("job {job_id} can never run: {message}")).into());
    }
    Ok(gate)
}

/// The gate job `job_id` is to be submitted with now; None when it depends on nothing.
pub fn gate_of(store: &Store, job_id: &str) -> Result<Option<Gate>> {
    let rows = store.open_dependencies(Some(job_id))?;
    if rows.is_empty() {
        return Ok(None);
    }
    Ok(Some(gate(&rows.iter().map(edge).collect::<Vec<_>>())))
}

/// The active jobs that `ids` depend on, transitively (a refresh of a dependent job refreshes what it
/// waits for, so that it can move on).
pub fn active_parents(store: &Store, ids: &[&str]) -> Result<Vec<String>> {
    // One query for every open dependency (none, usually): a refresh of thousands of jobs must not
    // ask once per job.
    let rows = store.open_dependencies(None)?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let edges: Vec<(&str, &str, PlatformStatus)> = rows
        .iter()
        .map(|r| {
            let status = PlatformStatus::parse(&r.parent_status).unwrap_or(PlatformStatus::Pending);
            (r.child.as_str(), r.parent.as_str(), status)
        })
        .collect();
    Ok(crate::ops::depend::active_parents(&edges, ids))
}

/// Bring every dependent job in line with its parents as stored now: re-point Slurm dependencies at
/// the parents' current attempts, release held jobs whose dependencies are met, cancel those that can
/// never run (recorded Canceled, "dependency <id> ended <status>"), and explain Slurm's
/// `DependencyNeverSatisfied` while a parent's retry is on its way. One round trip, only when there
/// is something to run. Returns the ids of the jobs it changed.
pub fn reconcile(remote: &dyn Remote, store: &Store) -> Result<Vec<String>> {
    // A cancelled job cancels the jobs after it in turn: a chain ends at once, not one job per cycle.
    let mut touched = Vec::new();
    for _ in 0..64 {
        let (changed, cancelled) = reconcile_pass(remote, store)?;
        touched.extend(changed);
        if !cancelled {
            break;
        }
    }
    touched.sort();
    touched.dedup();
    Ok(touched)
}

fn reconcile_pass(remote: &dyn Remote, store: &Store) -> Result<(Vec<String>, bool)> {
    let now = crate::clock::now();
    let rows = store.open_dependencies(None)?;
    if rows.is_empty() {
        return Ok((Vec::new(), false));
    }
    let mut by_child: BTreeMap<&str, Vec<Edge>> = BTreeMap::new();
    for row in &rows {
        by_child.entry(row.child.as_str()).or_default().push(edge(row));
    }
    let ids: Vec<&str> = by_child.keys().copied().collect();
    let children = store.summaries(&ids)?;
    let actions: Vec<Action> = children
        .iter()
        .filter_map(|c| {
            let child = Child {
                job_id: c.job_id.clone(),
                status: c.status,
                slurm_job_id: c.slurm_job_id.clone(),
                gate: c.gate.clone(),
                message: c.message.clone(),
            };
            reconcile_one(&child, by_child.get(c.job_id.as_str())?)
        })
        .collect();
    if actions.is_empty() {
        return Ok((Vec::new(), false));
    }
    let cancelled = actions.iter().any(|a| matches!(a, Action::Cancel { .. }));
    let script = depend_script(&actions);
    let results: BTreeMap<usize, bool> = if script.lines().count() > 1 {
        let out = remote.run_script(&script, Idempotency::Idempotent)?;
        parse_depend_output(&out.stdout).into_iter().collect()
    } else {
        BTreeMap::new()
    };
    let mut touched = Vec::new();
    store.in_transaction(|| -> Result<()> {
        for (i, action) in actions.iter().enumerate() {
            touched.extend(record_action(store, action, results.get(&i).copied(), now)?);
        }
        Ok(())
    })?;
    crate::engine::secrets::sweep_or_warn(remote, store);
    Ok((touched, cancelled))
}

/// Record what one action did (`ok`: what the cluster said of it; None when it ran nothing there).
/// Returns the job it changed.
fn record_action(store: &Store, action: &Action, ok: Option<bool>, now: i64) -> Result<Option<String>> {
    let done = ok == Some(true);
    match action {
        Action::Point { job_id, slurm_id, .. } if !done => {
            tracing::warn!(job = %job_id, "re-pointing the dependency of Slurm job {slurm_id} failed; tried again next cycle");
            Ok(None)
        }
        Action::Point { job_id, slurm_id, dependency, gate, .. } => {
            store.set_gate(job_id, gate)?;
            let to =
                if dependency.is_empty() { "none (its dependencies are met)".to_string() } else { dependency.clone() };
            store.add_event(job_id, "dependency", &format!("Slurm job {slurm_id} now depends on {to}"), now)?;
            // What this cycle's squeue said (DependencyNeverSatisfied, of the parent's failed
            // attempt) is no longer true.
            let job = store.summary(job_id)?;
            if job.status == PlatformStatus::Pending && job.message.contains(NEVER_SATISFIED) {
                let message =
                    format!("waiting for its dependencies: re-pointed to {to} (a retry of the job it runs after)");
                store.update_status(job_id, &StatusUpdate::keeping_slurm_of(&job, job.status, message), now)?;
            }
            Ok(Some(job_id.clone()))
        }
        Action::Release { .. } if !done => Ok(None),
        Action::Release { job_id, slurm_id } => {
            store.set_gate(job_id, "free")?;
            store.add_event(job_id, "dependency", &format!("dependencies met: Slurm job {slurm_id} released"), now)?;
            Ok(Some(job_id.clone()))
        }
        Action::Cancel { job_id, message, .. } => {
            // It can never run, whatever scancel said (a held or never-satisfied job does not start).
            let job = store.summary(job_id)?;
            let update = StatusUpdate::keeping_slurm_of(&job, PlatformStatus::Canceled, message.clone());
            store.update_status(job_id, &update, now)?;
            store.set_gate(job_id, "never")?;
            Ok(Some(job_id.clone()))
        }
        Action::Explain { job_id, message } => {
            let job = store.summary(job_id)?;
            store.update_status(job_id, &StatusUpdate::keeping_slurm_of(&job, job.status, message.clone()), now)?;
            Ok(Some(job_id.clone()))
        }
    }
}

fn reconcile_one(child: &Child, edges: &[Edge]) -> Option<Action> {
    crate::ops::depend::reconcile(child, edges)
}
