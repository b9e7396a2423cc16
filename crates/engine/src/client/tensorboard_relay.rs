//! The local end of a job's TensorBoard (issue 50): a Unix socket in a directory of this process's
//! (mode 700, made for it: nothing to race for, no port of this host), and for each connection to
//! it a session of the login host running the relay the start chose (`core::ops::running::Relay`:
//! a step of the job, `srun --overlap` on TensorBoard's node, whose stdin and stdout are a
//! connection to TensorBoard's socket there). The login host's sshd cannot reach a Unix socket on
//! another machine; a step of the job, on the node, can, and only as the job's own user.
//!
//! One step per connection, not per request: HTTP/1.1 keeps a connection for many requests.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::remote::{Remote, RemoteStream};

/// How long a relay's session may outlive its local connection's end (its reply still coming):
/// then it is closed, and the step with it.
const LINGER: Duration = Duration::from_secs(10);

/// Most bytes of a relay's stderr kept for the log.
const STDERR_CAP: u64 = 4096;

/// One listening relay: its connections, to end them with it.
struct Listening {
    stop: AtomicBool,
    conns: Mutex<HashMap<u64, UnixStream>>,
}

/// The relays this process listens for, by local socket.
fn relays() -> &'static Mutex<HashMap<String, Arc<Listening>>> {
    static RELAYS: std::sync::OnceLock<Mutex<HashMap<String, Arc<Listening>>>> = std::sync::OnceLock::new();
    RELAYS.get_or_init(Default::default)
}

/// Listen on a socket in a new private directory here; each connection to it is relayed through
/// `remote` by running `line` (quoted by the core). Returns the socket's path.
pub(crate) fn start(remote: Box<dyn Remote>, line: String, job: String) -> std::io::Result<String> {
    let dir = tempfile::Builder::new()
        .prefix("tao-slurm-tb-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir()?
        .keep();
    let socket = dir.join("s");
    let listener = match UnixListener::bind(&socket) {
        Ok(l) => l,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    let path = socket.display().to_string();
    let listening = Arc::new(Listening { stop: AtomicBool::new(false), conns: Mutex::new(HashMap::new()) });
    relays().lock().unwrap_or_else(|e| e.into_inner()).insert(path.clone(), listening.clone());
    let remote: Arc<dyn Remote> = Arc::from(remote);
    let line = Arc::new(line);
    std::thread::Builder::new().name("tensorboard-relay".into()).spawn(move || {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        for conn in listener.incoming() {
            if listening.stop.load(Ordering::SeqCst) {
                break;
            }
            let Ok(conn) = conn else { continue };
            let id = NEXT.fetch_add(1, Ordering::Relaxed);
            if let Ok(c) = conn.try_clone() {
                listening.conns.lock().unwrap_or_else(|e| e.into_inner()).insert(id, c);
            }
            let (remote, line, job, listening) = (remote.clone(), line.clone(), job.clone(), listening.clone());
            let _ = std::thread::Builder::new().name("tensorboard-conn".into()).spawn(move || {
                relay(remote.as_ref(), &line, conn, &job);
                listening.conns.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            });
        }
    })?;
    Ok(path)
}

/// Stop listening on `socket` (made by [`start`]): its connections end, their steps with them, and
/// its directory goes.
pub(crate) fn stop(socket: &str) {
    let listening = relays().lock().unwrap_or_else(|e| e.into_inner()).remove(socket);
    if let Some(l) = listening {
        l.stop.store(true, Ordering::SeqCst);
        for conn in l.conns.lock().unwrap_or_else(|e| e.into_inner()).values() {
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
        // Wakes the accepting thread, which sees the stop.
        let _ = UnixStream::connect(socket);
    }
    if let Some(dir) = Path::new(socket).parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// One connection: a session running the relay, bytes copied both ways until either side ends.
fn relay(remote: &dyn Remote, line: &str, conn: UnixStream, job: &str) {
    let RemoteStream { mut stdin, mut stdout, stderr, keep } = match remote.open_stream(line) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(job, error = %e, "TensorBoard's relay did not start");
            return;
        }
    };
    let errors = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stderr.take(STDERR_CAP).read_to_end(&mut text);
        text
    });
    let keep = Arc::new(Mutex::new(Some(keep)));
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let Ok(mut conn_in) = conn.try_clone() else { return };
    let up = {
        let keep = keep.clone();
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut conn_in, &mut stdin);
            let _ = stdin.flush();
            drop(stdin);
            // The local side is done: the reply has a while to come, then the session ends.
            if finished.recv_timeout(LINGER).is_err() {
                keep.lock().unwrap_or_else(|e| e.into_inner()).take();
            }
        })
    };
    let mut conn_out = conn;
    let sent = std::io::copy(&mut stdout, &mut conn_out).unwrap_or(0);
    let _ = conn_out.shutdown(std::net::Shutdown::Both);
    let _ = done.send(());
    keep.lock().unwrap_or_else(|e| e.into_inner()).take();
    let _ = up.join();
    let text = errors.join().unwrap_or_default();
    if sent == 0 && !text.is_empty() {
        // The step's own words (the job's image, its node): escaped, bounded, in the log only.
        let text = String::from_utf8_lossy(&text);
        tracing::warn!(job, stderr = ?text.trim(), "TensorBoard's relay passed nothing back");
    }
}

#[cfg(test)]
mod tests {
    /// A relay through the local transport: each connection gets its own command (here `cat`'s
    /// echo), and a stop ends its connections and removes its directory.
    #[test]
    fn each_connection_runs_the_relay_and_a_stop_ends_them() {
        use std::io::{Read, Write};
        let remote = Box::new(crate::remote::LocalShell::default());
        let socket = super::start(remote, "cat".into(), "j".into()).unwrap();
        let dir = std::path::Path::new(&socket).parent().unwrap().to_path_buf();
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&dir).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o700);
        let mut a = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        let mut b = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        a.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
        b.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
        a.write_all(b"one\0\xff").unwrap();
        b.write_all(b"two").unwrap();
        let mut buf = [0u8; 5];
        a.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"one\0\xff", "binary, unbuffered");
        let mut buf = [0u8; 3];
        b.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"two");
        super::stop(&socket);
        let mut rest = Vec::new();
        assert_eq!(a.read_to_end(&mut rest).unwrap(), 0, "its connection ended with it");
        assert!(!dir.exists(), "its directory went");
        assert!(std::os::unix::net::UnixStream::connect(&socket).is_err());
    }
}
