//! What ssh_config makes of a login host (`ssh -G`): its real name and port, its ProxyJump chain
//! and the path of its master's socket; and a cache of that in the control directory, so that a
//! CLI command whose master is already up starts no ssh to find it out.

use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A remembered resolution is used for at most this long: a change in a file that ssh_config
/// `Include`s (not in the stamp) is seen within it.
const CACHE_FOR: Duration = Duration::from_secs(600);

/// What `ssh -G` resolved for a destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Resolved {
    pub hostname: String,
    pub port: u16,
    /// The ProxyJump hops, first to last (empty when none).
    pub jumps: Vec<String>,
    /// The master's socket, when ssh was given our ControlPath.
    pub control_path: Option<String>,
}

impl Resolved {
    pub fn parse(text: &str) -> Resolved {
        let mut r = Resolved { hostname: String::new(), port: 22, jumps: Vec::new(), control_path: None };
        for line in text.lines() {
            let (key, value) = line.split_once(' ').unwrap_or((line, ""));
            match key {
                "hostname" => r.hostname = value.trim().to_string(),
                "port" => r.port = value.trim().parse().unwrap_or(22),
                // An ssh that does not expand the path's tokens here leaves them in: then unknown.
                "controlpath" if !matches!(value.trim(), "" | "none") && !value.contains('%') => {
                    r.control_path = Some(value.trim().to_string())
                }
                "proxyjump" if value.trim() != "none" => {
                    r.jumps = value.split(',').map(|h| h.trim().to_string()).filter(|h| !h.is_empty()).collect()
                }
                _ => {}
            }
        }
        r
    }
}

/// A login host as ssh_config resolves it: the ProxyCommand that replaces its ProxyJump, and the
/// path of its master's socket.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Target {
    pub proxy: Option<String>,
    pub control_path: Option<PathBuf>,
    /// Read from the cache rather than asked of ssh in this process.
    #[serde(skip)]
    pub from_cache: bool,
}

impl Target {
    pub fn cached(self) -> Target {
        Target { from_cache: true, ..self }
    }
}

#[derive(Serialize, Deserialize)]
struct Entry {
    stamp: String,
    target: Target,
}

/// The cache file of one login host, valid while the ssh_config files it was resolved from are
/// unchanged (path, size, modification time) and for at most [`CACHE_FOR`]. It lives in the private
/// control directory and is read only when it is a regular file of ours that nobody else can write:
/// its ProxyCommand is run by ssh.
pub(super) struct TargetCache {
    file: PathBuf,
    stamp: String,
}

impl TargetCache {
    pub fn new(file: PathBuf, ssh_config: Option<&Path>) -> TargetCache {
        TargetCache { file, stamp: config_stamp(ssh_config) }
    }

    pub fn load(&self) -> Option<Target> {
        let meta = fs::symlink_metadata(&self.file).ok()?;
        let fresh = meta.modified().ok()?.elapsed().is_ok_and(|age| age < CACHE_FOR);
        if !meta.is_file() || meta.uid() != crate::private::current_uid() || meta.mode() & 0o022 != 0 || !fresh {
            return None;
        }
        let entry: Entry = serde_json::from_slice(&fs::read(&self.file).ok()?).ok()?;
        (entry.stamp == self.stamp).then_some(entry.target)
    }

    /// Remember `target` (best effort: without the cache, the next command asks ssh again).
    pub fn store(&self, target: &Target) {
        let Ok(text) = serde_json::to_vec(&Entry { stamp: self.stamp.clone(), target: target.clone() }) else {
            return;
        };
        let tmp = self.file.with_extension(format!("tmp{}", std::process::id()));
        let written = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&text));
        if written.is_err() || fs::rename(&tmp, &self.file).is_err() {
            let _ = fs::remove_file(&tmp);
        }
    }

    pub fn forget(&self) {
        let _ = fs::remove_file(&self.file);
    }
}

/// The ssh_config files ssh reads for us (the configured one, or the user's and the system's), by
/// path, size and modification time.
pub(super) fn config_stamp(ssh_config: Option<&Path>) -> String {
    let files: Vec<PathBuf> = match ssh_config {
        Some(f) => vec![f.to_path_buf()],
        None => {
            let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
            vec![home.join(".ssh/config"), PathBuf::from("/etc/ssh/ssh_config")]
        }
    };
    files
        .iter()
        .map(|f| match fs::metadata(f) {
            Ok(m) => {
                let mtime = m.modified().ok().and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok());
                format!("{}|{}|{}", f.display(), m.len(), mtime.map(|d| d.as_nanos()).unwrap_or(0))
            }
            Err(_) => format!("{}|-", f.display()),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn target() -> Target {
        Target {
            proxy: Some("ssh -W [h]:22 -- bastion".into()),
            control_path: Some("/c/p-1".into()),
            from_cache: false,
        }
    }

    #[test]
    fn a_remembered_resolution_holds_while_the_config_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        fs::write(&config, "Host a\n").unwrap();
        let cache = TargetCache::new(dir.path().join("h.resolved"), Some(&config));
        assert_eq!(cache.load(), None, "nothing remembered yet");
        cache.store(&target());
        assert_eq!(cache.load(), Some(target()));
        assert!(cache.load().unwrap().cached().from_cache);

        // An edited config (another size) makes the entry stale.
        fs::write(&config, "Host a\n  HostName b\n").unwrap();
        assert_eq!(TargetCache::new(dir.path().join("h.resolved"), Some(&config)).load(), None);

        cache.forget();
        assert!(!dir.path().join("h.resolved").exists());
    }

    #[test]
    fn a_cache_file_others_can_write_or_that_is_a_link_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("h.resolved");
        let cache = TargetCache::new(file.clone(), None);
        cache.store(&target());
        assert!(cache.load().is_some());
        fs::set_permissions(&file, fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(cache.load(), None, "group/other-writable");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("l.resolved");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(TargetCache::new(link, None).load(), None, "a symlink");
    }

    #[test]
    fn ssh_g_output_gives_the_socket_only_when_ssh_expanded_it() {
        let r = Resolved::parse("hostname 127.0.0.1\nport 2222\ncontrolpath /home/u/.cache/tao-slurm/cm/p-0a1b\n");
        assert_eq!((r.hostname.as_str(), r.port), ("127.0.0.1", 2222));
        assert_eq!(r.control_path.as_deref(), Some("/home/u/.cache/tao-slurm/cm/p-0a1b"));
        for unknown in ["controlpath none\n", "controlpath /tmp/cm-%C\n", "hostname h\n"] {
            assert_eq!(Resolved::parse(unknown).control_path, None, "{unknown}");
        }
    }
}
