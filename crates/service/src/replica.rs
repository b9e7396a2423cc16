//! This process among the service's replicas (issue 25). Any number of `serve` processes on one
//! database answer every route; a lease per workspace in that database decides which one follows
//! the workspace's cluster (refreshes, retries, resumed submissions). The others read the shared
//! state at the monitor's pace, so their caches and streams follow too. A holder renews its lease
//! every third of its time (`serve --lease-secs`, [`super::lease::LEASE_SECS`] by default); when it dies, another
//! replica takes the lease once it expires, so within the lease's time and a third. A replica that
//! cannot reach the database stops refreshing at once (it cannot show that it still holds the
//! lease). The lease lives beside the jobs and fences the monitor's writes (`store/leases.rs`): a
//! holder that stalls past its lease (a slow refresh, a stopped process) and wakes writes nothing.

use super::lease::lease_name;
use super::state::AppState;
use super::workspace::Workspace;
use std::sync::atomic::Ordering;

impl AppState {
    /// Take or renew `w`'s lease for this replica, with the monitor's `client` (whose writes it
    /// fences from then on); whether it holds it now.
    pub fn keep_lease(&self, w: &Workspace, client: &tao_slurm_engine::Client) -> bool {
        let taken = client.hold_lease(&lease_name(&w.id), &self.replica_id, self.lease_secs);
        let (held, epoch) = match taken {
            Ok(Some(epoch)) => (true, epoch),
            Ok(None) => (false, 0),
            Err(e) => {
                tracing::warn!(workspace = %w.id, error = %e, "cannot renew the monitor's lease; not refreshing until it can");
                (false, 0)
            }
        };
        let was = w.lease.held.swap(held, Ordering::Relaxed);
        w.lease.epoch.store(epoch, Ordering::Relaxed);
        if held != was {
            tracing::info!(workspace = %w.id, replica = %self.replica_id, epoch, held, "monitor lease changed");
        }
        held
    }

    /// Let go of every lease this replica holds (it is stopping): another replica takes them at once.
    pub fn release_leases(&self) {
        for w in self.monitored_workspaces() {
            if w.lease.held.swap(false, Ordering::Relaxed) {
                if let Err(e) = w.with_client(|c| c.release_lease(&lease_name(&w.id), &self.replica_id)) {
                    tracing::warn!(workspace = %w.id, error = %e, "cannot release the monitor's lease; it expires by itself");
                }
            }
        }
    }
}
