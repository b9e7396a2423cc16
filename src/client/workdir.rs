//! `--workdir`: pack a local directory (honouring `.gitignore` and `.taoslurmignore`), upload it once
//! per content through the transport, and point the spec at the archive; the job unpacks it.

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

impl Client {
    /// If `spec` names a workdir, send it (unless already there) and return the spec pointing at its
    /// archive, with what it cost. Sweep variants and pipeline steps copy the spec: one upload.
    pub fn send_workdir(&self, spec: &JobSpec) -> Result<(JobSpec, Option<WorkdirUpload>)> {
        let Some(dir) = &spec.workdir else { return Ok((spec.clone(), None)) };
        let packed = pack(Path::new(dir))?;
        let archive = workdir::archive_path(&self.settings.base_dir(), &packed.hash);
        let remote = self.remote()?;
        let present = remote.run_script(&workdir::present_script(&archive), Idempotency::Idempotent)?;
        let mut uploaded_bytes = 0;
        if present.exit_code != 0 {
            use base64::Engine;
            let encoded = base64::engine::general_purpose::STANDARD.encode(&packed.gz);
            let out = remote.run_script(&workdir::upload_script(&archive, &encoded), Idempotency::Idempotent)?;
            if out.exit_code != 0 {
                return Err(Error::RemoteCommand(format!(
                    "cannot upload the workdir to {archive}: {}",
                    out.stderr.trim()
                )));
            }
            uploaded_bytes = packed.gz.len() as u64;
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
