//! Local files that must stay private to the user: the state database (and its WAL/SHM), the
//! monitor's log and the directory of SSH control sockets. Created with modes 600/700; refused when
//! another user owns them (someone who can replace them can read or hijack what we keep there).

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
}
