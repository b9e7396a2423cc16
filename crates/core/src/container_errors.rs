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
    /// The image itself is damaged: a layer that does not decompress, a squashfs file cut short. The
    /// same image fails the same way on any node.
    CorruptImage,
    /// The import failed for another reason (the registry unreachable, ...).
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
    /// The line that shows it (the evidence).
    pattern: &'static str,
    /// A line the log must also have: the stage Pyxis failed in.
    with: Option<&'static str>,
    /// A line the log must not have.
    without: Option<&'static str>,
    remediation: &'static str,
}

/// Pyxis' line when unpacking the image into Enroot's data path failed (`enroot create`); when the
/// import failed it says `failed to import docker image`.
const CREATING: &str = r"pyxis: failed to create container filesystem";

/// curl's own error (`curl: (N) ...`): the transfer itself failed, whatever else broke after it.
const CURL_ERROR: &str = r"curl: \(\d+\)";

const RULES: &[Rule] = &[
    Rule {
        cause: ContainerCause::MountSourceMissing,
        fault: Fault::User,
        pattern: r"pyxis: --container-mounts: source path does not exist: .*",
        with: None,
        without: None,
        remediation: "a mount's source path does not exist on the node: create it on the cluster's shared storage, or \
fix the job's mounts (its dataset roots and --mount values)",
    },
    Rule {
        cause: ContainerCause::ImageNotFound,
        fault: Fault::User,
        pattern: r"returned error code: 404 Not Found|manifest unknown|MANIFEST_UNKNOWN|NAME_UNKNOWN",
        with: None,
        without: None,
        remediation: "the registry has no such image or tag: check the image name and tag, and that the image exists in the registry",
    },
    Rule {
        cause: ContainerCause::Unauthorized,
        fault: Fault::User,
        pattern: r"returned error code: 40[13] (Unauthorized|Forbidden)|Could not process JSON input|Authenticating with user: <anonymous>",
        with: None,
        without: None,
        remediation: CREDENTIALS_REMEDIATION,
    },
    // Unsquashfs into the data path: `Write on output file failed because No space left on device`.
    Rule {
        cause: ContainerCause::NoSpace,
        fault: Fault::Infra,
        pattern: r"(?i)No space left on device|Disk quota exceeded",
        with: Some(CREATING),
        without: None,
        remediation: "the node's Enroot data path (ENROOT_DATA_PATH), where Pyxis unpacks the image for the job, ran \
out of space: the job is retried on other nodes. `tao-slurm preflight` compares a node's free space there with the largest \
cached image; if it persists, ask the cluster admins for a larger ENROOT_DATA_PATH or to remove old containers there \
(`enroot list`, `enroot remove`)",
    },
    // The import's layers (`zstd: ... Write error : cannot write block : No space left on device`).
    Rule {
        cause: ContainerCause::NoSpace,
        fault: Fault::Infra,
        pattern: r"(?i)No space left on device|Disk quota exceeded",
        with: None,
        without: None,
        remediation: "the node ran out of space while importing the image (Enroot's cache and temporary paths hold \
its layers): the job is retried on other nodes; with the SQSH cache (on by default, --sqsh) the image is imported once \
on the conversion partition instead of on each job's nodes; if it persists, ask the cluster admins to free space in \
ENROOT_CACHE_PATH and ENROOT_TEMP_PATH",
    },
    // A squashfs image cut short or damaged: unsquashfs ends with `FATAL ERROR: File system corruption
    // detected` (after what it could not read: `read_id_table: failed to read id index table`, ...).
    Rule {
        cause: ContainerCause::CorruptImage,
        fault: Fault::User,
        pattern: r"FATAL ERROR: (File system corruption detected|failed to read file system tables)|Can't find a SQUASHFS superblock",
        with: Some(CREATING),
        without: None,
        remediation: "the squashfs image is damaged (cut short or corrupt), so every node fails on it the same way and \
the job is not retried: convert it again (`tao-slurm image import IMAGE --force` for the SQSH cache) or rebuild the \
file, then resubmit",
    },
    // A layer the registry served whole that does not decompress (`pigz: skipping: <stdin>: corrupted --
    // incomplete deflate data`); a transfer cut short says so in curl's own line instead.
    Rule {
        cause: ContainerCause::CorruptImage,
        fault: Fault::User,
        pattern: r"(pigz|gzip|zstd): .*(corrupt|not in gzip format|unexpected end of file|invalid compressed data)|Checksum mismatch: .*",
        with: None,
        without: Some(CURL_ERROR),
        remediation: "a layer of the image is damaged in the registry (it does not decompress, or its checksum does \
not match), so every node fails on it the same way and the job is not retried: push the image again, or use another \
tag",
    },
    // Anything else of the import: curl's or Enroot's own error line is the evidence, Pyxis' the last resort.
    Rule {
        cause: ContainerCause::ImportFailed,
        fault: Fault::Infra,
        pattern: r"curl: \(\d+\) .*|\[ERROR\] .*",
        with: None,
        without: None,
        remediation: IMPORT_FAILED,
    },
    Rule {
        cause: ContainerCause::ImportFailed,
        fault: Fault::Infra,
        pattern: r"pyxis: failed to (import docker image|create container filesystem)",
        with: None,
        without: None,
        remediation: IMPORT_FAILED,
    },
];

const IMPORT_FAILED: &str = "the image could not be imported or unpacked on the node: the job is retried; if it \
persists, check the registry from the cluster (enroot import) and the node's Enroot setup";

/// Each rule's three regular expressions: its line, the line the log must have, the one it must not.
type Compiled = (Regex, Option<Regex>, Option<Regex>);

static COMPILED: LazyLock<Vec<Compiled>> = LazyLock::new(|| {
    let re = |p: &str| Regex::new(p).unwrap();
    RULES.iter().map(|r| (re(r.pattern), r.with.map(re), r.without.map(re))).collect()
});

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
    let any = |re: &Regex| log.lines().any(|l| re.is_match(l));
    RULES.iter().zip(COMPILED.iter()).find_map(|(rule, (re, with, without))| {
        if with.as_ref().is_some_and(|w| !any(w)) || without.as_ref().is_some_and(any) {
            return None;
        }
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
    // dev/sandbox/record-container-failures.sh: a 4 MiB tmpfs over node1's Enroot data path, then over
    // its cache path; a .sqsh image cut to its first MiB; a registry image whose layer is cut short.
    const NO_SPACE_DATA: &str = include_str!("../tests/fixtures/slurm-22.05/pyxis-no-space-data.txt");
    const NO_SPACE_CACHE: &str = include_str!("../tests/fixtures/slurm-22.05/pyxis-no-space-cache.txt");
    const CORRUPT_SQUASHFS: &str = include_str!("../tests/fixtures/slurm-22.05/pyxis-corrupt-squashfs.txt");
    const CORRUPT_LAYER: &str = include_str!("../tests/fixtures/slurm-22.05/pyxis-corrupt-layer.txt");

    /// The recorded "no space" and "damaged image" failures of the real Pyxis and Enroot: each its
    /// cause, whose fault (a full disk is the node's: retried elsewhere; a damaged image fails
    /// everywhere: surfaced at once), the line that shows it and what to do about that stage.
    #[test]
    fn recorded_no_space_and_damaged_images_get_their_cause_line_and_remedy() {
        let cases: &[(&str, ContainerCause, Fault, &str, &str)] = &[
            (
                NO_SPACE_DATA,
                NoSpace,
                Fault::Infra,
                "Write on output file failed because No space left on device",
                "ENROOT_DATA_PATH",
            ),
            (
                NO_SPACE_CACHE,
                NoSpace,
                Fault::Infra,
                "zstd: error 70 : Write error : cannot write block : No space left on device",
                "ENROOT_CACHE_PATH",
            ),
            (
                CORRUPT_SQUASHFS,
                CorruptImage,
                Fault::User,
                "FATAL ERROR: File system corruption detected",
                "tao-slurm image import IMAGE --force",
            ),
            (
                CORRUPT_LAYER,
                CorruptImage,
                Fault::User,
                "pigz: skipping: <stdin>: corrupted -- incomplete deflate data",
                "push the image again",
            ),
        ];
        for (log, cause, fault, line, says) in cases {
            let f = container_failure(log).unwrap_or_else(|| panic!("no verdict for {log}"));
            assert_eq!((f.cause, f.fault), (*cause, *fault), "{log}");
            assert!(f.line.ends_with(line), "the line that shows it: {}", f.line);
            assert!(log.lines().any(|l| l.trim() == f.line), "a line of the log: {}", f.line);
            assert!(f.remediation.contains(says), "{}", f.remediation);
        }
        // A transfer cut short is the network's, not the image's: retried.
        let cut = CORRUPT_LAYER.replace(
            "pigz: skipping",
            "curl: (18) transfer closed with outstanding read data remaining\nslurmstepd-node1: error: pyxis:     pigz: skipping",
        );
        let f = container_failure(&cut).unwrap();
        assert_eq!((f.cause, f.fault), (ImportFailed, Fault::Infra), "{f:?}");
        assert!(f.line.ends_with("curl: (18) transfer closed with outstanding read data remaining"), "{f:?}");
    }

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
