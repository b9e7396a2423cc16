//! The group commits of one cluster identity: its new jobs' records, online checks and submissions
//! (each a [`GroupCommit`]), shared by every client of that identity in the process (the service's
//! and the Python package's pools of clients, their threads): see [`queues_for`].

pub use crate::batch::GroupCommit;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The batches of one cluster identity (the new jobs' records, the online checks and the
/// submissions), and what its last checks found.
#[derive(Default)]
pub struct Queues {
    pub records: GroupCommit<crate::store::NewJob, ()>,
    pub checks: GroupCommit<super::submit::CheckRequest, tao_slurm_core::ops::cluster::SubmitFacts>,
    pub submits: GroupCommit<super::submit::SubmitRequest, super::submit::Submitted>,
    pub known: Mutex<Option<super::known_facts::KnownFacts>>,
}

/// Which cluster, as whom: the cluster profile, the Slurm user, the login hosts, local or not.
/// What the checks found about a cluster is about this.
pub fn cluster_identity(settings: &crate::config::Settings) -> String {
    format!(
        "{:?}|{:?}|{:?}|{}",
        settings.cluster,
        settings.slurm_user,
        settings.login_hosts.iter().map(|h| h.label()).collect::<Vec<_>>(),
        settings.local,
    )
}

/// The queues of every client whose work may go in one round trip: the same cluster identity, the
/// same state, and the same way in (key, ssh config, known hosts).
pub fn queues_for(settings: &crate::config::Settings) -> Arc<Queues> {
    static ALL: OnceLock<Mutex<HashMap<String, Arc<Queues>>>> = OnceLock::new();
    let key = format!(
        "{}|{:?}|{:?}|{:?}|{:?}|{:?}",
        cluster_identity(settings),
        settings.state_path,
        settings.database_url.as_ref().map(|u| u.expose().to_string()),
        settings.ssh_key_path,
        settings.ssh_config,
        settings.ssh_known_hosts,
    );
    let mut all = ALL.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    Arc::clone(all.entry(key).or_default())
}

