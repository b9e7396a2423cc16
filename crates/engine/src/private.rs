//! Local files that must stay private to the user: the state database (and its WAL/SHM), the
//! monitor's log and the directory of SSH control sockets. Created with modes 600/700; refused when
//! another user owns them (someone who can replace them can read or hijack what we keep there).
//! And the local files we only read but trust: the env file and `clusters.toml` (which say where
//! jobs run and with which key) are refused when another user owns them or others can write them;
//! a `secret_env_file` must be private (600, ours); files an operator may keep under `/etc` (the
//! TAO image file, the database's CA) may be root's too, never writable by group or others. Their
//! parse errors name a line number, never the line (it may hold a secret).

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The effective user id of this process.
pub fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn owned_by_us(path: &Path, meta: &fs::Metadata) -> Result<(), String> {
    if meta.uid() != current_uid() {
        return Err(format!(
            "{} belongs to user id {}, not to you (user id {}): someone else could read or replace what tao-slurm keeps there; use a path of your own",
            path.display(),
            meta.uid(),
            current_uid()
        ));
    }
    Ok(())
}

/// Make sure `dir` exists as a directory of ours with mode 700 (created so if missing; a directory of
/// ours with a wider mode is narrowed, since nothing but tao-slurm belongs in it).
pub fn ensure_private_dir(dir: &Path) -> Result<(), String> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let meta = fs::symlink_metadata(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!(
            "{} is not a directory (a symlink or a file); remove it or choose another path",
            dir.display()
        ));
    }
    owned_by_us(dir, &meta)?;
    if meta.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make {} private (chmod 700): {e}", dir.display()))?;
    }
    Ok(())
}

/// Make sure `file` exists as a regular file of ours with mode 600, creating it (and its directory,
/// mode 700) if needed. Files that SQLite derives from it (WAL, SHM) take the same mode.
pub fn ensure_private_file(file: &Path) -> Result<(), String> {
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            ensure_private_dir(dir)?;
        }
    }
    // Opened only to create it: closing a descriptor of a file drops every POSIX lock this process
    // holds on it, and SQLite's locks on an open state file must survive a second Store::open (a
    // lost lock lets another process delete the WAL under our connections: "disk I/O error").
    if fs::symlink_metadata(file).is_err() {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(file)
            .map_err(|e| format!("cannot open {}: {e} (a symlink is never followed)", file.display()))?;
    }
    let meta = fs::symlink_metadata(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file (a symlink is never followed)", file.display()));
    }
    owned_by_us(file, &meta)?;
    if meta.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(file, fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("cannot make {} private (chmod 600): {e}", file.display()))?;
    }
    Ok(())
}

/// Write `bytes` as `path`, mode 600, all at once: a fresh file beside it (never through a symlink),
/// synced, then renamed into place; nothing is left behind when it fails. Its directory is made
/// private (700) when it does not exist.
pub fn write_private_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        ensure_private_dir(dir).map_err(std::io::Error::other)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".partial.{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let _ = fs::remove_file(&tmp);
    let written = (|| {
        let mut f =
            OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(&tmp)?;
        std::io::Write::write_all(&mut f, bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// How much a file we read must be ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// Ours, and nobody else can write it (the env file, `clusters.toml`).
    NotWritableByOthers,
    /// Ours, and nobody else can read or write it (a file of secret values).
    Private,
    /// Ours or root's, and nobody else can write it (`TAO_SLURM_TAO_IMAGES`, the database's CA file).
    OursOrRoots,
}

/// Refuse `path` unless it is a regular file that we own and, as `trust` says, others cannot write
/// (or read); the error says how to fix it.
pub fn check_trusted_file(path: &Path, trust: Trust) -> Result<(), String> {
    let meta = fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    let root_will_do = trust == Trust::OursOrRoots && meta.uid() == 0;
    if meta.uid() != current_uid() && !root_will_do {
        return Err(format!(
            "{} belongs to user id {}, not to you (user id {}) or root: whoever owns it decides what tao-slurm does; copy it to a file of your own and `chmod 600` it",
            path.display(),
            meta.uid(),
            current_uid()
        ));
    }
    let mode = meta.permissions().mode() & 0o777;
    let (loose, what) = match trust {
        Trust::NotWritableByOthers | Trust::OursOrRoots => (mode & 0o022 != 0, "group or others can write it"),
        Trust::Private => (mode & 0o077 != 0, "group or others can read or write it"),
    };
    if loose {
        return Err(format!("{} has mode {mode:o}: {what}; run `chmod 600 {}`", path.display(), path.display()));
    }
    Ok(())
}

/// The `KEY=value` lines of an env file (dotenv syntax), after [`check_trusted_file`]. A line that
/// does not parse is named by its number only.
pub fn read_env_file(path: &Path, trust: Trust) -> Result<std::collections::BTreeMap<String, String>, String> {
    check_trusted_file(path, trust)?;
    let text = fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_env_text(&text).map_err(|line| {
        format!(
            "{} line {line} is not KEY=value (dotenv syntax: quote values with spaces or special characters)",
            path.display()
        )
    })
}

/// Parse env-file text; the 1-based number of the first line that does not parse on failure.
fn parse_env_text(text: &str) -> Result<std::collections::BTreeMap<String, String>, usize> {
    let mut map = std::collections::BTreeMap::new();
    for item in dotenvy::from_read_iter(text.as_bytes()) {
        match item {
            Ok((k, v)) => {
                map.insert(k, v);
            }
            Err(dotenvy::Error::LineParse(line, _)) => {
                let at = text.find(line.trim_end()).unwrap_or(text.len());
                return Err(text[..at].matches('\n').count() + 1);
            }
            Err(_) => return Err(text.lines().count().max(1)),
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_dirs_are_created_private_and_narrowed() {
        let top = tempfile::tempdir().unwrap();
        let file = top.path().join("a/b/state.db");
        ensure_private_file(&file).unwrap();
        assert_eq!(fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(top.path().join("a/b")).unwrap().permissions().mode() & 0o777, 0o700);
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
        ensure_private_file(&file).unwrap();
        assert_eq!(fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        let cm = top.path().join("cm");
        fs::create_dir(&cm).unwrap();
        fs::set_permissions(&cm, fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&cm).unwrap();
        assert_eq!(fs::metadata(&cm).unwrap().permissions().mode() & 0o777, 0o700);
    }

    #[test]
    fn symlinks_are_refused() {
        let top = tempfile::tempdir().unwrap();
        let target = top.path().join("elsewhere");
        fs::write(&target, "").unwrap();
        let link = top.path().join("state.db");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(ensure_private_file(&link).is_err());
        let dir_link = top.path().join("cm");
        std::os::unix::fs::symlink(top.path(), &dir_link).unwrap();
        assert!(ensure_private_dir(&dir_link).unwrap_err().contains("not a directory"));
    }

    #[test]
    fn trusted_files_by_owner_and_mode() {
        let top = tempfile::tempdir().unwrap();
        let f = top.path().join("clusters.toml");
        fs::write(&f, "").unwrap();
        // (mode, accepted as NotWritableByOthers, accepted as Private)
        for (mode, shared, private) in [
            (0o600, true, true),
            (0o644, true, false),
            (0o664, false, false),
            (0o602, false, false),
            (0o640, true, false),
        ] {
            fs::set_permissions(&f, fs::Permissions::from_mode(mode)).unwrap();
            for (trust, ok) in [(Trust::NotWritableByOthers, shared), (Trust::Private, private)] {
                let r = check_trusted_file(&f, trust);
                assert_eq!(r.is_ok(), ok, "{mode:o} {trust:?}: {r:?}");
                if let Err(e) = r {
                    assert!(e.contains(&format!("chmod 600 {}", f.display())), "{e}");
                }
            }
        }
        // Owned by someone else (root owns /etc/hostname; the tests may run as root, then skip that row).
        if current_uid() != 0 {
            assert!(check_trusted_file(Path::new("/etc/hostname"), Trust::NotWritableByOthers)
                .unwrap_err()
                .contains("belongs to user id 0"));
        }
        // Root's will do where the operator may keep the file under /etc, still never writable by others.
        check_trusted_file(Path::new("/etc/hostname"), Trust::OursOrRoots).unwrap();
        for (mode, ok) in [(0o600, true), (0o644, true), (0o664, false), (0o646, false)] {
            fs::set_permissions(&f, fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(check_trusted_file(&f, Trust::OursOrRoots).is_ok(), ok, "{mode:o}");
        }
    }

    #[test]
    fn env_file_errors_name_the_line_never_its_text() {
        let top = tempfile::tempdir().unwrap();
        let f = top.path().join("secrets.env");
        fs::write(&f, "# comment\nGOOD=1\n\nMULTI=\"a\nb\"\nBAD LINE hunter2-secret\nLATER=2\n").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
        let e = read_env_file(&f, Trust::Private).unwrap_err();
        assert!(e.contains("line 6") && !e.contains("hunter2"), "{e}");
        fs::write(&f, "A=1\nB=\"two words\"\n").unwrap();
        let map = read_env_file(&f, Trust::Private).unwrap();
        assert_eq!(map.get("B").map(String::as_str), Some("two words"));
    }
}
