//! Convert a registry image into the shared squashfs cache (or find it there), in one round trip that
//! lasts as long as the conversion; progress is printed meanwhile.

use crate::error::{Error, Result};
use crate::remote::{Idempotency, Remote};
use crate::spec::ImageRef;
use crate::sqsh::{conversion_script, read_conversion, ConversionOutcome, SqshPolicy};
use std::time::{Duration, Instant};

/// How an image was made ready.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
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
                tracing::warn!(
                    "tao-slurm: still preparing {} as squashfs ({} s)",
                    image.original,
                    started.elapsed().as_secs()
                );
                next_report += Duration::from_secs(10);
            }
        }
        worker.join().expect("the conversion thread does not panic")
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let (outcome, stale_owners) = read_conversion(&out.stdout);
    for owner in stale_owners {
        tracing::warn!(%owner, "took over an expired conversion lock");
    }
    let message = match outcome {
        ConversionOutcome::Ready { how, path } => {
            return Ok(Prepared { image: image.original.clone(), sqsh_path: path, how, seconds })
        }
        ConversionOutcome::Failed { rc, log, tail } => format!(
            "converting image {} to squashfs failed (enroot import exited {rc}); conversion log: {log}\n{tail}",
            image.original
        ),
        ConversionOutcome::Unknown => {
            format!("converting image {} to squashfs failed on {}: {}", image.original, out.host, out.stderr.trim())
        }
    };
    Err(Error::RemoteCommand(message))
}
