//! Secrets never outlive their job on shared storage: once a job is terminal (whatever way it ended),
//! its secrets directory is removed, and a removal that could not run (host down) is tried again at
//! every later refresh until the cluster confirms the directory is gone.

use crate::ops::secrets::*;

use crate::error::Result;
use crate::remote::{Idempotency, Remote};
use crate::store::Store;

/// Remove the secrets of every terminal job that may still have them; returns the jobs cleared.
pub fn sweep(remote: &dyn Remote, store: &Store) -> Result<Vec<String>> {
    let pending = store.secrets_to_remove()?;
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let out = remote.run_script(&removal_script(&pending), Idempotency::Idempotent)?;
    let gone: Vec<String> = crate::protocol::sections(&out.stdout)
        .into_iter()
        .filter(|(name, _, _)| name == "gone")
        .map(|(_, id, _)| id)
        .filter(|id| pending.iter().any(|(p, _)| p == id))
        .collect();
    store.mark_secrets_cleared(&gone, crate::clock::now())?;
    Ok(gone)
}

/// [`sweep`], where a failure must not stop the caller: it is logged and tried again next time.
pub fn sweep_or_warn(remote: &dyn Remote, store: &Store) {
    if let Err(e) = sweep(remote, store) {
        tracing::warn!(error = %e, "removing secrets of finished jobs failed; trying again at the next refresh");
    }
}
