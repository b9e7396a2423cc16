//! A persistent shell: one `bash -s` (over the ControlMaster, or local) that runs script after script.
//!
//! Each script is sent as a length line and its bytes; the shell reads it with one `head -c` (not a
//! byte at a time, as `bash -s` reads a script from a pipe), runs it in a subshell with stdin at
//! /dev/null, and ends its output with a trailer that carries the exit status and a per-call nonce, so
//! that no output of the script can pose as the end. A round trip then costs a pipe write and read
//! instead of a new ssh client, channel and shell (about 10 ms each on loopback).
//!
//! Each call keeps at most its cap of each stream (a job's files reach some outputs): past it the
//! reader stops reading, the call fails with [`CallError::TooLarge`] and the shell is given up.

use super::RemoteError;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The loop the shell runs; it arrives on stdin first, then the framed scripts follow it (so nothing
/// may follow `done`: bash reads its script from the pipe only as far as the command it runs).
/// `$(...)` drops trailing newlines, so every script is sent with a final comment line (a heredoc's
/// closing word then still ends with a newline).
const BOOTSTRAP: &str = r#"while IFS=' ' read -r __tao_n __tao_nonce; do
__tao_s="$(head -c "$__tao_n")"
( eval "$__tao_s" ) </dev/null
__tao_rc=$?
printf '\n@@tao-slurm:exit %d %s\n' "$__tao_rc" "$__tao_nonce"
printf '@@tao-slurm:end %s\n' "$__tao_nonce" >&2
done
"#;

/// The command a remote session runs: the shell that reads [`BOOTSTRAP`], then the framed scripts.
pub(crate) const SHELL: &str = "bash -s";

const EXIT_MARK: &[u8] = b"\n@@tao-slurm:exit ";

/// What one framed script produced.
#[derive(Debug)]
pub(crate) struct Reply {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// How a call failed: before the script could reach the shell (it never ran, safe to send again) or
/// after (its outcome is unknown).
#[derive(Debug)]
pub(crate) enum CallError {
    NotDelivered(String),
    Lost(String),
    /// The deadline passed before the script's end arrived: its outcome is unknown.
    TimedOut(String),
    /// The script wrote more than this many bytes to one of its streams: the rest was not kept,
    /// the shell was given up, and the script's outcome is unknown.
    TooLarge(u64),
}

/// One of the shell's output streams, collected by a thread so that neither pipe can fill up and
/// stall the shell, and so that a caller can stop waiting at a deadline. It keeps at most the
/// current call's cap: past it, nothing more is kept and the call fails ([`CallError::TooLarge`]).
#[derive(Default)]
struct PipeBuf {
    state: Mutex<Stream>,
    ready: Condvar,
}

#[derive(Default)]
struct Stream {
    /// Bytes read so far (not yet taken).
    bytes: Vec<u8>,
    /// Whether the stream has ended.
    ended: bool,
    /// The most bytes kept (set by each call).
    cap: u64,
    /// Whether more than `cap` bytes came: the stream is no longer whole.
    over: bool,
}

impl PipeBuf {
    /// Collect `pipe`, keeping at most `cap` bytes until a call sets its own cap.
    fn collect(mut pipe: impl Read + Send + 'static, cap: u64) -> Arc<PipeBuf> {
        let buf = Arc::new(PipeBuf::default());
        buf.state.lock().unwrap().cap = cap;
        let sink = Arc::clone(&buf);
        std::thread::spawn(move || {
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                let n = pipe.read(&mut chunk).unwrap_or(0);
                let mut state = sink.state.lock().unwrap();
                if n == 0 {
                    state.ended = true;
                } else if (state.bytes.len() + n) as u64 > state.cap {
                    // Keep nothing more and read no more: the writer gets a broken pipe (a local
                    // `yes` ends), and the call gives the shell up.
                    state.over = true;
                } else {
                    state.bytes.extend_from_slice(&chunk[..n]);
                }
                sink.ready.notify_all();
                if n == 0 || state.over {
                    return;
                }
            }
        });
        buf
    }
}

/// What runs the shell: an `ssh` (or local `bash`) we started, or a session a ControlMaster opened
/// for us ([`super::mux`]).
enum Runner {
    Process(Child),
    Mux(super::mux::MuxLink),
}

pub(crate) struct Session {
    runner: Runner,
    stdin: Option<File>,
    stdout: Arc<PipeBuf>,
    stderr: Arc<PipeBuf>,
    /// Which host (index into the transport's list) it runs on.
    pub host: usize,
    /// Set once a call failed: the session is then never used again.
    broken: bool,
}

impl Session {
    /// Start `cmd` (which must run `bash -s` where the scripts should run) and send it the loop.
    pub fn start(mut cmd: Command, host: usize) -> Result<Session, RemoteError> {
        let program = format!("{:?}", cmd.get_program());
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| RemoteError::Spawn { program, message: e.to_string() })?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let stdin = child.stdin.take().map(|s| File::from(OwnedFd::from(s)));
        Ok(Session::begin(Runner::Process(child), stdin, stdout, stderr, host))
    }

    /// The shell of a session the master opened (see [`super::mux`]), which must run `bash -s`.
    pub fn over_mux(opened: super::mux::MuxSession, host: usize) -> Session {
        Session::begin(Runner::Mux(opened.link), Some(opened.stdin), opened.stdout, opened.stderr, host)
    }

    fn begin(
        runner: Runner,
        stdin: Option<File>,
        stdout: impl Read + Send + 'static,
        stderr: impl Read + Send + 'static,
        host: usize,
    ) -> Session {
        let stderr = PipeBuf::collect(stderr, super::MAX_OUTPUT_BYTES);
        let stdout = PipeBuf::collect(stdout, super::MAX_OUTPUT_BYTES);
        let mut session = Session { runner, stdin, stdout, stderr, host, broken: false };
        if session.write(BOOTSTRAP.as_bytes()).is_err() {
            session.broken = true;
        }
        session
    }

    /// Whether the session can take another script (its shell still runs and nothing failed).
    pub fn usable(&mut self) -> bool {
        !self.broken
            && match &mut self.runner {
                Runner::Process(child) => matches!(child.try_wait(), Ok(None)),
                // The master closes the shell's output when its channel closes.
                Runner::Mux(_) => !self.stdout.state.lock().unwrap().ended,
            }
    }

    /// Stop the shell's ssh (a script may still run on the host).
    fn give_up(&mut self) {
        match &mut self.runner {
            Runner::Process(child) => {
                let _ = child.kill();
            }
            Runner::Mux(link) => link.close(),
        }
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let stdin = self.stdin.as_mut().ok_or_else(|| std::io::Error::other("stdin closed"))?;
        stdin.write_all(bytes)?;
        stdin.flush()
    }

    /// Run one script and wait for all its output, at most until `deadline`, keeping at most `cap`
    /// bytes of each of its streams (more fails the call).
    pub fn call(&mut self, script: &str, deadline: Duration, cap: u64) -> Result<Reply, CallError> {
        for buf in [&self.stdout, &self.stderr] {
            let mut state = buf.state.lock().unwrap();
            // The shell's trailer lines come on top of the script's own output.
            state.cap = cap.saturating_add(4096);
            state.over = false;
        }
        let result = self.call_inner(script, Instant::now() + deadline, cap);
        if result.is_err() {
            self.broken = true;
        }
        if let Err(CallError::TimedOut(_) | CallError::TooLarge(_)) = &result {
            // The script may still run on the host; this shell (and its ssh) are given up.
            self.give_up();
        }
        result
    }

    fn call_inner(&mut self, script: &str, deadline: Instant, cap: u64) -> Result<Reply, CallError> {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let body = format!("{script}\n#");
        let mut frame = format!("{} {nonce}\n", body.len()).into_bytes();
        frame.extend_from_slice(body.as_bytes());
        // The loop reads the whole script before it runs any of it, so nothing is written back
        // until this write is complete. A pipe holds 64 KiB: a larger script written to a shell
        // that never reads (a host that hangs) would block here, so the write has a thread of its
        // own and the deadline still holds.
        self.write_before(&frame, deadline)?;
        let end = format!(" {nonce}\n");
        let mut state = self.stdout.state.lock().unwrap();
        loop {
            if state.over || self.stderr.state.lock().unwrap().over {
                return Err(CallError::TooLarge(cap));
            }
            if state.bytes.ends_with(end.as_bytes()) {
                if let Some(at) = find_last(&state.bytes, EXIT_MARK) {
                    let rc_text =
                        String::from_utf8_lossy(&state.bytes[at + EXIT_MARK.len()..state.bytes.len() - end.len()])
                            .into_owned();
                    if let Ok(exit_code) = rc_text.trim().parse() {
                        let mut out = std::mem::take(&mut state.bytes);
                        drop(state);
                        out.truncate(at);
                        let stderr = self.take_stderr(&nonce).ok_or(CallError::TooLarge(cap))?;
                        return Ok(Reply { exit_code, stdout: String::from_utf8_lossy(&out).into_owned(), stderr });
                    }
                }
            }
            if state.ended {
                drop(state);
                return Err(CallError::Lost(self.stderr_so_far()));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(CallError::TimedOut(
                    String::from_utf8_lossy(&self.stderr.state.lock().unwrap().bytes).trim().to_string(),
                ));
            }
            // Woken by stdout; standard error's cap is looked at every 100 ms.
            state = self.stdout.ready.wait_timeout(state, (deadline - now).min(Duration::from_millis(100))).unwrap().0;
        }
    }

    /// Write `frame` to the shell, giving up at `deadline` (the shell is then killed by the caller).
    fn write_before(&mut self, frame: &[u8], deadline: Instant) -> Result<(), CallError> {
        if frame.len() < 32 * 1024 {
            return self.write(frame).map_err(|e| CallError::NotDelivered(format!("cannot send the script: {e}")));
        }
        let mut stdin = self.stdin.take().ok_or_else(|| CallError::NotDelivered("stdin closed".into()))?;
        let bytes = frame.to_vec();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let result = stdin.write_all(&bytes).and_then(|_| stdin.flush());
            let _ = tx.send((stdin, result));
        });
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((stdin, Ok(()))) => {
                self.stdin = Some(stdin);
                Ok(())
            }
            Ok((_, Err(e))) => Err(CallError::NotDelivered(format!("cannot send the script: {e}"))),
            // Part of the script may have reached the shell: its outcome is unknown.
            Err(_) => Err(CallError::TimedOut("the host did not take the script".into())),
        }
    }

    /// This call's standard error: everything up to its end mark (which follows the exit trailer).
    /// If the shell ends before the mark arrives, what came is all there is (the script did finish:
    /// its trailer arrived) and the session is not used again. None when it was over the cap.
    fn take_stderr(&mut self, nonce: &str) -> Option<String> {
        let mark = format!("@@tao-slurm:end {nonce}\n");
        let mut state = self.stderr.state.lock().unwrap();
        loop {
            if state.over {
                return None;
            }
            if let Some(at) = find_last(&state.bytes, mark.as_bytes()) {
                let text = String::from_utf8_lossy(&state.bytes[..at]).into_owned();
                state.bytes.drain(..at + mark.len());
                return Some(text);
            }
            if state.ended {
                self.broken = true;
                return Some(String::from_utf8_lossy(&std::mem::take(&mut state.bytes)).into_owned());
            }
            state = self.stderr.ready.wait_timeout(state, Duration::from_secs(30)).unwrap().0;
        }
    }

    fn stderr_so_far(&self) -> String {
        // The stderr thread may still be reading the last words of a dying ssh.
        std::thread::sleep(Duration::from_millis(50));
        String::from_utf8_lossy(&self.stderr.state.lock().unwrap().bytes).trim().to_string()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // End of input ends the loop, then the shell and ssh exit; reap them, without waiting long for
        // a connection that hangs.
        drop(self.stdin.take());
        let Runner::Process(child) = &mut self.runner else { return };
        for _ in 0..50 {
            if !matches!(child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Idle sessions, each on one host (several when threads run scripts at once).
#[derive(Default)]
pub(crate) struct Pool {
    idle: Mutex<Vec<Session>>,
    /// Bumped by [`Pool::retire`]: a session started before is never kept again.
    generation: std::sync::atomic::AtomicU64,
}

impl Pool {
    /// Run `script` on host `host` in an idle session that still runs, else in one `start` opens, with
    /// at most `cap` bytes of each output stream. A script that never reached its shell (the session
    /// had ended) is sent once more in a new one.
    pub fn call(
        &self,
        host: usize,
        start: &dyn Fn() -> Result<Session, RemoteError>,
        script: &str,
        deadline: Duration,
        cap: u64,
    ) -> Result<Result<Reply, CallError>, RemoteError> {
        let generation = self.generation.load(std::sync::atomic::Ordering::SeqCst);
        let mut session = self.take(host).map(Ok).unwrap_or_else(start)?;
        let mut result = session.call(script, deadline, cap);
        if let Err(CallError::NotDelivered(message)) = &result {
            tracing::debug!(host, %message, "persistent shell gone; starting another");
            session = start()?;
            result = session.call(script, deadline, cap);
        }
        let mut idle = self.idle.lock().unwrap();
        if result.is_ok() && self.generation.load(std::sync::atomic::Ordering::SeqCst) == generation {
            idle.push(session);
        }
        Ok(result)
    }

    /// End every idle session, and keep none that is in use now once its call ends: the next call
    /// starts a new one (on a new connection, when the old one was told to stop).
    pub fn retire(&self) {
        let mut idle = self.idle.lock().unwrap();
        self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        idle.clear();
    }

    fn take(&self, host: usize) -> Option<Session> {
        let mut idle = self.idle.lock().unwrap();
        while let Some(pos) = idle.iter().position(|s| s.host == host) {
            let mut s = idle.swap_remove(pos);
            if s.usable() {
                return Some(s);
            }
        }
        None
    }
}

fn find_last(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.len() > haystack.len() {
        return None;
    }
    (0..=haystack.len() - needle.len()).rev().find(|&i| &haystack[i..i + needle.len()] == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(60);
    const CAP: u64 = 64 << 20;

    fn local() -> Session {
        let mut bash = Command::new("bash");
        bash.arg("-s");
        Session::start(bash, 0).unwrap()
    }

    #[test]
    fn scripts_run_one_after_another_with_their_own_status_and_streams() {
        let mut s = local();
        for (script, want_out, want_err, want_rc) in [
            ("echo hi", "hi\n", "", 0),
            ("echo 'Connection refused' >&2; printf 'x'; exit 255", "x", "Connection refused\n", 255),
            ("exit 3", "", "", 3),
            ("printf 'a\\nb\\n'", "a\nb\n", "", 0),
            // A command that reads stdin gets nothing of the next script.
            ("cat; echo after", "after\n", "", 0),
            // Output that imitates the trailer without the nonce is just output.
            ("printf '\\n@@tao-slurm:exit 9 x\\n'", "\n@@tao-slurm:exit 9 x\n", "", 0),
            // A heredoc as the last thing of a script still has its closing line.
            ("cat <<'EOF'\nbody\nEOF", "body\n", "", 0),
            // A syntax error is that script's failure, not the session's.
            ("if then", "", "", 2),
            // Nothing leaks from one script into the next.
            ("cd /; X=1; set -e", "", "", 0),
            ("echo \"${X-unset} $PWD\" | grep -c unset", "1\n", "", 0),
        ] {
            let r = s.call(script, LONG, CAP).unwrap();
            assert_eq!((r.stdout.as_str(), r.exit_code), (want_out, want_rc), "{script}");
            if script != "if then" {
                assert_eq!(r.stderr, want_err, "{script}");
            } else {
                assert!(r.stderr.contains("syntax error"), "{}", r.stderr);
            }
        }
        assert!(s.usable());
        let big = "x".repeat(3 << 20);
        let r = s.call(&format!("cat <<'EOF'\n{big}\nEOF"), LONG, CAP).unwrap();
        assert_eq!(r.stdout.len(), big.len() + 1, "a 3 MiB output arrives whole");
    }

    #[test]
    fn a_dead_shell_is_reported_and_never_reused() {
        let mut s = local();
        let err = s.call("kill -9 $$; sleep 0.3", LONG, CAP).unwrap_err();
        assert!(matches!(err, CallError::Lost(_)), "{err:?}");
        assert!(!s.usable());
    }

    #[test]
    fn a_script_that_hangs_ends_at_the_deadline_and_the_shell_is_given_up() {
        let mut s = local();
        let started = Instant::now();
        let err = s.call("echo partial; sleep 30", Duration::from_millis(300), CAP).unwrap_err();
        assert!(matches!(err, CallError::TimedOut(_)), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "waited {:?}", started.elapsed());
        assert!(!s.usable());
        // A large script sent to a shell that never reads (a host that hangs) is bounded too.
        let mut deaf = Session::start(
            {
                let mut c = Command::new("sleep");
                c.arg("30");
                c
            },
            0,
        )
        .unwrap();
        let started = Instant::now();
        let err = deaf.call(&"# x\n".repeat(1 << 18), Duration::from_millis(300), CAP).unwrap_err();
        assert!(matches!(err, CallError::TimedOut(_)), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    /// Output over the call's cap (on either stream) fails the call, naming the cap, and the shell is
    /// given up (the rest of its output is not read into memory); a new session works.
    #[test]
    fn output_over_the_cap_fails_the_call_and_the_shell_is_given_up() {
        for script in ["head -c 3000000 /dev/zero", "head -c 3000000 /dev/zero >&2", "yes"] {
            let mut s = local();
            let started = Instant::now();
            let err = s.call(script, LONG, 1 << 20).unwrap_err();
            assert!(matches!(err, CallError::TooLarge(n) if n == 1 << 20), "{script}: {err:?}");
            assert!(started.elapsed() < Duration::from_secs(20), "{script}: {:?}", started.elapsed());
            assert!(!s.usable(), "{script}");
        }
        let mut s = local();
        let r = s.call("head -c 1000000 /dev/zero | tr '\\0' x", LONG, 1 << 20).unwrap();
        assert_eq!(r.stdout.len(), 1_000_000, "under the cap, all of it");
    }
}
