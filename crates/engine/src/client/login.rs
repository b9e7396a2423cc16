//! `login`: open the SSH connection once with the person answering the login host's prompts (a
//! password, a second factor); every later call of any front-end reuses it in batch mode.

use super::Client;
use crate::error::Result;

/// A login host and whether `login` opened a new connection to it (false: one was already up).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LoginOutcome {
    pub host: String,
    pub opened: bool,
}

impl Client {
    /// Open the connection to `host` (every login host when None), kept for `persist` idle.
    pub fn login(&self, host: Option<&str>, persist: std::time::Duration) -> Result<Vec<LoginOutcome>> {
        let done = self.remote()?.login(host, persist)?;
        Ok(done.into_iter().map(|(host, opened)| LoginOutcome { host, opened }).collect())
    }
}
