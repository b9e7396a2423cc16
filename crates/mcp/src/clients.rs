//! Clients for the tools' blocking work. Settings are read again for every call, so that a user who
//! fixes `~/.config/tao/.env` after a failed preflight need not restart the server. Clients are kept
//! between calls (a warm transport makes a status call one round trip on an open shell), one per
//! concurrent call: a `wait` or an image conversion never blocks the other tools.

use super::reply::ToolError;
use std::sync::{Arc, Mutex};
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::Client;

/// Reads the settings from their sources (flags given to `tao-slurm mcp`, environment, env file).
pub type SettingsLoader = Box<dyn Fn() -> Result<Settings, Error> + Send + Sync>;

/// Idle clients kept for the next calls; more concurrent calls than this open (and drop) extra ones.
const MAX_IDLE: usize = 4;

pub struct Clients {
    load: SettingsLoader,
    /// Clients only observe (`--read-only`): their refreshes act on nothing.
    observe_only: bool,
    /// Idle clients with the fingerprint of the settings they were made with.
    idle: Mutex<Vec<(String, Client)>>,
}

impl Clients {
    pub fn new(load: SettingsLoader, observe_only: bool) -> Clients {
        Clients { load, observe_only, idle: Mutex::new(Vec::new()) }
    }

    /// The current settings.
    pub fn settings(&self) -> Result<Settings, ToolError> {
        (self.load)().map_err(|e| ToolError::engine(e, "job_id"))
    }

    /// Run `f` with a client made from the current settings (an idle one when the settings have not
    /// changed since it was made). Blocking: call it from a blocking thread.
    pub fn with<T>(&self, f: impl FnOnce(&Client) -> Result<T, ToolError>) -> Result<T, ToolError> {
        let settings = self.settings()?;
        // Debug prints every setting (a secret as ***): equal prints, equal connections.
        let fingerprint = format!("{settings:?}");
        let reused = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.retain(|(f, _)| *f == fingerprint);
            idle.pop()
        };
        let client = match reused {
            Some((_, c)) => c,
            None => {
                let client = Client::new(settings).map_err(|e| ToolError::engine(e, "job_id"))?;
                if self.observe_only {
                    client.observing_only()
                } else {
                    client
                }
            }
        };
        let result = f(&client);
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push((fingerprint, client));
        }
        result
    }
}

/// Run a blocking piece of work with a client on the blocking pool, so the server keeps answering
/// meanwhile.
pub async fn blocking<T: Send + 'static>(
    clients: &Arc<Clients>,
    f: impl FnOnce(&Client) -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    let clients = clients.clone();
    joined(tokio::task::spawn_blocking(move || clients.with(f)).await)
}

/// [`blocking`] for work that needs only the settings (preflight opens its own connections).
pub async fn blocking_with_settings<T: Send + 'static>(
    clients: &Arc<Clients>,
    f: impl FnOnce(&Settings) -> T + Send + 'static,
) -> Result<T, ToolError> {
    let clients = clients.clone();
    joined(tokio::task::spawn_blocking(move || clients.settings().map(|s| f(&s))).await)
}

/// A panic in the work is a tool error (it is a bug), not the end of the server.
fn joined<T>(outcome: Result<Result<T, ToolError>, tokio::task::JoinError>) -> Result<T, ToolError> {
    outcome.unwrap_or_else(|e| {
        Err(ToolError::failed(
            format!("internal error (a bug in tao-slurm): {e}"),
            "report this bug; the server keeps serving",
        ))
    })
}
