//! A session asked of an ssh ControlMaster over its socket (OpenSSH's mux protocol, spoken by the
//! `openssh-mux-client` crate), instead of through an `ssh` client started for the purpose: the
//! master already checked the host's key and logged in, so the client would only forward our pipes.
//! Skipping it saves its start, about 6 ms of CPU per CLI command.
//!
//! The master reads and writes the pipes' far ends, which it is given over the socket; the session
//! lasts as long as the socket stays open, so closing it ends the session (the master closes the
//! channel) as killing the client would.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use openssh_mux_client::{Connection, EstablishedSession, NonZeroByteSlice};

/// An open session: our ends of its three pipes and what keeps it open.
pub(crate) struct MuxSession {
    pub stdin: File,
    pub stdout: File,
    pub stderr: File,
    pub link: MuxLink,
}

/// The master's connection of one session, open until dropped or closed.
pub(crate) struct MuxLink {
    /// Dropped before the runtime whose reactor it is registered with.
    session: Option<EstablishedSession>,
    /// Shut down without waiting when dropped: a session may end on an async runtime's thread
    /// (the service drops a workspace's clients in a handler), where waiting is not allowed.
    runtime: Option<tokio::runtime::Runtime>,
}

impl MuxLink {
    /// End the session: the master closes its channel and the far ends of its pipes.
    pub fn close(&mut self) {
        self.session = None;
    }
}

/// Ask the master listening on `control` to run `command` with new pipes for its standard streams,
/// within `limit` (the master confirms only once the server has opened the channel).
pub(crate) fn open(control: &Path, command: &str, limit: Duration) -> Result<MuxSession, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("no runtime for the mux client: {e}"))?;
    let (stdin_r, stdin_w) = std::io::pipe().map_err(|e| e.to_string())?;
    let (stdout_r, stdout_w) = std::io::pipe().map_err(|e| e.to_string())?;
    let (stderr_r, stderr_w) = std::io::pipe().map_err(|e| e.to_string())?;
    let cmd = NonZeroByteSlice::new(command.as_bytes()).ok_or("a command with a NUL byte")?;
    let fds = [stdin_r.as_raw_fd(), stdout_w.as_raw_fd(), stderr_w.as_raw_fd()];
    let request = openssh_mux_client::Session::builder().cmd(std::borrow::Cow::Borrowed(cmd)).build();
    let open = || {
        runtime.block_on(async {
            tokio::time::timeout(limit, async {
                let conn = Connection::connect(control).await.map_err(|e| e.to_string())?;
                conn.open_new_session(&request, &fds).await.map_err(|e| e.to_string())
            })
            .await
            .unwrap_or_else(|_| Err(format!("the master did not open a session within {} s", limit.as_secs())))
        })
    };
    // The service calls in from its runtime's threads, where another runtime must not start.
    let opened = crate::off_runtime::off_runtime(open)?;
    // The master holds its own copies of the far ends now: ours must go, so that each stream ends
    // when the master closes its copy.
    drop((stdin_r, stdout_w, stderr_w));
    Ok(MuxSession {
        stdin: File::from(OwnedFd::from(stdin_w)),
        stdout: File::from(OwnedFd::from(stdout_r)),
        stderr: File::from(OwnedFd::from(stderr_r)),
        link: MuxLink { session: Some(opened), runtime: Some(runtime) },
    })
}

impl Drop for MuxLink {
    fn drop(&mut self) {
        self.close();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
