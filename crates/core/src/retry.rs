//! Failure classes and the retry policy. Pure: the evidence (state, exit code, log tail) comes in,
//! a class and the matching lines come out.

use crate::slurm::SlurmState;
use regex::RegexSet;
use serde::{Deserialize, Serialize};
use std::sync::LazyLock;

/// Resubmissions allowed per job (the contract's MAX_JOB_RETRIES).
pub const MAX_JOB_RETRIES: u32 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The cluster's fault (a node, a GPU, the fabric): retried on other nodes.
    Infra,
    /// The job's own fault: surfaced at once.
    User,
    Timeout,
    Preempted,
    Cancelled,
}

impl FailureClass {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Infra => "infra",
            FailureClass::User => "user",
            FailureClass::Timeout => "timeout",
            FailureClass::Preempted => "preempted",
            FailureClass::Cancelled => "cancelled",
        }
    }
}

/// The contract's infrastructure patterns (§5), except `RuntimeError.*CUDA`, which is refined below:
/// on its own it also matches a user's CUDA out-of-memory error.
const INFRA_PATTERNS: &[&str] = &[
    r"(?i)NVIDIA driver.*too old",
    r"(?i)CUDA driver version is insufficient",
    r"(?i)no CUDA-capable device",
    r"(?i)CUDA initialization.*error",
    r"(?i)NCCL.*error",
    r"(?i)GPU.*not found",
    r"(?i)RuntimeError.*CUDA error: (an illegal memory access|unspecified launch failure|uncorrectable ECC|device-side assert|misaligned address|unknown error|CUDA-capable device|initialization error)",
    r"(?i)cuInit.*failed",
    r"(?i)torch\.cuda\.is_available.*False",
    r"(?i)Unable to determine the device handle for GPU",
    r"(?i)GPU.*fallen off the bus",
    r"(?i)Xid.*error",
    r"(?i)ECC.*error",
    r"(?i)GPU.*temperature",
    r"(?i)InfiniBand.*error",
    r"(?i)RDMA.*error",
];

/// The infrastructure pattern (its text) that `line` matches, if any: what the TAO SDK's failure
/// analysis names as `pattern`.
pub fn infra_pattern_of(line: &str) -> Option<&'static str> {
    INFRA.0.matches(line).iter().next().map(|i| INFRA_PATTERNS[i])
}

/// Errors that are the job's own even when an infrastructure pattern also matches: running out of
/// GPU memory, missing files or modules, bad arguments.
const USER_PATTERNS: &[&str] = &[
    r"(?i)CUDA out of memory",
    r"(?i)OutOfMemoryError",
    r"FileNotFoundError",
    r"No such file or directory",
    r"ModuleNotFoundError",
    r"ImportError",
    r"SyntaxError",
    r"(?i)invalid (argument|choice|value)",
    r"KeyError",
    r"ValueError",
    r"TypeError",
    r"AssertionError",
];

static INFRA: LazyLock<(RegexSet, Vec<regex::Regex>)> = LazyLock::new(|| compile(INFRA_PATTERNS));
static USER: LazyLock<(RegexSet, Vec<regex::Regex>)> = LazyLock::new(|| compile(USER_PATTERNS));

fn compile(patterns: &[&str]) -> (RegexSet, Vec<regex::Regex>) {
    (RegexSet::new(patterns).unwrap(), patterns.iter().map(|p| regex::Regex::new(p).unwrap()).collect())
}

fn matching_lines(log: &str, set: &(RegexSet, Vec<regex::Regex>)) -> Vec<String> {
    log.lines().filter(|l| set.0.is_match(l)).take(5).map(|l| l.trim().to_string()).collect()
}

/// A classified failure and the lines that show why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub class: FailureClass,
    pub evidence: Vec<String>,
}

/// Classify a finished attempt that did not succeed. `log_tail` is the end of main.err and main.out
/// (empty when unknown: an empty log is never infra evidence).
pub fn classify(state: &SlurmState, exit_code: Option<i32>, log_tail: &str) -> Failure {
    let f = |class, evidence: Vec<String>| Failure { class, evidence };
    match state {
        SlurmState::NodeFail => f(FailureClass::Infra, vec!["Slurm state NODE_FAIL: a node of the job failed".into()]),
        SlurmState::BootFail => f(FailureClass::Infra, vec!["Slurm state BOOT_FAIL: a node failed to boot".into()]),
        SlurmState::OutOfMemory => f(
            FailureClass::User,
            vec!["Slurm state OUT_OF_MEMORY: the job used more host memory than it asked for".into()],
        ),
        SlurmState::Timeout | SlurmState::Deadline => f(FailureClass::Timeout, vec![format!("Slurm state {state}")]),
        SlurmState::Preempted => f(FailureClass::Preempted, vec!["Slurm state PREEMPTED".into()]),
        SlurmState::Cancelled | SlurmState::Revoked => f(FailureClass::Cancelled, vec![format!("Slurm state {state}")]),
        _ if exit_code == Some(crate::exit_codes::TIMED_OUT) => {
            f(FailureClass::Timeout, vec!["the inner timeout was reached (exit 124)".into()])
        }
        _ => {
            // The container did not start: Pyxis' and Enroot's own lines say why, and what to do.
            if let Some(c) = crate::container_errors::container_failure(log_tail) {
                let class = match c.fault {
                    crate::container_errors::Fault::User => FailureClass::User,
                    crate::container_errors::Fault::Infra => FailureClass::Infra,
                };
                return f(class, vec![c.line, c.remediation.to_string()]);
            }
            let user = matching_lines(log_tail, &USER);
            if !user.is_empty() {
                return f(FailureClass::User, user);
            }
            let infra = matching_lines(log_tail, &INFRA);
            if !infra.is_empty() {
                return f(FailureClass::Infra, infra);
            }
            let last: Vec<String> =
                log_tail.lines().rev().filter(|l| !l.trim().is_empty()).take(3).map(String::from).collect();
            let mut evidence = vec![format!("exit code {}", exit_code.map(|c| c.to_string()).unwrap_or("?".into()))];
            evidence.extend(last.into_iter().rev());
            f(FailureClass::User, evidence)
        }
    }
}

/// Seconds to wait before resubmission `retry` (1-based): base × 2^(retry-1), at most 10 minutes.
pub fn backoff_secs(retry: u32, base_secs: u64) -> u64 {
    base_secs.saturating_mul(1u64 << (retry.saturating_sub(1)).min(20)).min(600)
}

#[cfg(test)]
mod tests {
    use super::*;
    use FailureClass::*;

    #[test]
    fn classes() {
        let cases: &[(SlurmState, Option<i32>, &str, FailureClass)] = &[
            (SlurmState::NodeFail, None, "", Infra),
            (SlurmState::BootFail, None, "", Infra),
            (SlurmState::Failed, Some(1), "NCCL error: unhandled system error", Infra),
            (SlurmState::Failed, Some(1), "RuntimeError: CUDA error: an illegal memory access was encountered", Infra),
            (SlurmState::Failed, Some(1), "Xid 79 error: GPU has fallen off the bus", Infra),
            (SlurmState::Failed, Some(1), "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", User),
            (SlurmState::Failed, Some(1), "torch.OutOfMemoryError: CUDA out of memory", User),
            (
                SlurmState::Failed,
                Some(1),
                "Traceback (most recent call last):\n  File \"train.py\", line 3\nFileNotFoundError: [Errno 2] No such file or directory: '/data/x'",
                User,
            ),
            (SlurmState::Failed, Some(1), "Traceback (most recent call last):\nValueError: bad lr", User),
            (SlurmState::Failed, Some(1), "", User),
            (SlurmState::Failed, Some(2), "something else went wrong", User),
            (SlurmState::OutOfMemory, Some(0), "", User),
            (SlurmState::Timeout, None, "", Timeout),
            (SlurmState::Failed, Some(124), "", Timeout),
            (SlurmState::Cancelled, None, "", Cancelled),
            (SlurmState::Preempted, None, "", Preempted),
        ];
        for (state, code, log, want) in cases {
            assert_eq!(classify(state, *code, log).class, *want, "{state:?} {code:?} {log:?}");
        }
    }

    #[test]
    fn a_container_that_did_not_start_says_why_and_what_to_do() {
        let log = include_str!("../tests/fixtures/slurm-22.05/pyxis-unauthorized.txt");
        let f = classify(&SlurmState::Failed, Some(1), log);
        assert_eq!(f.class, User, "a credentials failure is not retried");
        assert!(f.evidence[0].contains("Authenticating with user: <anonymous>"), "{:?}", f.evidence);
        assert!(f.evidence[1].contains("tao-slurm credentials enroot"), "{:?}", f.evidence);
        let log = include_str!("../tests/fixtures/slurm-22.05/pyxis-missing-mount.txt");
        let f = classify(&SlurmState::Failed, Some(1), log);
        assert_eq!(f.class, User);
        assert!(f.evidence[0].ends_with("source path does not exist: /no/such/dir"), "{:?}", f.evidence);
    }

    #[test]
    fn the_pattern_of_a_matching_line_is_named() {
        assert_eq!(infra_pattern_of("ncclSystemError: NCCL error: x"), Some(r"(?i)NCCL.*error"));
        assert_eq!(infra_pattern_of("all fine"), None);
    }

    #[test]
    fn evidence_is_the_matching_lines() {
        let f = classify(
            &SlurmState::Failed,
            Some(1),
            "epoch 1\nNCCL WARN x\nncclSystemError: NCCL error: unhandled system error\nbye",
        );
        assert_eq!(f.evidence, vec!["ncclSystemError: NCCL error: unhandled system error"]);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!((1..=6).map(|r| backoff_secs(r, 30)).collect::<Vec<_>>(), vec![30, 60, 120, 240, 480, 600]);
        assert_eq!(backoff_secs(3, 0), 0);
    }
}
