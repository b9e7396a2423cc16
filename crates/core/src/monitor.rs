//! The monitor's pacing: how long to wait before the next refresh. Pure.

use std::time::Duration;

/// Scheduler queries one refresh costs at most (squeue, and sacct for jobs that left the queue).
pub const QUERIES_PER_REFRESH: u32 = 2;

/// What the monitor knows about the active jobs when it picks the next interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Seconds since the most recent submission or status change among active jobs.
    pub youngest_age_secs: i64,
    /// Seconds until the earliest scheduled retry is due, if any.
    pub next_retry_in_secs: Option<i64>,
    pub active_jobs: usize,
}

/// The shortest time between two refreshes the budget of scheduler queries per minute allows (each
/// refresh costs [`QUERIES_PER_REFRESH`]): the pace of every poller, the monitor's, a wait's, a log
/// follower's.
pub fn budget_floor(max_queries_per_minute: u32) -> Duration {
    Duration::from_secs_f64(60.0 * QUERIES_PER_REFRESH as f64 / max_queries_per_minute.max(1) as f64)
}

/// Often just after a submit or a change, less often for long runs, never more often than the budget
/// of scheduler queries per minute allows.
pub fn next_interval(pace: Pace, max_queries_per_minute: u32) -> Duration {
    let floor = budget_floor(max_queries_per_minute).as_secs_f64();
    // With no active job a refresh reads only the local state file (no remote call): look often, so
    // that jobs submitted by other processes are picked up at once.
    if pace.active_jobs == 0 {
        return Duration::from_secs(2);
    }
    let mut secs: f64 = {
        match pace.youngest_age_secs {
            a if a < 60 => 2.0,
            a if a < 600 => 5.0,
            a if a < 3600 => 15.0,
            _ => 60.0,
        }
    };
    if let Some(due) = pace.next_retry_in_secs {
        secs = secs.min(due.max(1) as f64);
    }
    Duration::from_secs_f64(secs.max(floor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(age: i64, retry: Option<i64>, active: usize) -> Pace {
        Pace { youngest_age_secs: age, next_retry_in_secs: retry, active_jobs: active }
    }

    #[test]
    fn adaptive_and_within_budget() {
        let cases = [
            (pace(5, None, 1), 60, 2.0),
            (pace(120, None, 1), 60, 5.0),
            (pace(1200, None, 1), 60, 15.0),
            (pace(7200, None, 1), 60, 60.0),
            (pace(7200, Some(3), 1), 60, 3.0),
            (pace(5, None, 1), 12, 10.0),
            (pace(5, None, 0), 1, 2.0),
        ];
        for (p, budget, want) in cases {
            assert_eq!(next_interval(p, budget), Duration::from_secs_f64(want), "{p:?} {budget}");
        }
    }
}
