//! A job's results directory from a front-end: the files in it, and a gzip'd tar of all or some of
//! them (with the attempt's logs), refused above a size cap: before it is made when `du` says so,
//! and on the tar stream itself (the script cuts it at the cap + 1 byte; the bytes that came are
//! counted here, unpacked, before anything is handed on).

use super::Client;
use crate::error::{Error, Result};
use crate::ops::results::{
    archive_output_cap, archive_over_cap, archive_script, check_name, list_script, parse_archive, parse_list,
    parse_read_file, read_file_script, Archive, FileRead, ResultFile,
};
use crate::remote::Idempotency;
use crate::spec::SpecError;

/// The longest an archive may take to make and bring back.
const ARCHIVE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

/// An archive asked for: the files (every one when empty), the newest checkpoint, the logs.
#[derive(Debug, Clone, Default)]
pub struct ArchiveAsk {
    pub names: Vec<String>,
    pub latest_checkpoint: bool,
    pub with_logs: bool,
    pub max_bytes: u64,
}

/// What came back: the archive's bytes, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveOut {
    Bytes(Vec<u8>),
    /// The selection holds at least this many bytes, more than the cap (`du`'s count, or the cut
    /// stream's cap + 1).
    TooLarge(u64),
    Missing(Vec<String>),
    NoResults,
}

impl Client {
    /// The files of a job's results directory (paths relative to it, at most `max`), then its
    /// current attempt's `logs/main.out` and `logs/main.err` when `with_logs`; None when the job has
    /// no results directory yet.
    pub fn list_results(&self, id: &str, with_logs: bool, max: usize) -> Result<Option<Vec<ResultFile>>> {
        let job = self.store.get(id)?;
        self.on_this_cluster([&job.summary])?;
        let logs = crate::ops::logs::log_paths(&job).filter(|_| with_logs);
        let script =
            list_script(&job.plan.layout.results_dir(), logs.as_ref().map(|(_, o, e)| (o.as_str(), e.as_str())), max);
        let out = self.remote()?.run_script(&script, Idempotency::Idempotent)?;
        if out.exit_code != 0 {
            return Err(Error::RemoteCommand(format!("listing the results of job {id} failed: {}", out.stderr.trim())));
        }
        Ok(parse_list(&out.stdout))
    }

    /// One file of a job's results directory, `name` relative to it (the TAO SDK's
    /// `read_job_result_file`): None when it is not there (or the job has no results directory yet).
    /// One round trip. A name outside the directory, a symlink on its way, a file that is not regular
    /// and one over `max_bytes` are errors naming the field `field`.
    pub fn read_result_file(&self, id: &str, field: &str, name: &str, max_bytes: u64) -> Result<Option<Vec<u8>>> {
        check_name(field, name)?;
        // One read of a job's file brings back at most the reader's own cap, whatever is asked.
        let max_bytes = max_bytes.min(crate::ops::job_file::READ_CAP);
        let job = self.store.get(id)?;
        self.on_this_cluster([&job.summary])?;
        let script = read_file_script(field, &job.plan.layout.results_dir(), name, max_bytes)?;
        let out = self.remote()?.run_script(&script, Idempotency::Idempotent)?;
        if out.exit_code != 0 {
            return Err(Error::RemoteCommand(format!("reading {name} of job {id} failed: {}", out.stderr.trim())));
        }
        let refused = |why: String| -> Result<Option<Vec<u8>>> { Err(SpecError::new(field, why).into()) };
        match parse_read_file(&out.stdout) {
            FileRead::Missing => Ok(None),
            FileRead::NotRegular => {
                refused(format!("{name} of job {id} is a symlink, or not a regular file, or under a symlink: not read"))
            }
            FileRead::TooLarge(size) => {
                refused(format!("{name} of job {id} holds {size} bytes, more than the {max_bytes} asked for at most"))
            }
            FileRead::Base64 { text, .. } => {
                use base64::Engine;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(text.trim())
                    .map_err(|e| Error::RemoteCommand(format!("{name} of job {id} came back damaged: {e}")))?;
                if bytes.len() as u64 > max_bytes {
                    return refused(format!("{name} of job {id} grew past the {max_bytes} bytes asked for at most"));
                }
                Ok(Some(bytes))
            }
        }
    }

    /// A gzip'd tar of a job's results (see [`ArchiveAsk`]); the names are checked first.
    pub fn results_archive(&self, id: &str, ask: &ArchiveAsk) -> Result<ArchiveOut> {
        for n in &ask.names {
            check_name("file_lists", n)?;
        }
        let job = self.store.get(id)?;
        self.on_this_cluster([&job.summary])?;
        let logs = crate::ops::logs::log_paths(&job).filter(|_| ask.with_logs);
        let script = archive_script(
            &job.plan.layout.results_dir(),
            &ask.names,
            ask.latest_checkpoint.then_some(job.plan.checkpoint_patterns.as_slice()),
            logs.as_ref().map(|(_, o, e)| (o.as_str(), e.as_str())),
            ask.max_bytes,
        );
        let out = self.remote()?.run_script_capped(
            &script,
            Idempotency::Idempotent,
            ARCHIVE_DEADLINE,
            archive_output_cap(ask.max_bytes),
        )?;
        if out.exit_code != 0 {
            return Err(Error::RemoteCommand(format!(
                "archiving the results of job {id} failed: {}",
                out.stderr.trim()
            )));
        }
        Ok(match parse_archive(&out.stdout) {
            Archive::Base64(text) => {
                use base64::Engine;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(text.trim())
                    .map_err(|e| Error::RemoteCommand(format!("the archive of job {id} came back damaged: {e}")))?;
                let tar_len = unpacked_len(&bytes, ask.max_bytes)
                    .map_err(|e| Error::RemoteCommand(format!("the archive of job {id} came back damaged: {e}")))?;
                if archive_over_cap(tar_len, ask.max_bytes) {
                    ArchiveOut::TooLarge(tar_len)
                } else {
                    ArchiveOut::Bytes(bytes)
                }
            }
            Archive::TooLarge(n) => ArchiveOut::TooLarge(n),
            Archive::Missing(m) => ArchiveOut::Missing(m),
            Archive::NoResults => ArchiveOut::NoResults,
        })
    }
}

/// The bytes a gzip stream unpacks to, counted up to `cap + 1` (never more are unpacked).
fn unpacked_len(gz: &[u8], cap: u64) -> std::io::Result<u64> {
    use std::io::Read;
    let mut reader = flate2::read::GzDecoder::new(gz).take(cap.saturating_add(1));
    std::io::copy(&mut reader, &mut std::io::sink())
}
