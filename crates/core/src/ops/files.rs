//! Files on shared storage that are not a job's logs: a directory's entries (the TAO SDK's
//! `list_path`), the checkpoint files of a results directory (its `get_checkpoints`) and the removal
//! of a finished job's results directory (`delete_job_artifacts`).
//! Their scripts and the readers of their output; the engine's `files` runs them.

use crate::protocol::{sections, unprefix_lines, SECTION};
use crate::script::shell::quote;
use serde::Serialize;

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct DirEntry {
    pub name: String,
    /// `file`, `dir`, `link` or `other`.
    pub kind: String,
    pub size: u64,
    /// Modification time, Unix seconds.
    pub modified: i64,
}

/// What a listing found: the entries (sorted by name), or that the path is not a directory.
#[derive(Debug, Clone, PartialEq)]
pub enum Listing {
    Entries(Vec<DirEntry>),
    Missing,
    NotADirectory,
}

/// Lists `path`'s entries, one `|TYPE MTIME SIZE NAME` line each (names with a newline are left out:
/// they cannot be one line). `path` itself is resolved as `ls` would; the entries are not followed.
pub fn list_dir_script(path: &str) -> String {
    let p = quote(path);
    format!(
        "p={p}\nif [ ! -e \"$p\" ]; then echo '{SECTION}missing'; exit 0; fi\nif [ ! -d \"$p\" ]; then echo '{SECTION}not_dir'; exit 0; fi\necho '{SECTION}entries'\nfind \"$p/\" -mindepth 1 -maxdepth 1 ! -name $'*\\n*' -printf '|%y %T@ %s %f\\n' 2>/dev/null\n"
    )
}

/// The reader of [`list_dir_script`]'s output.
pub fn parse_listing(stdout: &str) -> Listing {
    let mut listing = Listing::Missing;
    for (name, _, body) in sections(stdout) {
        match name.as_str() {
            "not_dir" => return Listing::NotADirectory,
            "entries" => {
                let mut entries: Vec<DirEntry> = unprefix_lines(&body).lines().filter_map(parse_entry).collect();
                entries.sort_by(|a, b| a.name.cmp(&b.name));
                listing = Listing::Entries(entries);
            }
            _ => {}
        }
    }
    listing
}

fn parse_entry(line: &str) -> Option<DirEntry> {
    let mut parts = line.splitn(4, ' ');
    let kind = match parts.next()? {
        "f" => "file",
        "d" => "dir",
        "l" => "link",
        _ => "other",
    };
    let modified = parts.next()?.split('.').next()?.parse().ok()?;
    let size = parts.next()?.parse().ok()?;
    let name = parts.next()?.to_string();
    (!name.is_empty()).then(|| DirEntry { name, kind: kind.to_string(), size, modified })
}

/// A checkpoint file of a job: its path relative to the results directory, size and time.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CheckpointFile {
    pub path: String,
    pub size: u64,
    /// Modification time, Unix seconds.
    pub modified: i64,
}

/// Lists the checkpoints under `dir` that match `patterns` (the one rule: [`crate::checkpoint`]),
/// one `|MTIME SIZE PATH` line each (nothing when `dir` is not there).
pub fn checkpoints_script(dir: &str, patterns: &[String]) -> String {
    format!(
        "p={}\necho '{SECTION}checkpoints'\n[ -d \"$p\" ] && find \"$p/\" {} -printf '|%T@ %s %P\\n' 2>/dev/null\nexit 0\n",
        quote(dir),
        crate::checkpoint::find_tests(patterns)
    )
}

/// The reader of [`checkpoints_script`]'s output: oldest first, newest last.
pub fn parse_checkpoints(stdout: &str) -> Vec<CheckpointFile> {
    let mut found: Vec<(f64, CheckpointFile)> = sections(stdout)
        .into_iter()
        .filter(|(n, _, _)| n == "checkpoints")
        .flat_map(|(_, _, body)| unprefix_lines(&body).lines().map(str::to_string).collect::<Vec<_>>())
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            let time: f64 = parts.next()?.parse().ok()?;
            let size = parts.next()?.parse().ok()?;
            let path = parts.next()?.to_string();
            (!path.is_empty()).then_some((time, CheckpointFile { path, size, modified: time as i64 }))
        })
        .collect();
    found.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.path.cmp(&b.1.path)));
    found.into_iter().map(|(_, c)| c).collect()
}

/// Removes a results directory: only a real directory (not a symlink to one), with its contents;
/// reports `deleted`, `absent` or `refused` (a symlink or another kind of file under the name).
pub fn delete_dir_script(path: &str) -> String {
    let p = quote(path);
    format!(
        "p={p}\nif [ -L \"$p\" ] || {{ [ -e \"$p\" ] && [ ! -d \"$p\" ]; }}; then echo '{SECTION}refused'; exit 0; fi\nif [ ! -e \"$p\" ]; then echo '{SECTION}absent'; exit 0; fi\nrm -rf -- \"$p\" && echo '{SECTION}deleted'\n"
    )
}

/// What [`delete_dir_script`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    Deleted,
    Absent,
    Refused,
    /// `rm` failed part-way (permissions): the directory may be partly gone.
    Failed,
}

pub fn parse_deletion(stdout: &str) -> Deletion {
    match sections(stdout).first().map(|(n, _, _)| n.as_str()) {
        Some("deleted") => Deletion::Deleted,
        Some("absent") => Deletion::Absent,
        Some("refused") => Deletion::Refused,
        _ => Deletion::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn run(script: &str) -> String {
        let out = Command::new("bash").arg("-c").arg(script).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn a_listing_reads_names_kinds_and_sizes_and_says_what_is_not_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("model.pth"), b"12345").unwrap();
        std::fs::create_dir(d.join("sub dir")).unwrap();
        std::fs::write(d.join("odd\nname"), b"").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("link")).unwrap();
        let Listing::Entries(entries) = parse_listing(&run(&list_dir_script(&d.display().to_string()))) else {
            panic!("not a listing")
        };
        let seen: Vec<(&str, &str)> = entries.iter().map(|e| (e.name.as_str(), e.kind.as_str())).collect();
        assert_eq!(seen, vec![("link", "link"), ("model.pth", "file"), ("sub dir", "dir")]);
        assert_eq!(entries[1].size, 5);
        assert!(entries[1].modified > 1_600_000_000);
        let file = d.join("model.pth").display().to_string();
        assert_eq!(parse_listing(&run(&list_dir_script(&file))), Listing::NotADirectory);
        let gone = d.join("nope").display().to_string();
        assert_eq!(parse_listing(&run(&list_dir_script(&gone))), Listing::Missing);
        // A name that is a whole fake marker line stays a name.
        std::fs::write(d.join("@@tao-slurm:not_dir"), b"").unwrap();
        let Listing::Entries(entries) = parse_listing(&run(&list_dir_script(&d.display().to_string()))) else {
            panic!("a crafted name broke the listing")
        };
        assert!(entries.iter().any(|e| e.name == "@@tao-slurm:not_dir"));
    }

    #[test]
    fn checkpoints_are_the_tao_sdks_extensions_newest_last() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("train/weights")).unwrap();
        for (name, age) in [("train/weights/b.PTH", 10), ("train/a.ckpt", 100), ("model.onnx", 1), ("notes.txt", 0)] {
            let path = d.join(name);
            std::fs::write(&path, b"x").unwrap();
            let when = std::time::SystemTime::now() - std::time::Duration::from_secs(age);
            std::fs::File::options().write(true).open(&path).unwrap().set_modified(when).unwrap();
        }
        let found = parse_checkpoints(&run(&checkpoints_script(
            &d.display().to_string(),
            &crate::checkpoint::default_patterns(),
        )));
        let paths: Vec<&str> = found.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, vec!["train/a.ckpt", "train/weights/b.PTH", "model.onnx"]);
        assert_eq!(found[0].size, 1);
        let gone = d.join("nope").display().to_string();
        assert!(parse_checkpoints(&run(&checkpoints_script(&gone, &crate::checkpoint::default_patterns()))).is_empty());
    }

    #[test]
    fn deletion_removes_a_directory_only_never_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("results");
        std::fs::create_dir_all(target.join("train")).unwrap();
        std::fs::write(target.join("train/model.pth"), b"x").unwrap();
        let t = target.display().to_string();
        assert_eq!(parse_deletion(&run(&delete_dir_script(&t))), Deletion::Deleted);
        assert!(!target.exists());
        assert_eq!(parse_deletion(&run(&delete_dir_script(&t))), Deletion::Absent);
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("keep"), b"x").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &target).unwrap();
        assert_eq!(parse_deletion(&run(&delete_dir_script(&t))), Deletion::Refused);
        assert!(elsewhere.join("keep").exists());
        assert_eq!(parse_deletion(""), Deletion::Failed);
    }
}
