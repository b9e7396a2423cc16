//! Convert a registry image into the shared squashfs cache (or find it there), in one round trip that
//! lasts as long as the conversion; progress is printed meanwhile.

use crate::engine::{sections, unprefix_lines};
use crate::error::{Error, Result};
use crate::remote::{Idempotency, Remote};
use crate::spec::ImageRef;
use crate::sqsh::{conversion_script, SqshPolicy};
use std::time::{Duration, Instant};

/// How an image was made ready.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Prepared {
    pub image: String,
    pub sqsh_path: String,
    /// `cached`, `waited` (another submitter converted it) or `converted`.
    pub how: String,
    pub seconds: f64,
}

pub fn prepare(
    remote: &dyn Remote,
    policy: &SqshPolicy,
    image: &ImageRef,
    force: bool,
    progress: bool,
) -> Result<Prepared> {
    let script = conversion_script(policy, image, force);
    let started = Instant::now();
    let out = std::thread::scope(|scope| {
        // A conversion runs up to its time limit, and a waiter may wait for another's conversion as
        // long before it takes over: the call's deadline covers both, with a margin.
        let deadline = Duration::from_secs(policy.timeout_minutes * 60 * 2 + 300);
        let script = &script;
        let worker = scope.spawn(move || remote.run_script_within(script, Idempotency::Idempotent, deadline));
        // Progress on stderr: after 2 s, then every 10 s, while the conversion (or the wait for
        // another submitter's conversion) runs.
        let mut next_report = Duration::from_secs(2);
        while !worker.is_finished() {
            std::thread::sleep(Duration::from_millis(100));
            if progress && started.elapsed() >= next_report {
                eprintln!("tao-slurm: preparing {} as squashfs ({} s)", image.original, started.elapsed().as_secs());
                next_report += Duration::from_secs(10);
            }
        }
        worker.join().expect("the conversion thread does not panic")
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let mut result: Option<(String, String)> = None;
    let mut failure: Option<(String, String)> = None;
    let mut tail = String::new();
    for (name, arg, body) in sections(&out.stdout) {
        if name != "sqsh" {
            continue;
        }
        let mut words = arg.splitn(3, ' ');
        match words.next() {
            Some(how @ ("cached" | "waited" | "converted")) => {
                result = Some((how.to_string(), words.next().unwrap_or("").to_string()));
            }
            Some("failed") => {
                let rc = words.next().unwrap_or("?").to_string();
                failure = Some((rc, words.next().unwrap_or("").to_string()));
                tail = unprefix_lines(&body).trim_end().to_string();
            }
            Some("stale-lock") => {
                tracing::warn!(owner = %words.collect::<Vec<_>>().join(" "), "took over an expired conversion lock")
            }
            _ => {}
        }
    }
    if let Some((how, path)) = result {
        return Ok(Prepared { image: image.original.clone(), sqsh_path: path, how, seconds });
    }
    let message = match failure {
        Some((rc, log)) => format!(
            "converting image {} to squashfs failed (enroot import exited {rc}); conversion log: {log}\n{tail}",
            image.original
        ),
        None => {
            format!("converting image {} to squashfs failed on {}: {}", image.original, out.host, out.stderr.trim())
        }
    };
    Err(Error::RemoteCommand(message))
}
