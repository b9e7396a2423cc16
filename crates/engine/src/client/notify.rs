//! Notifications and KPIs for front-ends (issue 26): the monitor queues webhook messages after each
//! refresh and a [`Notifier`] thread beside it delivers them; a job's KPIs over time.

use super::Client;
use crate::error::Result;
use crate::kpi::KpiPoint;
use crate::model::JobSummary;
use std::sync::mpsc;
use std::time::Duration;

/// How often the notifier looks for due messages when nobody wakes it (retries fall due by time).
const IDLE_LOOK: Duration = Duration::from_secs(2);

impl Client {
    /// Queue the webhook messages of what changed since this monitor last looked (the events
    /// recorded by anyone since, and `jobs` stuck pending); local work only.
    pub fn queue_notifications(&self, jobs: &[JobSummary]) -> Result<usize> {
        crate::engine::notify::enqueue(&self.store, &self.settings, jobs, crate::clock::now())
    }

    /// A job's KPIs over time, oldest first: each progress line of its status.json as first read.
    pub fn kpi_history(&self, id_or_prefix: &str) -> Result<Vec<KpiPoint>> {
        let job = self.store.summary(id_or_prefix)?;
        let lines = self.store.kpi_lines(&job.job_id)?;
        Ok(lines.iter().filter_map(|(at, line)| crate::kpi::point_of(line, *at)).collect())
    }
}

/// The thread that delivers queued webhook messages, with a store connection of its own; it ends
/// when the notifier is dropped (a delivery under way finishes first, bounded by its timeout).
pub struct Notifier {
    wake: mpsc::Sender<()>,
}

impl Notifier {
    pub fn start(settings: crate::config::Settings) -> Notifier {
        let (wake, woken) = mpsc::channel::<()>();
        let spawned = std::thread::Builder::new().name("notifier".into()).spawn(move || {
            let store = match crate::store::Store::open_for(&settings) {
                Ok(s) => s,
                Err(e) => return tracing::warn!("the notifier cannot open the state file: {e}"),
            };
            let http = crate::engine::notify::http_client();
            loop {
                if let Err(e) = crate::engine::notify::deliver_due(&store, &http, crate::clock::now) {
                    tracing::warn!("notifications not delivered this time: {e}");
                }
                match woken.recv_timeout(IDLE_LOOK) {
                    Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            }
        });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the notifier: {e}");
        }
        Notifier { wake }
    }

    /// Look for due messages now.
    pub fn wake(&self) {
        let _ = self.wake.send(());
    }
}
