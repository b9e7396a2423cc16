//! Questions about the cluster that are not about one job: input paths, partitions, credentials,
//! a pending job's start estimate.

use super::{Client, PathCheck};
use crate::config::Settings;
use crate::engine::cluster;
use crate::error::Result;
use crate::preflight::PreflightReport;

impl Client {
    /// Check input URIs the way a submit does: parse each, then `test -e` every shared path in one
    /// round trip. Returns, per URI, the path and whether it exists (None: not a shared path).
    pub fn check_paths(&self, uris: &[String]) -> Result<Vec<(String, PathCheck)>> {
        // Missing settings are said as such, before any connection (not as a failed login).
        self.settings.require_remote()?;
        let parsed: Vec<_> = uris.iter().map(|u| (u.clone(), crate::spec::parse_input("path", u))).collect();
        let shared: Vec<String> = parsed
            .iter()
            .filter_map(|(_, p)| match p {
                Ok(crate::spec::InputLocation::Shared { path }) => Some(path.clone()),
                _ => None,
            })
            .collect();
        let missing = if shared.is_empty() { Vec::new() } else { cluster::missing_paths(self.remote()?, &shared)?.0 };
        Ok(parsed
            .into_iter()
            .map(|(uri, p)| {
                let result = match p {
                    Ok(crate::spec::InputLocation::Shared { path }) if missing.contains(&path) => {
                        PathCheck::Missing(path)
                    }
                    Ok(crate::spec::InputLocation::Shared { path }) => PathCheck::Exists(path),
                    Ok(crate::spec::InputLocation::Remote { uri, .. }) => PathCheck::NotChecked(uri),
                    Err(e) => PathCheck::Refused(e.message),
                };
                (uri, result)
            })
            .collect())
    }

    /// Slurm's start-time estimate and queue position for a job whose current attempt is pending in
    /// Slurm; None when it has no Slurm job yet or Slurm no longer lists it as pending.
    pub fn start_estimate(&self, id: &str) -> Result<Option<crate::ops::inspect::StartEstimate>> {
        let job = self.store.summary(id)?;
        self.on_this_cluster([&job])?;
        match &job.slurm_job_id {
            Some(slurm_job_id) if !job.status.is_terminal() => {
                crate::engine::inspect::start_estimate(self.remote()?, slurm_job_id)
            }
            _ => Ok(None),
        }
    }

    /// Each partition's limits and what its nodes have free now, with the login host that answered
    /// (one round trip; the service's cluster view).
    pub fn partition_usage(&self) -> Result<(Vec<crate::slurm::PartitionUsage>, String)> {
        self.settings.require_remote()?;
        cluster::partition_usage(self.remote()?)
    }

    /// Whether enroot credentials for nvcr.io are installed on the cluster (never the key itself).
    pub fn enroot_credentials_status(&self) -> Result<crate::ops::inspect::CredentialsStatus> {
        self.settings.require_remote()?;
        crate::engine::inspect::credentials_status(self.remote()?)
    }

    /// The preflight checks of this client's settings (see [`preflight`]).
    pub fn preflight(&self) -> PreflightReport {
        preflight(&self.settings)
    }

    /// Install the settings' NGC key as enroot credentials on the cluster (the key travels on stdin
    /// only). Returns the credentials file, the login host, and the registries it covers.
    pub fn install_enroot_credentials(&self) -> Result<(String, String, Vec<String>)> {
        self.settings.require_remote()?;
        let key = self.settings.ngc_key.clone().ok_or_else(|| {
            crate::spec::SpecError::new(
                "NGC_KEY",
                "is not set; export NGC_KEY (your NGC API key) or put it in ~/.config/tao/.env",
            )
        })?;
        let (path, host) = crate::engine::credentials::install_enroot_credentials(self.remote()?, &key)?;
        Ok((path, host, crate::ops::credentials::NGC_MACHINES.iter().map(|m| m.to_string()).collect()))
    }
}

/// Every preflight check: settings first (nothing is contacted without them), then for each login
/// host a login and one round trip of remote checks. Needs no state file.
pub fn preflight(settings: &Settings) -> PreflightReport {
    PreflightReport::new(crate::engine::preflight::run_preflight(settings))
}

/// Where an ssh_config alias of these settings' `SSH_CONFIG` leads (host name and port only; see
/// `remote::openssh::alias_destination`): the service lays an alias the operator granted an org over
/// the org's key-only workspace this way.
pub fn alias_destination(settings: &Settings, alias: &str) -> Option<(String, u16)> {
    crate::remote::openssh::alias_destination(settings.ssh_config.as_deref(), alias)
}
