//! Why a job makes another attempt, and how many it may make: the causes an attempt records, what a
//! preempted job does (`--on-preempt`, with a budget of its own), and the total training budget
//! (`--total-time`) as a bound on the queue-length runs it may use. Pure.

use serde::{Deserialize, Serialize};

/// Why an attempt after the first was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The inner timeout (the queue's length) ended the run before the training did.
    Timeout,
    /// An infrastructure failure (node, GPU, fabric) was retried.
    Infra,
    /// A job of a higher-priority partition took the nodes.
    Preempted,
    /// A paused job was resumed.
    Resumed,
    /// `retry` of a job that ended Error or Canceled.
    Retried,
}

impl Cause {
    pub const ALL: [Cause; 5] = [Cause::Timeout, Cause::Infra, Cause::Preempted, Cause::Resumed, Cause::Retried];

    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Timeout => "timeout",
            Cause::Infra => "infra",
            Cause::Preempted => "preempted",
            Cause::Resumed => "resumed",
            Cause::Retried => "retried",
        }
    }

    pub fn parse(text: &str) -> Option<Cause> {
        Cause::ALL.into_iter().find(|c| c.as_str() == text)
    }
}

/// What a preempted job does: a new attempt from its newest checkpoint (the default), or it ends
/// Canceled with the reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnPreempt {
    #[default]
    Resume,
    Cancel,
}

impl OnPreempt {
    pub fn as_str(self) -> &'static str {
        match self {
            OnPreempt::Resume => "resume",
            OnPreempt::Cancel => "cancel",
        }
    }

    /// `resume` or `cancel` (any case); otherwise what is wrong with `text`.
    pub fn parse(text: &str) -> Result<OnPreempt, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "resume" => Ok(OnPreempt::Resume),
            "cancel" => Ok(OnPreempt::Cancel),
            other => Err(format!("{other:?} is neither resume nor cancel")),
        }
    }
}

/// Preemptions a job survives by default before it ends Canceled (its own budget, apart from the
/// infrastructure retries').
pub const DEFAULT_MAX_PREEMPTIONS: u32 = 10;

/// The most queue-length runs a total training time may ask for.
pub const MAX_QUEUE_RUNS: u32 = 1000;

/// Seconds of training one queue-length run gives: until the warning before the inner timeout (the
/// step saves its checkpoint then, and what it does afterwards is not kept), or half the timeout
/// when the grace is longer than that; the whole timeout when the job is not warned (`grace` 0).
pub fn useful_seconds(timeout_seconds: u64, grace_seconds: u64) -> u64 {
    timeout_seconds.saturating_sub(grace_seconds).max(timeout_seconds / 2)
}

/// The queue-length runs a training of `total_seconds` may use: as many as it needs at
/// [`useful_seconds`] each, plus one spare for what every run loses (the start-up, the epoch in
/// progress at the warning); at least 2 and at most [`MAX_QUEUE_RUNS`].
pub fn queue_runs(total_seconds: u64, timeout_seconds: u64, grace_seconds: u64) -> u32 {
    let per_run = useful_seconds(timeout_seconds, grace_seconds).max(1);
    let needed = total_seconds.max(1).div_ceil(per_run);
    (needed + 1).min(u64::from(MAX_QUEUE_RUNS)) as u32
}

/// The job's total training time in seconds, checked: positive, at most a year.
pub fn total_seconds(hours: f64) -> Result<u64, String> {
    if !(hours.is_finite() && hours > 0.0 && hours <= 24.0 * 366.0) {
        return Err(format!("{hours} is not a training time in hours (more than 0, at most a year)"));
    }
    Ok((hours * 3600.0).ceil() as u64)
}

/// The status line of a job's attempts: `attempt 3 of at most 7 (timeout)` (the bound when the job
/// stated its total training time; the cause of the current attempt when it is not the first).
pub fn attempt_line(attempt: u32, at_most: Option<u32>, cause: Option<&str>) -> String {
    let mut s = format!("attempt {attempt}");
    if let Some(n) = at_most {
        s.push_str(&format!(" of at most {n}"));
    }
    if let Some(c) = cause {
        s.push_str(&format!(" ({c})"));
    }
    s
}

/// A job's attempts as its status says them: the queue-length run it is on (the first run and one
/// per timeout requeue) of the most it may use (`timeout_runs`, from its total training time or its
/// timeout requeues), and why its current attempt was made: `attempt 3 of at most 7 (timeout)`.
/// `causes` are the job's attempts' causes, first to last.
pub fn attempt_summary(causes: &[Option<&str>], timeout_runs: u32) -> String {
    let timeout_attempts = causes.iter().filter(|c| **c == Some(Cause::Timeout.as_str())).count();
    let current = causes.last().copied().flatten();
    attempt_line(1 + timeout_attempts as u32, (timeout_runs > 1).then_some(timeout_runs), current)
}

/// Why a job whose total training budget is spent ends Error.
pub fn budget_spent_message(runs: u32, total_seconds: u64) -> String {
    format!(
        "training budget spent: {} (its total training time of {} was not enough)",
        attempt_line(runs, Some(runs), Some(Cause::Timeout.as_str())),
        hours_text(total_seconds)
    )
}

/// Seconds as hours, as a person reads them (`20 h`, `0.01 h`).
fn hours_text(seconds: u64) -> String {
    if seconds.is_multiple_of(3600) {
        format!("{} h", seconds / 3600)
    } else {
        format!("{:.2} h", seconds as f64 / 3600.0)
    }
}

/// The status of a preempted job: how it goes on.
pub fn preempted_message(at: &str, nodes: &str, checkpoint: Option<&str>, next: PreemptNext) -> String {
    let head = format!("preempted at {at} on {}", if nodes.is_empty() { "?" } else { nodes });
    match next {
        PreemptNext::Resume { preemption, of } => format!(
            "{head}, resuming from {} (preemption {preemption} of at most {of})",
            checkpoint.unwrap_or("the start: no checkpoint yet")
        ),
        PreemptNext::Cancel => format!("{head}; canceled (on-preempt cancel)"),
        PreemptNext::BudgetSpent { of } => format!("{head}; canceled: preempted {of} times, its budget of preemptions"),
    }
}

/// What follows a preemption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreemptNext {
    /// A new attempt: this is preemption `preemption` of at most `of`.
    Resume { preemption: u32, of: u32 },
    /// The job asked to end Canceled.
    Cancel,
    /// The job was preempted more often than it may be.
    BudgetSpent { of: u32 },
}

/// A preempted job's next step: `preempted_before` is how many of its attempts were made after a
/// preemption.
pub fn after_preemption(on_preempt: OnPreempt, preempted_before: u32, max_preemptions: u32) -> PreemptNext {
    match on_preempt {
        OnPreempt::Cancel => PreemptNext::Cancel,
        OnPreempt::Resume if preempted_before < max_preemptions => {
            PreemptNext::Resume { preemption: preempted_before + 1, of: max_preemptions }
        }
        OnPreempt::Resume => PreemptNext::BudgetSpent { of: max_preemptions },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn queue_runs_table() {
        const H: u64 = 3600;
        // (total, timeout, grace, runs)
        let cases: &[(u64, u64, u64, u32)] = &[
            // A day of training in 4-hour queues (3.8 h inner timeout, warned 5 min before): 7 slots
            // of 3.72 h are needed, one more spare.
            (24 * H, 38 * H / 10, 300, 8),
            (20 * H, 38 * H / 10, 300, 7),
            // It fits in one run: one spare.
            (H, 38 * H / 10, 300, 2),
            // Not warned: the whole timeout counts.
            (3 * 30, 30, 0, 4),
            // A grace longer than half the timeout: half the timeout counts.
            (60, 30, 25, 5),
            // The sandbox's 30 s timeout warned 10 s before: 20 s per run.
            (48, 30, 10, 4),
            // Capped.
            (366 * 24 * H, 60, 0, MAX_QUEUE_RUNS),
            // A zero timeout never divides by zero.
            (10, 0, 0, 11),
        ];
        for &(total, timeout, grace, want) in cases {
            assert_eq!(queue_runs(total, timeout, grace), want, "{total} s in runs of {timeout} s, grace {grace}");
        }
    }

    #[test]
    fn total_time_is_checked() {
        assert_eq!(total_seconds(1.5).unwrap(), 5400);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 24.0 * 400.0] {
            assert!(total_seconds(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_lines_say_the_attempt_its_bound_and_its_cause() {
        assert_eq!(attempt_line(3, Some(7), Some("timeout")), "attempt 3 of at most 7 (timeout)");
        assert_eq!(attempt_line(1, Some(7), None), "attempt 1 of at most 7");
        assert_eq!(attempt_line(2, None, Some("preempted")), "attempt 2 (preempted)");
        assert_eq!(
            budget_spent_message(7, 20 * 3600),
            "training budget spent: attempt 7 of at most 7 (timeout) (its total training time of 20 h was not enough)"
        );
        let resume = PreemptNext::Resume { preemption: 1, of: 10 };
        assert_eq!(
            preempted_message("2026-12-04T18:42:24", "node4", Some("/r/train/epoch-3.pth"), resume),
            "preempted at 2026-12-04T18:42:24 on node4, resuming from /r/train/epoch-3.pth (preemption 1 of at most 10)"
        );
        assert!(preempted_message("t", "", None, resume).contains("on ?, resuming from the start: no checkpoint yet"));
        assert_eq!(
            preempted_message("t", "node1", None, PreemptNext::Cancel),
            "preempted at t on node1; canceled (on-preempt cancel)"
        );
    }

    #[test]
    fn the_summary_counts_queue_length_runs_and_names_the_current_cause() {
        assert_eq!(attempt_summary(&[None], 4), "attempt 1 of at most 4");
        assert_eq!(
            attempt_summary(&[None, Some("timeout"), Some("preempted"), Some("timeout")], 7),
            "attempt 3 of at most 7 (timeout)"
        );
        assert_eq!(attempt_summary(&[None, Some("retried")], 1), "attempt 1 (retried)");
    }

    #[test]
    fn preemption_table() {
        use OnPreempt::*;
        let cases = [
            (Resume, 0, 10, PreemptNext::Resume { preemption: 1, of: 10 }),
            (Resume, 9, 10, PreemptNext::Resume { preemption: 10, of: 10 }),
            (Resume, 10, 10, PreemptNext::BudgetSpent { of: 10 }),
            (Resume, 0, 0, PreemptNext::BudgetSpent { of: 0 }),
            (Cancel, 0, 10, PreemptNext::Cancel),
        ];
        for (on, before, max, want) in cases {
            assert_eq!(after_preemption(on, before, max), want, "{on:?} {before} {max}");
        }
        assert_eq!(OnPreempt::parse(" Cancel ").unwrap(), Cancel);
        assert!(OnPreempt::parse("requeue").is_err());
        for c in Cause::ALL {
            assert_eq!(Cause::parse(c.as_str()), Some(c));
        }
    }

    proptest! {
        /// The runs allowed always hold the whole training at the useful time per run (with one to
        /// spare, below the cap), and more training never allows fewer runs.
        #[test]
        fn the_budget_holds_the_training_and_grows_with_it(
            total in 1u64..(400 * 24 * 3600),
            more in 0u64..(100 * 3600),
            timeout in 1u64..(48 * 3600),
            grace in 0u64..7200,
        ) {
            let runs = queue_runs(total, timeout, grace);
            prop_assert!((2..=MAX_QUEUE_RUNS).contains(&runs));
            let per_run = useful_seconds(timeout, grace).max(1);
            if runs < MAX_QUEUE_RUNS {
                prop_assert!(u64::from(runs - 1) * per_run >= total);
                prop_assert!(u64::from(runs - 2) * per_run < total);
            }
            prop_assert!(queue_runs(total + more, timeout, grace) >= runs);
        }
    }
}
