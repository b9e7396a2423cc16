//! Facts about the cluster, their scripts and the readers of their output: what a submit checks
//! against (partitions and their limits, which input paths exist, the cached squashfs file) and what
//! the service's cluster view shows (each partition's free GPUs). The engine's `cluster` runs them.

use crate::protocol::{sections, SECTION};
use crate::script::shell::quote;
use crate::slurm::{parse_partitions, PartitionInfo, PartitionUsage};

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

/// The paths of `paths` that do not exist, one `missing` section each.
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

/// The paths [`paths_script`] reported missing.
pub fn missing_from(stdout: &str) -> Vec<String> {
    sections(stdout).into_iter().filter(|(n, _, _)| n == "missing").map(|(_, p, _)| p).collect()
}

/// The submit's facts script: the path checks, `extra` (the squashfs cache probe), the partitions.
pub fn submit_facts_script(required_paths: &[String], extra: &str) -> String {
    format!(
        "{}{extra}echo '{SECTION}partitions'\nscontrol show partition -o || {{ echo 'tao-slurm: scontrol show partition failed' >&2; exit 3; }}\n",
        paths_script(required_paths)
    )
}

/// Read [`submit_facts_script`]'s output (of a run that exited 0).
pub fn parse_submit_facts(stdout: &str, host: &str) -> SubmitFacts {
    let secs = sections(stdout);
    let partitions =
        secs.iter().find(|(n, _, _)| n == "partitions").map(|(_, _, body)| parse_partitions(body)).unwrap_or_default();
    let cached_sqsh = secs.iter().find(|(n, _, _)| n == "sqsh_cached").map(|(_, path, _)| path.clone());
    let missing_paths = secs.iter().filter(|(n, _, _)| n == "missing").map(|(_, p, _)| p.clone()).collect();
    SubmitFacts { partitions, missing_paths, cached_sqsh, host: host.to_string() }
}

/// The checks a submission made with known facts runs itself, once its lock is held and before
/// anything is written: its input paths exist and its image's squashfs file (if it runs from one) is
/// still in the cache and trusted. A failure prints what failed (`missing PATH`, `stale_image PATH`)
/// and ends the submission ([`crate::exit_codes::CHECKS_FAILED`]), its lock let go.
pub fn submission_checks_script(paths: &[String], sqsh: Option<&str>) -> String {
    let mut s = String::from("tao_checks=0\n");
    if !paths.is_empty() {
        s.push_str(&format!(
            "for p in {}; do [ -e \"$p\" ] || {{ echo \"{SECTION}missing $p\"; tao_checks=1; }}; done\n",
            paths.iter().map(|p| quote(p)).collect::<Vec<_>>().join(" ")
        ));
    }
    if let Some(path) = sqsh {
        s.push_str(&format!(
            "{}sqsh_trusted {p} || {{ echo \"{SECTION}stale_image \"{p}; tao_checks=1; }}\n",
            crate::sqsh::TRUSTED_FUNCTION,
            p = quote(path)
        ));
    }
    s.push_str(&format!(
        "if [ \"$tao_checks\" != 0 ]; then rm -rf \"$lock\"; exit {}; fi\n",
        crate::exit_codes::CHECKS_FAILED
    ));
    s
}

/// What [`submission_checks_script`] found failing: the missing paths, and whether the image's
/// squashfs file is gone.
pub fn failed_checks(stdout: &str) -> (Vec<String>, bool) {
    let secs = sections(stdout);
    let missing = secs.iter().filter(|(n, _, _)| n == "missing").map(|(_, p, _)| p.clone()).collect();
    (missing, secs.iter().any(|(n, _, _)| n == "stale_image"))
}

/// The facts of several submits in one script (the group commit of concurrent submits): each one's
/// path checks and image probe after a `member` mark carrying the batch's nonce, then the partitions
/// once for all.
pub fn submit_facts_batch_script(members: &[(&[String], &str)], nonce: &str) -> String {
    let mut s = String::new();
    for (i, (paths, extra)) in members.iter().enumerate() {
        s.push_str(&format!("echo '{SECTION}member {nonce} {i}'\n{}{extra}", paths_script(paths)));
    }
    s.push_str(&submit_facts_script(&[], ""));
    s
}

/// Read [`submit_facts_batch_script`]'s output (of a run that exited 0): each member's facts, in order.
pub fn parse_submit_facts_batch(stdout: &str, host: &str, nonce: &str, members: usize) -> Vec<SubmitFacts> {
    let all = parse_submit_facts(stdout, host);
    let mut facts: Vec<SubmitFacts> =
        (0..members).map(|_| SubmitFacts { missing_paths: Vec::new(), cached_sqsh: None, ..all.clone() }).collect();
    let mut at: Option<usize> = None;
    for (name, arg, _) in sections(stdout) {
        match (name.as_str(), at) {
            ("member", _) => {
                at = arg.strip_prefix(&format!("{nonce} ")).and_then(|i| i.parse().ok()).filter(|i| *i < members)
            }
            ("partitions", _) => at = None,
            ("missing", Some(i)) => facts[i].missing_paths.push(arg),
            ("sqsh_cached", Some(i)) => facts[i].cached_sqsh = Some(arg),
            _ => {}
        }
    }
    facts
}

/// Each partition's limits, then every node's state and GPUs in use.
pub fn partition_usage_script() -> String {
    format!(
        "echo '{SECTION}partitions'\nscontrol show partition -o || exit 3\necho '{SECTION}nodes'\nsinfo {} || exit 3\n",
        crate::slurm::SINFO_NODES_ARGS.split_whitespace().map(quote).collect::<Vec<_>>().join(" ")
    )
}

/// Read [`partition_usage_script`]'s output (of a run that exited 0).
pub fn parse_partition_usage_output(stdout: &str) -> Vec<PartitionUsage> {
    let secs = sections(stdout);
    let body = |name: &str| secs.iter().find(|(n, _, _)| n == name).map(|(_, _, b)| b.clone()).unwrap_or_default();
    crate::slurm::parse_partition_usage(&parse_partitions(&body("partitions")), &body("nodes"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn missing_paths_are_listed() {
        let dir = std::env::temp_dir().join(format!("tao-slurm-paths-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let here = dir.display().to_string();
        let paths = vec![here.clone(), format!("{here}/nope"), "/also missing".to_string()];
        let out = std::process::Command::new("bash").arg("-c").arg(super::paths_script(&paths)).output().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            super::missing_from(&String::from_utf8(out.stdout).unwrap()),
            vec![format!("{here}/nope"), "/also missing".into()]
        );
    }

    #[test]
    fn the_submission_checks_refuse_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let here = dir.path().display().to_string();
        let sqsh = dir.path().join("x.sqsh");
        std::fs::write(&sqsh, "hsqs....").unwrap();
        let lock = dir.path().join("lock");
        let run = |paths: &[String], image: Option<&str>| {
            std::fs::create_dir_all(&lock).unwrap();
            let script = format!(
                "lock={}\n{}echo wrote > {here}/staged\n",
                lock.display(),
                super::submission_checks_script(paths, image)
            );
            let out = std::process::Command::new("bash").arg("-c").arg(&script).output().unwrap();
            (out.status.code(), super::failed_checks(&String::from_utf8(out.stdout).unwrap()))
        };
        let ok = run(std::slice::from_ref(&here), Some(&sqsh.display().to_string()));
        assert_eq!(ok, (Some(0), (vec![], false)));
        assert!(dir.path().join("staged").exists() && lock.exists());
        std::fs::remove_file(dir.path().join("staged")).unwrap();
        let gone = dir.path().join("gone.sqsh").display().to_string();
        let (rc, (missing, stale)) = run(&[format!("{here}/nope"), here.clone()], Some(&gone));
        assert_eq!(rc, Some(crate::exit_codes::CHECKS_FAILED));
        assert_eq!((missing, stale), (vec![format!("{here}/nope")], true));
        assert!(!dir.path().join("staged").exists(), "nothing written");
        assert!(!lock.exists(), "the lock let go");
    }

    #[test]
    fn each_member_of_a_batch_gets_its_own_facts_and_all_the_partitions() {
        let dir = tempfile::tempdir().unwrap();
        let here = dir.path().display().to_string();
        let (a, b) = (vec![here.clone(), format!("{here}/nope")], vec![here.clone()]);
        let probe = "echo '@@tao-slurm:sqsh_cached /cache/x.sqsh'\n";
        let script = super::submit_facts_batch_script(&[(&a, ""), (&b, probe)], "n1")
            .replace("scontrol show partition -o", "echo 'PartitionName=gpu MaxTime=01:00:00 State=UP'");
        let out = std::process::Command::new("bash").arg("-c").arg(&script).output().unwrap();
        let facts = super::parse_submit_facts_batch(&String::from_utf8(out.stdout).unwrap(), "login1", "n1", 2);
        assert_eq!(facts[0].missing_paths, vec![format!("{here}/nope")]);
        assert_eq!((facts[0].cached_sqsh.as_deref(), facts[1].cached_sqsh.as_deref()), (None, Some("/cache/x.sqsh")));
        assert!(facts[1].missing_paths.is_empty());
        assert_eq!(facts[0].partitions, facts[1].partitions);
        assert_eq!(facts[1].partitions.len(), 1, "{facts:?}");
    }

    #[test]
    fn submit_facts_are_read_from_their_sections() {
        let out = "@@tao-slurm:missing /lustre/x\n@@tao-slurm:sqsh_cached /c/img.sqsh\n@@tao-slurm:partitions\nPartitionName=gpu MaxTime=04:00:00 State=UP\n";
        let facts = super::parse_submit_facts(out, "login1");
        assert_eq!(facts.missing_paths, ["/lustre/x"]);
        assert_eq!(facts.cached_sqsh.as_deref(), Some("/c/img.sqsh"));
        assert_eq!(facts.partitions.len(), 1, "{facts:?}");
        assert_eq!(facts.host, "login1");
    }
}
