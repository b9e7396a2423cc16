//! What a submit's online checks last found, kept so that the submits of the next
//! `TAO_SLURM_CHECKS_TTL_SECS` go to the cluster in one round trip each: their plans fitted to the
//! partitions as they were, and the checks that can differ from job to job (its input paths exist,
//! its image's squashfs file is still in the cache and trusted) made by the submission script itself,
//! which refuses before anything is staged when one fails. Kept in memory for the process and in the
//! control directory (mode 600) for the next command.
//!
//! Partitions are trusted for that long: a partition removed meanwhile makes sbatch refuse the job
//! (a refusal naming the partition or the time limit drops the facts); a changed MaxTime fits the
//! next submit after at most that long.

use crate::slurm::PartitionInfo;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KnownFacts {
    /// When the checks ran (Unix seconds).
    pub at: i64,
    pub partitions: Vec<PartitionInfo>,
    /// Images found in (or converted into) the squashfs cache: the image as given -> its `.sqsh`.
    pub sqsh: BTreeMap<String, String>,
}

impl KnownFacts {
    /// Whether they are still to be trusted at `now`, for `ttl` seconds after the checks.
    pub fn fresh(&self, now: i64, ttl: u32) -> bool {
        (self.at..self.at + i64::from(ttl)).contains(&now)
    }
}

/// The file of one cluster identity's facts (`group_commit::cluster_identity`): one per cluster and
/// Slurm user, so that one cluster's partitions are never taken for another's.
fn file(control_dir: &Path, identity: &str) -> PathBuf {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(identity.as_bytes());
    let name: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    control_dir.join(format!("submit-facts-{name}.json"))
}

/// The facts the last command left, if they are ours (a private file of ours) and still fresh.
pub fn load(control_dir: &Path, identity: &str, now: i64, ttl: u32) -> Option<KnownFacts> {
    let path = file(control_dir, identity);
    crate::private::check_trusted_file(&path, crate::private::Trust::Private).ok()?;
    let facts: KnownFacts = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    facts.fresh(now, ttl).then_some(facts)
}

/// Keep `facts` for the next command (a fresh private file renamed into place); a failure only
/// costs the next command the checks' round trip.
pub fn save(control_dir: &Path, identity: &str, facts: &KnownFacts) {
    let write = || -> std::io::Result<()> {
        crate::private::ensure_private_dir(control_dir).map_err(std::io::Error::other)?;
        let mut tmp = tempfile::NamedTempFile::new_in(control_dir)?;
        std::io::Write::write_all(&mut tmp, &serde_json::to_vec(facts).map_err(std::io::Error::other)?)?;
        tmp.persist(file(control_dir, identity)).map_err(|e| e.error)?;
        Ok(())
    };
    if let Err(e) = write() {
        tracing::debug!(error = %e, "cannot keep the submit checks' facts");
    }
}

/// Forget them (sbatch refused a job for its partition or time limit: they may have changed).
pub fn forget(control_dir: &Path, identity: &str) {
    let _ = std::fs::remove_file(file(control_dir, identity));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_kept_privately_and_only_while_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let cm = dir.path().join("cm");
        let facts = KnownFacts { at: 1000, partitions: vec![], sqsh: [("a:1".to_string(), "/c/a.sqsh".to_string())].into() };
        save(&cm, "a", &facts);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(file(&cm, "a")).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(load(&cm, "a", 1299, 300), Some(facts.clone()));
        assert_eq!(load(&cm, "b", 1299, 300), None, "another cluster's facts are not these");
        assert_eq!(load(&cm, "a", 1300, 300), None, "stale");
        assert_eq!(load(&cm, "a", 999, 300), None, "from the future");
        assert_eq!(load(&cm, "a", 1000, 0), None, "a time to live of 0 trusts nothing");
        std::fs::set_permissions(file(&cm, "a"), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(load(&cm, "a", 1001, 300), None, "a file others can read is not ours alone");
        std::fs::set_permissions(file(&cm, "a"), std::fs::Permissions::from_mode(0o600)).unwrap();
        forget(&cm, "a");
        assert_eq!(load(&cm, "a", 1001, 300), None);
    }
}
