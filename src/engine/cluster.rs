//! Facts about the cluster that a submit checks against, in one round trip: its partitions and their
//! limits, and whether the job's input paths exist.

use crate::engine::{sections, SECTION};
use crate::error::{Error, Result};
use crate::remote::{Idempotency, Remote};
use crate::script::shell::quote;
use crate::slurm::{parse_partitions, PartitionInfo};

/// What the login host says before a submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitFacts {
    pub partitions: Vec<PartitionInfo>,
    /// Required paths that `test -e` did not find.
    pub missing_paths: Vec<String>,
    /// The image's squashfs file, when the cache already holds it.
    pub cached_sqsh: Option<String>,
    pub host: String,
}

/// The paths of `paths` that do not exist, one `missing` section each. Pure.
pub fn paths_script(paths: &[String]) -> String {
    let mut s = String::new();
    if !paths.is_empty() {
        s.push_str(&format!(
            "for p in {}; do [ -e \"$p\" ] || echo \"{SECTION}missing $p\"; done\n",
            paths.iter().map(|p| quote(p)).collect::<Vec<_>>().join(" ")
        ));
    }
    s
}

fn missing_from(stdout: &str) -> Vec<String> {
    sections(stdout).into_iter().filter(|(n, _, _)| n == "missing").map(|(_, p, _)| p).collect()
}

/// `extra` is appended to the script (the squashfs cache probe).
pub fn submit_facts(remote: &dyn Remote, required_paths: &[String], extra: &str) -> Result<SubmitFacts> {
    let script = format!(
        "{}{extra}echo '{SECTION}partitions'\nscontrol show partition -o || {{ echo 'tao-slurm: scontrol show partition failed' >&2; exit 3; }}\n",
        paths_script(required_paths)
    );
    let out = remote.run_script(&script, Idempotency::Idempotent)?;
    if out.exit_code != 0 {
        return Err(Error::RemoteCommand(format!("on {}: {}", out.host, out.stderr.trim())));
    }
    let partitions = sections(&out.stdout)
        .into_iter()
        .find(|(n, _, _)| n == "partitions")
        .map(|(_, _, body)| parse_partitions(&body))
        .unwrap_or_default();
    let cached_sqsh = sections(&out.stdout).into_iter().find(|(n, _, _)| n == "sqsh_cached").map(|(_, path, _)| path);
    Ok(SubmitFacts { partitions, missing_paths: missing_from(&out.stdout), cached_sqsh, host: out.host })
}

/// Each partition's limits and what its nodes have free now (one round trip; no job is involved).
pub fn partition_usage(remote: &dyn Remote) -> Result<(Vec<crate::slurm::PartitionUsage>, String)> {
    let script = format!(
        "echo '{SECTION}partitions'\nscontrol show partition -o || exit 3\necho '{SECTION}nodes'\nsinfo {} || exit 3\n",
        quote_args(crate::slurm::SINFO_NODES_ARGS)
    );
    let out = remote.run_script(&script, Idempotency::Idempotent)?;
    if out.exit_code != 0 {
        return Err(Error::RemoteCommand(format!("on {}: {}", out.host, out.stderr.trim())));
    }
    let secs = sections(&out.stdout);
    let body = |name: &str| secs.iter().find(|(n, _, _)| n == name).map(|(_, _, b)| b.clone()).unwrap_or_default();
    let partitions = parse_partitions(&body("partitions"));
    Ok((crate::slurm::parse_partition_usage(&partitions, &body("nodes")), out.host))
}

/// Space-separated arguments, each quoted.
fn quote_args(args: &str) -> String {
    args.split_whitespace().map(quote).collect::<Vec<_>>().join(" ")
}

/// `check-path`: which of the paths exist on the login host (one round trip).
pub fn missing_paths(remote: &dyn Remote, paths: &[String]) -> Result<(Vec<String>, String)> {
    let out = remote.run_script(&paths_script(paths), Idempotency::Idempotent)?;
    Ok((missing_from(&out.stdout), out.host))
}

#[cfg(test)]
mod tests {
    #[test]
    fn missing_paths_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let here = dir.path().display().to_string();
        let paths = vec![here.clone(), format!("{here}/nope"), "/also missing".to_string()];
        let out = std::process::Command::new("bash").arg("-c").arg(super::paths_script(&paths)).output().unwrap();
        assert_eq!(
            super::missing_from(&String::from_utf8(out.stdout).unwrap()),
            vec![format!("{here}/nope"), "/also missing".into()]
        );
    }
}
