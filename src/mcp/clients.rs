//! Clients for the tools' blocking work. Settings are read again for every call, so that a user who
//! fixes `~/.config/tao/.env` after a failed preflight need not restart the server. Clients are kept
//! between calls (a warm transport makes a status call one round trip on an open shell), one per
//! concurrent call: a `wait` or an image conversion never blocks the other tools.

use super::reply::ToolError;
use crate::config::Settings;
use crate::error::Error;
use crate::Client;
use std::sync::Mutex;

/// Reads the settings from their sources (flags given to `tao-slurm mcp`, environment, env file).
pub type SettingsLoader = Box<dyn Fn() -> Result<Settings, Error> + Send + Sync>;

/// Idle clients kept for the next calls; more concurrent calls than this open (and drop) extra ones.
const MAX_IDLE: usize = 4;

pub struct Clients {
    load: SettingsLoader,
    /// Idle clients with the fingerprint of the settings they were made with.
    idle: Mutex<Vec<(String, Client)>>,
}

impl Clients {
    pub fn new(load: SettingsLoader) -> Clients {
        Clients { load, idle: Mutex::new(Vec::new()) }
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
            None => Client::new(settings).map_err(|e| ToolError::engine(e, "job_id"))?,
        };
        let result = f(&client);
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push((fingerprint, client));
        }
        result
    }
}
