//! Which jobs a listing shows: one filter for every front-end (the CLI's `list`, the MCP `list` tool,
//! the service's job list, the Python package's `list_jobs`), and the two words they all parse: a
//! status name (TAO's names as aliases) and an age (`30m`, `2h`, `7d`).

use crate::spec::SpecError;
use crate::status::PlatformStatus;

/// What a listing keeps. Empty fields keep everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Only jobs that are not yet terminal.
    pub active_only: bool,
    /// Only jobs in one of these statuses.
    pub statuses: Vec<PlatformStatus>,
    /// Only jobs created within this many seconds before `now`.
    pub since_secs: Option<i64>,
    /// Only the jobs of these sweeps or pipelines (ids or prefixes; the client expands them).
    pub groups: Vec<String>,
    /// At most this many jobs, newest first (the total that matched is reported beside them).
    pub limit: Option<usize>,
}

impl JobFilter {
    /// Whether a job with this status, created at `created_at`, passes the filter's own tests (the
    /// group test needs the local state and is the client's).
    pub fn matches(&self, status: PlatformStatus, created_at: i64, now: i64) -> bool {
        (!self.active_only || !status.is_terminal())
            && (self.statuses.is_empty() || self.statuses.contains(&status))
            && self.since_secs.is_none_or(|age| now - created_at <= age)
    }
}

/// A status name of either vocabulary, any case: ours (`Complete`) or TAO's (`Done`).
pub fn parse_status(field: &str, text: &str) -> Result<PlatformStatus, SpecError> {
    PlatformStatus::parse(text).ok_or_else(|| {
        let names: Vec<&str> = PlatformStatus::ALL.iter().map(|s| s.as_str()).collect();
        SpecError::new(field, format!("{text:?} is not one of {} (or TAO's Done)", names.join(", ")))
    })
}

/// `30s`, `30m`, `2h`, `7d`, `1w` (a bare number is seconds) -> seconds.
pub fn parse_age(field: &str, text: &str) -> Result<i64, SpecError> {
    let bad = || SpecError::new(field, format!("{text:?} is not an age like 30m, 2h or 7d"));
    let trimmed = text.trim();
    let (num, unit) = trimmed.split_at(trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len()));
    let n: i64 = num.parse().map_err(|_| bad())?;
    let unit_secs = match unit {
        "s" | "" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        "w" => 7 * 86400,
        _ => return Err(bad()),
    };
    n.checked_mul(unit_secs).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages() {
        for (text, secs) in [("30", 30), ("30s", 30), ("30m", 1800), (" 2h ", 7200), ("7d", 604800), ("1w", 604800)] {
            assert_eq!(parse_age("since", text).unwrap(), secs, "{text}");
        }
        for text in ["", "h", "2x", "-3m", "1.5h", "99999999999999999999d"] {
            let e = parse_age("since", text).unwrap_err();
            assert_eq!(e.field, "since", "{text}");
            assert!(e.message.contains("30m, 2h or 7d"), "{text}: {e}");
        }
    }

    #[test]
    fn statuses_of_both_vocabularies() {
        for (text, status) in [
            ("Pending", PlatformStatus::Pending),
            ("running", PlatformStatus::Running),
            ("Complete", PlatformStatus::Complete),
            ("Done", PlatformStatus::Complete),
            ("DONE", PlatformStatus::Complete),
            ("Error", PlatformStatus::Error),
            ("Canceled", PlatformStatus::Canceled),
            ("Paused", PlatformStatus::Paused),
            ("pausing", PlatformStatus::Pausing),
            ("Resuming", PlatformStatus::Resuming),
        ] {
            assert_eq!(parse_status("status", text).unwrap(), status, "{text}");
        }
        let e = parse_status("status", "Finished").unwrap_err();
        assert_eq!(e.field, "status");
        assert!(e.message.contains("Pending, Running, Complete, Error, Canceled, Paused, Pausing, Resuming"), "{e}");
    }

    #[test]
    fn a_filter_keeps_what_every_test_admits() {
        let now = 10_000;
        let f = JobFilter {
            active_only: true,
            statuses: vec![PlatformStatus::Running, PlatformStatus::Complete],
            since_secs: Some(100),
            ..Default::default()
        };
        assert!(f.matches(PlatformStatus::Running, now - 100, now));
        assert!(!f.matches(PlatformStatus::Running, now - 101, now), "too old");
        assert!(!f.matches(PlatformStatus::Complete, now, now), "terminal with active_only");
        assert!(!f.matches(PlatformStatus::Pending, now, now), "status not asked for");
        assert!(JobFilter::default().matches(PlatformStatus::Error, 0, now), "the empty filter keeps all");
    }
}
