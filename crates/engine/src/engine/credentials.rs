//! Install enroot credentials for nvcr.io on the cluster (the script is the core's
//! `ops::credentials`), in one round trip.

use crate::error::{Error, Result};
use crate::remote::{Idempotency, Remote};
use crate::spec::Secret;
use tao_slurm_core::ops::credentials::*;

/// Install the credentials; returns the remote file's path and the host.
pub fn install_enroot_credentials(remote: &dyn Remote, key: &Secret) -> Result<(String, String)> {
    check_ngc_key(key).map_err(Error::RemoteCommand)?;
    crate::engine::redact::register(key.expose());
    let out = remote.run_script(&enroot_credentials_script(key), Idempotency::Idempotent)?;
    if out.exit_code != 0 {
        return Err(Error::RemoteCommand(format!(
            "installing enroot credentials failed on {} (step {}): {}",
            out.host,
            out.exit_code,
            out.stderr.trim()
        )));
    }
    Ok((out.stdout.trim().to_string(), out.host))
}
