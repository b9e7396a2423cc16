//! The one wait: follow jobs until something changes or they are all terminal, refreshing at the
//! monitor's pace within the query budget. A poll ([`Client::wait_step`]) refreshes the jobs, reads
//! their events after the cursor and turns them into status changes; [`Client::wait_for`] loops over
//! it for the CLI's `watch` and the library. MCP's `wait` (async, cancellable) and Python's `wait`
//! (interruptible by Ctrl-C) drive the same step from their own loops, sleeping the pause it returns.

use super::{Client, JobCallbacks, JobView};
use crate::error::Result;
use crate::model::EventRecord;
use crate::monitor::{budget_floor, next_interval, Pace};
use crate::status::PlatformStatus;
use serde::Serialize;
use std::collections::HashMap;
use std::time::Duration;

/// Events read at most per poll (a wait over thousands of jobs reads the rest at the next poll).
const MAX_EVENTS: usize = 10_000;

/// One job's platform status changing (or a new attempt starting), from its event history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Change {
    pub job_id: String,
    pub from: String,
    pub to: String,
    pub attempt: u32,
    /// The event's own words (Slurm state, exit code, reason).
    pub detail: String,
    /// Unix seconds.
    pub at: i64,
}

/// A job's platform status and attempt, as its history tells them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    status: String,
    attempt: u32,
}

impl Default for Seen {
    /// A job is recorded Pending, attempt 1.
    fn default() -> Seen {
        Seen { status: "Pending".into(), attempt: 1 }
    }
}

/// Apply one event to what is known of its job; the change it makes, if it changes the platform
/// status or starts an attempt (a Slurm state change within one status, or a submission, is not one).
/// Status events read `<Status> (Slurm <STATE>): <message>`; an unreadable one counts as a change,
/// so that a wait ends early rather than misses one. Pure.
fn apply(seen: &mut Seen, e: &EventRecord) -> Option<Change> {
    let before = seen.clone();
    match e.kind.as_str() {
        "status" => {
            let word = e.detail.split_whitespace().next().unwrap_or("");
            match PlatformStatus::parse(word) {
                Some(s) if s.as_str() == seen.status => return None,
                Some(s) => seen.status = s.as_str().to_string(),
                None => seen.status = word.to_string(),
            }
        }
        "retry" => {
            seen.status = "Pending".into();
            seen.attempt += 1;
        }
        _ => return None,
    }
    Some(Change {
        job_id: e.job_id.clone(),
        from: before.status,
        to: seen.status.clone(),
        attempt: seen.attempt,
        detail: e.detail.clone(),
        at: e.at,
    })
}

/// What each job was at `cursor`, from its events up to it. Pure.
fn seen_at(history: &[EventRecord], cursor: i64) -> HashMap<String, Seen> {
    let mut seen: HashMap<String, Seen> = HashMap::new();
    for e in history.iter().filter(|e| e.id <= cursor) {
        apply(seen.entry(e.job_id.clone()).or_default(), e);
    }
    seen
}

/// The changes that the events after the cursor make to what was seen at it. Pure.
fn changes_after(seen: &HashMap<String, Seen>, events: &[EventRecord]) -> Vec<Change> {
    let mut seen = seen.clone();
    events.iter().filter_map(|e| apply(seen.entry(e.job_id.clone()).or_default(), e)).collect()
}

/// The monitor's pacing inputs for the jobs waited for. Pure.
fn pace(views: &[JobView], now: i64) -> Pace {
    let active: Vec<&JobView> = views.iter().filter(|j| !j.status.is_terminal()).collect();
    Pace {
        youngest_age_secs: active.iter().map(|j| now - j.updated_at).min().unwrap_or(0),
        next_retry_in_secs: active.iter().filter_map(|j| j.next_retry_at).map(|at| at - now).min(),
        active_jobs: active.len(),
    }
}

/// A wait in progress: the jobs (full ids), the cursor it started from and what was seen at it.
#[derive(Debug, Clone)]
pub struct Wait {
    ids: Vec<String>,
    start_cursor: i64,
    seen: HashMap<String, Seen>,
    /// A fixed pause between polls (never under the query budget's floor); None: the monitor's pace.
    interval: Option<Duration>,
}

impl Wait {
    /// The jobs waited for (full ids); empty when there was nothing to wait for.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }
    /// The cursor the wait started from.
    pub fn start_cursor(&self) -> i64 {
        self.start_cursor
    }
}

/// One poll of a wait.
#[derive(Debug, Clone, Serialize)]
pub struct WaitTick {
    pub views: Vec<JobView>,
    /// Status changes (and retries) since the wait's cursor, oldest first.
    pub changes: Vec<Change>,
    /// Past every event read of these jobs: where the next wait starts to hear only later changes.
    pub cursor: i64,
    pub all_terminal: bool,
    /// The jobs tao-slurm paused (`pause`): they stay Paused until someone resumes them.
    pub paused: Vec<String>,
    /// Every job is terminal or paused by tao-slurm: nothing changes any more without a person, so a
    /// wait ends here rather than wait for ever.
    pub all_settled: bool,
    /// How long to sleep before the next poll.
    #[serde(serialize_with = "secs")]
    pub pause: Duration,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Client {
    /// Begin a wait on `ids` (ids, prefixes, sweep or pipeline ids; none: every active job), hearing
    /// of changes after `cursor` (an event id; None: from now). `interval` fixes the pause between
    /// polls (floored by the query budget); None paces like the monitor. No remote call.
    pub fn wait_start(&self, ids: &[String], cursor: Option<i64>, interval: Option<Duration>) -> Result<Wait> {
        let start_cursor = match cursor {
            Some(c) => c,
            None => self.last_event_id()?,
        };
        let views = if ids.is_empty() {
            self.list(&super::JobFilter { active_only: true, ..Default::default() })?.jobs
        } else {
            self.stored_jobs(ids)?
        };
        let ids: Vec<String> = views.into_iter().map(|v| v.facts.job_id).collect();
        let seen = if ids.is_empty() {
            HashMap::new()
        } else {
            seen_at(&self.events_since(0, &ids, MAX_EVENTS)?, start_cursor)
        };
        Ok(Wait { ids, start_cursor, seen, interval })
    }

    /// One poll: refresh the jobs (one round trip), read their events after the wait's cursor, and
    /// say what changed and how long to sleep before the next poll.
    pub fn wait_step(&self, wait: &Wait) -> Result<WaitTick> {
        let views = self.refresh(&wait.ids)?;
        let found = self.events_since(wait.start_cursor, &wait.ids, MAX_EVENTS)?;
        let budget = self.settings().max_queries_per_minute;
        let pause = match wait.interval {
            Some(i) => i.max(budget_floor(budget)),
            None => next_interval(pace(&views, super::now_secs()), budget),
        };
        let paused_by_us = self.store.paused_by_us_among(views.iter().map(|v| (v.job_id.as_str(), v.status)))?;
        let paused: Vec<String> =
            views.iter().filter(|v| paused_by_us.contains(&v.job_id)).map(|v| v.job_id.clone()).collect();
        Ok(WaitTick {
            all_terminal: views.iter().all(|v| v.status.is_terminal()),
            all_settled: views.iter().all(|v| v.status.is_terminal() || paused_by_us.contains(&v.job_id)),
            paused,
            changes: changes_after(&wait.seen, &found),
            cursor: found.last().map(|e| e.id).unwrap_or(wait.start_cursor),
            views,
            pause,
        })
    }

    /// Poll until every job is terminal or paused by tao-slurm (`all_settled`), or `on_tick` says to
    /// stop (returns true), sleeping the pause between polls. Never gives up because time passed.
    /// Returns the last poll.
    pub fn wait_for(&self, wait: &Wait, on_tick: &mut dyn FnMut(&WaitTick) -> bool) -> Result<WaitTick> {
        loop {
            let tick = self.wait_step(wait)?;
            if on_tick(&tick) || tick.all_settled {
                return Ok(tick);
            }
            std::thread::sleep(tick.pause);
        }
    }

    /// Follow one job until it is terminal or paused by tao-slurm, calling `callbacks` on each
    /// transition, polling every `interval`. Returns the final view.
    pub fn wait_for_job(&self, id: &str, interval: Duration, callbacks: &mut dyn JobCallbacks) -> Result<JobView> {
        let wait = self.wait_start(&[id.to_string()], None, Some(interval))?;
        let (mut heard, mut attempt) = (0, 1);
        let last = self.wait_for(&wait, &mut |tick| {
            let view = &tick.views[0];
            for change in tick.changes.iter().skip(heard) {
                if change.attempt > attempt {
                    attempt = change.attempt;
                    callbacks.on_retry(view);
                }
                match change.to.as_str() {
                    "Running" => callbacks.on_running(view),
                    "Complete" => callbacks.on_complete(view),
                    "Error" => callbacks.on_error(view),
                    _ => {}
                }
            }
            heard = tick.changes.len();
            false
        })?;
        Ok(last.views.into_iter().next().expect("a wait on one job refreshes it"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: i64, job: &str, kind: &str, detail: &str) -> EventRecord {
        EventRecord { id, job_id: job.into(), at: id, kind: kind.into(), detail: detail.into() }
    }

    fn history() -> Vec<EventRecord> {
        vec![
            event(1, "a", "created", "job recorded"),
            event(2, "a", "submitted", "Slurm job 7 via login1"),
            event(3, "a", "status", "Pending (Slurm PENDING): Slurm state PENDING"),
            event(4, "b", "created", "job recorded"),
            event(5, "a", "status", "Running (Slurm RUNNING): running on node1"),
            event(6, "a", "status", "Running (Slurm COMPLETING): completing"),
            event(7, "a", "retry", "node failure: attempt 2 in 1 s"),
            event(8, "a", "status", "Complete (Slurm COMPLETED): exit code 0"),
        ]
    }

    #[test]
    fn a_slurm_state_within_one_status_is_no_change() {
        let h = history();
        let seen = seen_at(&h, 2);
        let changes = changes_after(&seen, &h[2..4]);
        assert!(changes.is_empty(), "PENDING while Pending, and a new job's creation: {changes:?}");
        let seen = seen_at(&h, 5);
        assert!(changes_after(&seen, &h[5..6]).is_empty(), "COMPLETING is still Running");
    }

    #[test]
    fn status_changes_and_retries_are_changes_from_what_the_cursor_saw() {
        let h = history();
        let seen = seen_at(&h, 3);
        let changes = changes_after(&seen, &h[3..]);
        let steps: Vec<(&str, &str, u32)> =
            changes.iter().map(|c| (c.from.as_str(), c.to.as_str(), c.attempt)).collect();
        assert_eq!(steps, vec![("Pending", "Running", 1), ("Running", "Pending", 2), ("Pending", "Complete", 2)]);
        assert!(changes_after(&seen_at(&h, 8), &[]).is_empty());
    }

    #[test]
    fn an_unreadable_status_event_counts_as_a_change() {
        let seen = seen_at(&history(), 3);
        let changes = changes_after(&seen, &[event(9, "a", "status", "Whatever happened")]);
        assert_eq!(changes.len(), 1);
    }
}
