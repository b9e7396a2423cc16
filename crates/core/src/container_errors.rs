//! The container runtime's own failures, from the lines real Pyxis 0.24 and Enroot 4.1 print in a
//! step's log (recorded in tests/fixtures/slurm-*/pyxis-*.txt): which cause, whose fault, and what to
//! do. Pure: the log comes in, a verdict comes out.

use regex::Regex;
use std::sync::LazyLock;

/// Why the container did not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerCause {
    /// The registry wants credentials the user's enroot file does not give (or gives wrong ones).
    Unauthorized,
    /// No such image or tag in the registry.
    ImageNotFound,
    /// A `--container-mounts` source path does not exist on the node.
    MountSourceMissing,
    /// The node ran out of space while importing or unpacking the image.
    NoSpace,
    /// The import failed for another reason (the registry unreachable, a broken layer, ...).
    ImportFailed,
}

/// Whose fault a container failure is: the user's (surfaced at once) or the cluster's (retried).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    User,
    Infra,
}

/// A classified container failure: its cause, whose fault, the line that shows it, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerFailure {
    pub cause: ContainerCause,
    pub fault: Fault,
    pub line: String,
    pub remediation: &'static str,
}

/// The remediation of a private image refused for want of credentials (shared with preflight's).
pub const CREDENTIALS_REMEDIATION: &str =
    "the registry refused the image without valid credentials: install your NGC key \
in ~/.config/enroot/.credentials on the cluster with `tao-slurm credentials enroot`, then resubmit";

/// Each cause: the lines that show it, in the order they are tried (the most specific first: a
/// missing image is also reported after an anonymous authentication).
struct Rule {
    cause: ContainerCause,
    fault: Fault,
    pattern: &'static str,
    remediation: &'static str,
}

const RULES: &[Rule] = &[
    Rule {
        cause: ContainerCause::MountSourceMissing,
        fault: Fault::User,
        pattern: r"pyxis: --container-mounts: source path does not exist: .*",
        remediation: "a mount's source path does not exist on the node: create it on the cluster's shared storage, or \
fix the job's mounts (its dataset roots and --mount values)",
    },
    Rule {
        cause: ContainerCause::ImageNotFound,
        fault: Fault::User,
        pattern: r"returned error code: 404 Not Found|manifest unknown|MANIFEST_UNKNOWN|NAME_UNKNOWN",
        remediation: "the registry has no such image or tag: check the image name and tag, and that the image exists in the registry",
    },
    Rule {
        cause: ContainerCause::Unauthorized,
        fault: Fault::User,
        pattern: r"returned error code: 40[13] (Unauthorized|Forbidden)|Could not process JSON input|Authenticating with user: <anonymous>",
        remediation: CREDENTIALS_REMEDIATION,
    },
    Rule {
        cause: ContainerCause::NoSpace,
        fault: Fault::Infra,
        pattern: r"(?i)No space left on device|Disk quota exceeded",
        remediation: "the node ran out of space for the image: the job is retried on other nodes; if it persists, free \
space in Enroot's cache and data paths or use the SQSH cache (--sqsh)",
    },
    Rule {
        cause: ContainerCause::ImportFailed,
        fault: Fault::Infra,
        pattern: r"pyxis: failed to (import docker image|create container filesystem)",
        remediation: "the image could not be imported or unpacked on the node: the job is retried; if it persists, \
check the registry from the cluster (enroot import) and the node's Enroot setup",
    },
];

static COMPILED: LazyLock<Vec<Regex>> =
    LazyLock::new(|| RULES.iter().map(|r| Regex::new(r.pattern).unwrap()).collect());

/// The container failure a step's log shows, if any. Only logs in which Pyxis reports a failure count
/// (a job's own output may print anything).
pub fn container_failure(log: &str) -> Option<ContainerFailure> {
    let pyxis_failed = log.lines().any(|l| {
        l.contains("pyxis: failed to")
            || l.contains("pyxis: --container-mounts:")
            || l.contains("spank_pyxis.so: task_init() failed")
    });
    if !pyxis_failed {
        return None;
    }
    RULES.iter().zip(COMPILED.iter()).find_map(|(rule, re)| {
        let line = log.lines().find(|l| re.is_match(l))?;
        Some(ContainerFailure {
            cause: rule.cause,
            fault: rule.fault,
            line: line.trim().to_string(),
            remediation: rule.remediation,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ContainerCause::*;

    const SLURM_22_05_UNAUTHORIZED: &str = include_str!("../tests/fixtures/slurm-22.05/pyxis-unauthorized.txt");
    const SLURM_22_05_NOT_FOUND: &str = include_str!("../tests/fixtures/slurm-22.05/pyxis-not-found.txt");
    const SLURM_22_05_MISSING_MOUNT: &str = include_str!("../tests/fixtures/slurm-22.05/pyxis-missing-mount.txt");
    const SLURM_24_11_UNAUTHORIZED: &str = include_str!("../tests/fixtures/slurm-24.11/pyxis-unauthorized.txt");
    const SLURM_24_11_NOT_FOUND: &str = include_str!("../tests/fixtures/slurm-24.11/pyxis-not-found.txt");
    const SLURM_24_11_MISSING_MOUNT: &str = include_str!("../tests/fixtures/slurm-24.11/pyxis-missing-mount.txt");

    #[test]
    fn real_pyxis_and_enroot_lines_get_their_cause_class_and_remediation() {
        let cases: &[(&str, ContainerCause, Fault, &str)] = &[
            (SLURM_22_05_UNAUTHORIZED, Unauthorized, Fault::User, "tao-slurm credentials enroot"),
            (SLURM_22_05_NOT_FOUND, ImageNotFound, Fault::User, "no such image"),
            (SLURM_22_05_MISSING_MOUNT, MountSourceMissing, Fault::User, "does not exist"),
            (SLURM_24_11_UNAUTHORIZED, Unauthorized, Fault::User, "tao-slurm credentials enroot"),
            (SLURM_24_11_NOT_FOUND, ImageNotFound, Fault::User, "no such image"),
            (SLURM_24_11_MISSING_MOUNT, MountSourceMissing, Fault::User, "does not exist"),
            // nvcr.io itself: its token endpoint answers a missing key with what Enroot cannot parse
            (
                "pyxis: failed to import docker image: nvcr.io#nvidia/x:1\n[ERROR] Could not process JSON input",
                Unauthorized,
                Fault::User,
                "tao-slurm credentials enroot",
            ),
            (
                "[ERROR] URL https://nvcr.io/v2/nvidia/x/manifests/1 returned error code: 401 Unauthorized\npyxis: failed to import docker image: nvcr.io#nvidia/x:1",
                Unauthorized,
                Fault::User,
                "credentials",
            ),
            (
                "pyxis: failed to import docker image: x\nmksquashfs: Write failed because No space left on device",
                NoSpace,
                Fault::Infra,
                "retried",
            ),
            (
                "pyxis: failed to import docker image: x\ncurl: (7) Failed to connect to nvcr.io port 443",
                ImportFailed,
                Fault::Infra,
                "retried",
            ),
        ];
        for (log, cause, fault, says) in cases {
            let f = container_failure(log).unwrap_or_else(|| panic!("no verdict for {log}"));
            assert_eq!((f.cause, f.fault), (*cause, *fault), "{log}");
            assert!(f.remediation.contains(says), "{}", f.remediation);
            assert!(log.contains(&f.line), "the evidence is a line of the log: {}", f.line);
        }
    }

    #[test]
    fn a_job_that_prints_such_lines_itself_is_not_a_container_failure() {
        assert_eq!(container_failure("returned error code: 404 Not Found\nNo space left on device"), None);
        assert_eq!(container_failure(""), None);
    }
}
