//! A command run in a pseudo-terminal of its own (as a person's terminal runs it: its controlling
//! terminal, so ssh prompts there and `test -t 0` holds), with everything it prints collected.

use std::io::{Read, Write};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};

pub struct PtyChild {
    pub child: Child,
    master: std::fs::File,
    seen: Arc<Mutex<String>>,
}

impl PtyChild {
    pub fn spawn(mut cmd: Command) -> PtyChild {
        let (master, slave) = open_pty();
        cmd.stdin(slave.try_clone().unwrap()).stdout(slave.try_clone().unwrap()).stderr(slave);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::setsid();
                libc::ioctl(0, libc::TIOCSCTTY, 0);
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        drop(cmd);
        let seen = Arc::new(Mutex::new(String::new()));
        let (into, mut from) = (seen.clone(), master.try_clone().unwrap());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    break;
                }
                into.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        PtyChild { child, master, seen }
    }

    /// Type `text` (a line ends with `\r` or `\n` as the caller writes it).
    pub fn type_in(&mut self, text: &str) {
        self.master.write_all(text.as_bytes()).unwrap();
    }

    /// All it printed so far.
    pub fn seen(&self) -> String {
        self.seen.lock().unwrap().clone()
    }
}

fn open_pty() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    let (mut m, mut s) = (0, 0);
    // SAFETY: openpty writes two new descriptors, owned by the Files made from them.
    let rc = unsafe { libc::openpty(&mut m, &mut s, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(rc, 0, "openpty");
    unsafe { (std::fs::File::from_raw_fd(m), std::fs::File::from_raw_fd(s)) }
}
