//! `--workdir`: pack a local directory (honouring `.gitignore` and `.taoslurmignore`), upload it once
//! per content through the transport (under the submit's umask and trust checks, mode 600; an archive
//! already there is reused only when its content has the hash it is named by), and point the spec at
//! the archive; the job unpacks it.

use super::Client;
use crate::error::{Error, Result};
use crate::ops::workdir;
use crate::remote::Idempotency;
use crate::spec::{JobSpec, SpecError};
use std::io::Write;
use std::path::Path;

/// What sending a workdir cost.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkdirUpload {
    /// Hex sha-256 of the packed tar: the archive's name.
    pub hash: String,
    pub archive: String,
    pub files: usize,
    /// Size of the gzip'd archive.
    pub packed_bytes: u64,
    /// Bytes sent to the cluster: 0 when the same content was sent before.
    pub uploaded_bytes: u64,
}

/// A packed directory: its gzip'd tar and the tar's hash.
pub struct Packed {
    pub gz: Vec<u8>,
    pub hash: String,
    pub files: usize,
}

/// How far an upload is: (bytes sent, bytes to send).
pub type UploadProgress<'a> = &'a mut dyn FnMut(u64, u64);

impl Client {
    /// If `spec` names a workdir, send it (unless already there) and return the spec pointing at its
    /// archive, with what it cost. Sweep variants and pipeline steps copy the spec: one upload.
    pub fn send_workdir(&self, spec: &JobSpec) -> Result<(JobSpec, Option<WorkdirUpload>)> {
        self.send_workdir_with(spec, &mut |_, _| {})
    }

    /// [`Client::send_workdir`], telling `progress` after each part sent.
    pub fn send_workdir_with(
        &self,
        spec: &JobSpec,
        progress: UploadProgress<'_>,
    ) -> Result<(JobSpec, Option<WorkdirUpload>)> {
        let Some(dir) = &spec.workdir else { return Ok((spec.clone(), None)) };
        let packed = pack(Path::new(dir))?;
        let archive = workdir::archive_path(&self.settings.base_dir(), &packed.hash);
        // An archive of that name is reused only when its content has that hash (else sent again).
        let present =
            self.remote()?.run_script(&workdir::present_script(&archive, &packed.hash), Idempotency::Idempotent)?;
        let mut uploaded_bytes = 0;
        match present.exit_code {
            0 => {}
            1 => {
                self.upload(&archive, &packed.gz, progress)?;
                uploaded_bytes = packed.gz.len() as u64;
            }
            _ => {
                return Err(Error::RemoteCommand(format!(
                    "cannot send the workdir to {archive}: {}",
                    present.stderr.trim()
                )))
            }
        }
        let mut sent = spec.clone();
        sent.workdir_archive = Some(archive.clone());
        let upload = WorkdirUpload {
            hash: packed.hash,
            archive,
            files: packed.files,
            packed_bytes: packed.gz.len() as u64,
            uploaded_bytes,
        };
        Ok((sent, Some(upload)))
    }

    /// Send `gz` as `archive`: in one script when it is small, else part by part into a private
    /// directory beside it, then assembled and checked against its size and sha-256.
    fn upload(&self, archive: &str, gz: &[u8], progress: UploadProgress<'_>) -> Result<()> {
        use base64::Engine;
        let encode = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let remote = self.remote()?;
        let total = gz.len() as u64;
        let failed = |out: crate::remote::RemoteOutput| {
            Error::RemoteCommand(format!("cannot upload the workdir to {archive}: {}", out.stderr.trim()))
        };
        progress(0, total);
        if gz.len() <= workdir::UPLOAD_PART_BYTES {
            let out = remote.run_script(&workdir::upload_script(archive, &encode(gz)), Idempotency::Idempotent)?;
            if out.exit_code != 0 {
                return Err(failed(out));
            }
            progress(total, total);
            return Ok(());
        }
        // Two submits of the same new content at once each send their own parts.
        let parts_dir = format!("{archive}.parts-{}", uuid::Uuid::new_v4().simple());
        let mut sent = 0u64;
        let chunks: Vec<&[u8]> = gz.chunks(workdir::UPLOAD_PART_BYTES).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let out = remote.run_script(&workdir::part_script(&parts_dir, i, &encode(chunk)), Idempotency::Idempotent);
            match out {
                Ok(out) if out.exit_code == 0 => {}
                stopped => {
                    // Best effort: the parts of an upload that stopped are of no use to anyone.
                    let rm = format!("rm -rf {}\n", crate::script::shell::quote(&parts_dir));
                    let _ = remote.run_script(&rm, Idempotency::Idempotent);
                    return Err(match stopped {
                        Ok(out) => failed(out),
                        Err(e) => e.into(),
                    });
                }
            }
            sent += chunk.len() as u64;
            progress(sent, total);
        }
        use sha2::{Digest, Sha256};
        let sha: String = Sha256::digest(gz).iter().map(|b| format!("{b:02x}")).collect();
        let script = workdir::assemble_script(archive, &parts_dir, chunks.len(), total, &sha);
        let out = remote.run_script(&script, Idempotency::Idempotent)?;
        if out.exit_code != 0 {
            return Err(failed(out));
        }
        Ok(())
    }
}

fn bad(message: String) -> Error {
    SpecError::new("workdir", message).into()
}

/// Pack `dir`: its files in path order (`.git` and what `.gitignore`, `.git/info/exclude` and
/// `.taoslurmignore` ignore left out), with fixed owners and times, so that the same content always
/// makes the same tar and hash. Refused above [`workdir::MAX_PACKED_BYTES`] packed.
pub fn pack(dir: &Path) -> Result<Packed> {
    use sha2::{Digest, Sha256};
    if !dir.is_dir() {
        return Err(bad(format!("{} is not a directory", dir.display())));
    }
    let walk = ignore::WalkBuilder::new(dir)
        .hidden(false)
        .git_global(false)
        .require_git(false)
        .add_custom_ignore_filename(".taoslurmignore")
        .filter_entry(|e| e.file_name() != ".git")
        .sort_by_file_path(|a, b| a.cmp(b))
        .build();
    let mut tar = tar::Builder::new(Vec::new());
    let mut files = 0;
    let mut raw = 0u64;
    for entry in walk {
        let entry = entry.map_err(|e| bad(e.to_string()))?;
        let Some(kind) = entry.file_type() else { continue };
        if !kind.is_file() {
            continue; // directories come with their files; links and devices are not sent
        }
        let rel = entry.path().strip_prefix(dir).map_err(|e| bad(e.to_string()))?;
        let data = std::fs::read(entry.path()).map_err(|e| bad(format!("{}: {e}", entry.path().display())))?;
        raw += data.len() as u64;
        if raw > 4 * workdir::MAX_PACKED_BYTES {
            return Err(too_big(dir));
        }
        let executable =
            std::os::unix::fs::PermissionsExt::mode(&entry.metadata().map_err(|e| bad(e.to_string()))?.permissions())
                & 0o111
                != 0;
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(if executable { 0o755 } else { 0o644 });
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        tar.append_data(&mut header, rel, data.as_slice()).map_err(|e| bad(e.to_string()))?;
        files += 1;
    }
    let tar = tar.into_inner().map_err(|e| bad(e.to_string()))?;
    let hash = Sha256::digest(&tar).iter().map(|b| format!("{b:02x}")).collect();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar).map_err(|e| bad(e.to_string()))?;
    let gz = gz.finish().map_err(|e| bad(e.to_string()))?;
    if gz.len() as u64 > workdir::MAX_PACKED_BYTES {
        return Err(too_big(dir));
    }
    Ok(Packed { gz, hash, files })
}

fn too_big(dir: &Path) -> Error {
    bad(format!(
        "{} packs to more than {} MiB: leave data and outputs out with .gitignore or .taoslurmignore (put data on shared storage)",
        dir.display(),
        workdir::MAX_PACKED_BYTES / (1024 * 1024)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(gz: &[u8]) -> Vec<String> {
        let mut a = tar::Archive::new(flate2::read::GzDecoder::new(gz));
        a.entries().unwrap().map(|e| e.unwrap().path().unwrap().display().to_string()).collect()
    }

    #[test]
    fn ignored_files_are_left_out_and_the_same_content_has_the_same_hash() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::write(p.join(".gitignore"), "data.bin\n").unwrap();
        std::fs::write(p.join(".taoslurmignore"), "outputs/\n").unwrap();
        std::fs::write(p.join("data.bin"), vec![0u8; 1000]).unwrap();
        std::fs::create_dir_all(p.join("src")).unwrap();
        std::fs::create_dir_all(p.join("outputs")).unwrap();
        std::fs::create_dir_all(p.join(".git")).unwrap();
        std::fs::write(p.join(".git/HEAD"), "ref").unwrap();
        std::fs::write(p.join("outputs/o.txt"), "o").unwrap();
        std::fs::write(p.join("src/train.py"), "print(1)").unwrap();
        let a = pack(p).unwrap();
        assert_eq!(names(&a.gz), [".gitignore", ".taoslurmignore", "src/train.py"]);
        assert_eq!(pack(p).unwrap().hash, a.hash);
        std::fs::write(p.join("src/train.py"), "print(2)").unwrap();
        assert_ne!(pack(p).unwrap().hash, a.hash);
        assert!(pack(&p.join("missing")).is_err());
    }
}
