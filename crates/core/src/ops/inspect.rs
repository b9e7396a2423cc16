//! Read-only looks that agents need and the CLI does not, their scripts and the readers of their
//! output: Slurm's start-time estimate for a pending job, a byte range of a log file, and whether
//! enroot credentials are installed. The engine's `inspect` runs each in one round trip.

use crate::ops::job_file;
use crate::protocol::{sections, SECTION};
use crate::script::shell::quote;
use serde::Serialize;

/// What Slurm says about when a pending job starts (`squeue --start`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StartEstimate {
    pub slurm_job_id: String,
    /// Slurm's expected start time as it prints it (the cluster's local time), when it has one.
    pub start_time: Option<String>,
    /// Seconds from now until that start time, by the login host's clock.
    pub starts_in_secs: Option<i64>,
    /// Slurm's pending reason (`Resources`, `Priority`, ...).
    pub reason: String,
    pub partition: String,
    pub priority: Option<u64>,
    /// Pending jobs in the same partition(s) with a higher priority.
    pub pending_ahead: Option<u32>,
    pub host: String,
}

/// `squeue --start` of one job, its start time in Unix seconds, and how many pending jobs of its
/// partitions have a higher priority. Pure.
pub fn start_estimate_script(slurm_job_id: &str) -> String {
    format!(
        "line=\"$(squeue --start -h -j {id} -o '%i|%S|%r|%Q|%P' 2>/dev/null | head -n 1)\"\n\
         [ -n \"$line\" ] || exit 0\n\
         echo '{SECTION}start'\nprintf '%s\\n' \"$line\"\n\
         IFS='|' read -r _ start _ prio part <<< \"$line\"\n\
         echo \"{SECTION}now $(date +%s)\"\n\
         case \"$start\" in N/A|Unknown|'') ;; *) echo \"{SECTION}start_epoch $(date -d \"$start\" +%s 2>/dev/null)\" ;; esac\n\
         case \"$prio\" in ''|*[!0-9]*) ;; *) echo \"{SECTION}ahead $(squeue -h -t PD -p \"$part\" -o '%Q' 2>/dev/null | awk -v p=\"$prio\" '$1 > p {{n++}} END {{print n+0}}')\" ;; esac\n",
        id = quote(slurm_job_id)
    )
}

/// Read [`start_estimate_script`]'s output; None when Slurm no longer lists the job as pending. Pure.
pub fn parse_start_estimate(stdout: &str, host: &str) -> Option<StartEstimate> {
    let secs = sections(stdout);
    let arg = |name: &str| secs.iter().find(|(n, _, _)| n == name).map(|(_, a, _)| a.trim().to_string());
    let line = secs.iter().find(|(n, _, _)| n == "start").map(|(_, _, body)| body.trim().to_string())?;
    let fields: Vec<&str> = line.split('|').collect();
    if fields.len() < 5 {
        return None;
    }
    let start_time = Some(fields[1].to_string()).filter(|s| !matches!(s.as_str(), "N/A" | "Unknown" | ""));
    let now = arg("now").and_then(|n| n.parse::<i64>().ok());
    let start_epoch = arg("start_epoch").and_then(|n| n.parse::<i64>().ok());
    Some(StartEstimate {
        slurm_job_id: fields[0].to_string(),
        starts_in_secs: start_epoch.zip(now).map(|(s, n)| s - n),
        start_time,
        reason: fields[2].to_string(),
        priority: fields[3].parse().ok(),
        partition: fields[4].to_string(),
        pending_ahead: arg("ahead").and_then(|n| n.parse().ok()),
        host: host.to_string(),
    })
}

/// A piece of a log file read from a byte offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogRange {
    pub path: String,
    /// Where this piece starts (0 when the file became shorter than the offset asked for).
    pub offset: u64,
    /// Where the next read continues: `offset` plus the bytes returned.
    pub next_offset: u64,
    /// The file's size when it was read; None when it does not exist (yet).
    pub size: Option<u64>,
    /// The bytes, as text (invalid UTF-8 replaced).
    pub text: String,
    /// The file was shorter than the offset asked for (rewritten), so this piece starts at 0.
    pub restarted: bool,
    /// The job replaced the file with something that is not a regular file (a FIFO, a symlink): it
    /// was not read.
    pub not_regular: bool,
}

/// The file's size and up to `max_bytes` from `offset`, base64-encoded so that offsets stay exact
/// whatever the bytes are (and no byte of the log can pose as a marker). Read by the one reader of
/// job-written files ([`job_file`]): a FIFO or a symlink is reported, never opened. Pure.
pub fn log_range_script(path: &str, offset: u64, max_bytes: u64) -> String {
    job_file::with_functions(&format!(
        "f={p}; off={offset}\n\
         read -r kind size <<<\"$(tao_jf_stat \"$f\")\"\n\
         case \"$kind\" in regular) ;; missing) exit 0 ;; *) echo '{SECTION}notregular'; exit 0 ;; esac\n\
         [ \"$size\" -lt \"$off\" ] && off=0\n\
         echo \"{SECTION}range $size $off\"\n\
         tao_jf_read \"$f\" \"$off\" {max_bytes} | base64 -w 0\necho\n",
        p = quote(path)
    ))
}

/// Read [`log_range_script`]'s output. A piece that stops before the end of the file is cut after its
/// last newline (when it has one), so lines come whole and the next read starts at a line. Pure.
pub fn parse_log_range(stdout: &str, path: &str, asked_offset: u64) -> Result<LogRange, String> {
    let sections = sections(stdout);
    let Some((_, arg, body)) = sections.iter().find(|(n, _, _)| n == "range") else {
        return Ok(LogRange {
            path: path.to_string(),
            offset: asked_offset,
            next_offset: asked_offset,
            size: None,
            text: String::new(),
            restarted: false,
            not_regular: sections.iter().any(|(n, _, _)| n == "notregular"),
        });
    };
    let mut words = arg.split_whitespace().map(|w| w.parse::<u64>());
    let (Some(Ok(size)), Some(Ok(offset))) = (words.next(), words.next()) else {
        return Err(format!("unreadable log range header {arg:?} for {path}"));
    };
    let mut bytes =
        decode_base64(body.trim()).ok_or_else(|| format!("unreadable log bytes for {path} (not base64)"))?;
    if offset + (bytes.len() as u64) < size {
        if let Some(last_newline) = bytes.iter().rposition(|b| *b == b'\n') {
            bytes.truncate(last_newline + 1);
        }
    }
    Ok(LogRange {
        path: path.to_string(),
        offset,
        next_offset: offset + bytes.len() as u64,
        size: Some(size),
        text: String::from_utf8_lossy(&bytes).into_owned(),
        restarted: offset < asked_offset,
        not_regular: false,
    })
}

/// Standard base64 (RFC 4648, with padding), as coreutils' `base64` writes it. None if malformed.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let clean: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    if !clean.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(clean.len() / 4 * 3);
    for quad in clean.chunks(4) {
        let pad = quad.iter().rev().take_while(|c| **c == b'=').count();
        if pad > 2 {
            return None;
        }
        let mut n = 0u32;
        for c in &quad[..4 - pad] {
            n = (n << 6) | value(*c)?;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

/// Whether enroot can authenticate to nvcr.io on the cluster. Never carries the key: the remote
/// script reports only the file's mode and which machine names it has lines for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CredentialsStatus {
    /// The file has an nvcr.io line and mode 600.
    pub installed: bool,
    pub path: String,
    pub exists: bool,
    /// Octal mode, e.g. `600`.
    pub mode: Option<String>,
    pub has_nvcr_io: bool,
    pub has_authn_nvidia_com: bool,
    pub host: String,
}

/// The path, mode and the two machine names of interest; `grep -c` prints counts, never lines. Pure.
pub fn credentials_status_script() -> String {
    format!(
        "f=\"${{ENROOT_CONFIG_PATH:-$HOME/.config/enroot}}/.credentials\"\n\
         echo \"{SECTION}path $f\"\n\
         [ -f \"$f\" ] || exit 0\n\
         echo \"{SECTION}mode $(stat -c %a \"$f\")\"\n\
         echo \"{SECTION}nvcr $(grep -c '^machine nvcr\\.io ' \"$f\" 2>/dev/null)\"\n\
         echo \"{SECTION}authn $(grep -c '^machine authn\\.nvidia\\.com ' \"$f\" 2>/dev/null)\"\n"
    )
}

/// Read [`credentials_status_script`]'s output. Pure.
pub fn parse_credentials_status(stdout: &str, host: &str) -> CredentialsStatus {
    let secs = sections(stdout);
    let arg = |name: &str| secs.iter().find(|(n, _, _)| n == name).map(|(_, a, _)| a.trim().to_string());
    let count = |name: &str| arg(name).and_then(|c| c.parse::<u32>().ok()).unwrap_or(0);
    let mode = arg("mode");
    let has_nvcr_io = count("nvcr") > 0;
    CredentialsStatus {
        installed: has_nvcr_io && mode.as_deref() == Some("600"),
        path: arg("path").unwrap_or_default(),
        exists: mode.is_some(),
        mode,
        has_nvcr_io,
        has_authn_nvidia_com: count("authn") > 0,
        host: host.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bash(script: &str, env: &[(&str, &str)]) -> String {
        let out = std::process::Command::new("bash").arg("-c").arg(script).envs(env.iter().copied()).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn base64_round_trips_what_coreutils_writes() {
        for sample in ["", "a", "ab", "abc", "abcd", "line 1\nline 2\n\u{e9}\u{1F600}"] {
            let script = format!("printf '%s' {} | base64 -w 0", quote(sample));
            assert_eq!(decode_base64(&bash(&script, &[])).unwrap(), sample.as_bytes(), "{sample:?}");
        }
        assert!(decode_base64("abc").is_none());
        assert!(decode_base64("ab!d").is_none());
    }

    #[test]
    fn log_ranges_continue_at_whole_lines_and_restart_after_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("main.out");
        std::fs::write(&f, "first line\nsecond line\n@@tao-slurm:range 1 1\nthird").unwrap();
        let path = f.display().to_string();
        let read = |offset, max| parse_log_range(&bash(&log_range_script(&path, offset, max), &[]), &path, offset);
        let a = read(0, 15).unwrap();
        assert_eq!((a.text.as_str(), a.offset, a.next_offset), ("first line\n", 0, 11));
        assert_eq!(a.size, Some(50));
        let b = read(a.next_offset, 1000).unwrap();
        assert_eq!(b.text, "second line\n@@tao-slurm:range 1 1\nthird", "a marker inside the log is just text");
        assert_eq!(b.next_offset, 50);
        let c = read(b.next_offset, 1000).unwrap();
        assert_eq!((c.text.as_str(), c.next_offset), ("", 50));
        std::fs::write(&f, "new\n").unwrap();
        let d = read(50, 1000).unwrap();
        assert!(d.restarted);
        assert_eq!((d.text.as_str(), d.offset, d.next_offset), ("new\n", 0, 4));
        let missing =
            parse_log_range(&bash(&log_range_script("/nonexistent/x", 7, 10), &[]), "/nonexistent/x", 7).unwrap();
        assert_eq!((missing.size, missing.next_offset), (None, 7));
    }

    #[test]
    fn credentials_status_reports_names_and_mode_never_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().display().to_string();
        let env = [("ENROOT_CONFIG_PATH", conf.as_str())];
        let missing = parse_credentials_status(&bash(&credentials_status_script(), &env), "login1");
        assert!(!missing.installed && !missing.exists);
        assert_eq!(missing.path, format!("{conf}/.credentials"));

        let key = "sekrit-ngc-key";
        let file = dir.path().join(".credentials");
        std::fs::write(&file, format!("machine nvcr.io login $oauthtoken password {key}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let out = bash(&credentials_status_script(), &env);
        assert!(!out.contains(key), "{out}");
        let loose = parse_credentials_status(&out, "login1");
        assert!(loose.exists && loose.has_nvcr_io && !loose.has_authn_nvidia_com);
        assert!(!loose.installed, "mode 644 does not count");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(parse_credentials_status(&bash(&credentials_status_script(), &env), "login1").installed);
    }

    #[test]
    fn start_estimates_are_read_from_squeue() {
        let dir = tempfile::tempdir().unwrap();
        let squeue = dir.path().join("squeue");
        std::fs::write(
            &squeue,
            "#!/bin/bash\nif [[ \" $* \" == *' --start '* ]]; then echo '17|2030-01-02T03:04:05|Resources|500|polar'; \
             else printf '900\\n600\\n100\\n500\\n'; fi\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&squeue, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("{}:/usr/bin:/bin", dir.path().display());
        let e = parse_start_estimate(&bash(&start_estimate_script("17"), &[("PATH", &path)]), "login1").unwrap();
        assert_eq!(e.start_time.as_deref(), Some("2030-01-02T03:04:05"));
        assert_eq!((e.reason.as_str(), e.priority, e.pending_ahead), ("Resources", Some(500), Some(2)));
        assert!(e.starts_in_secs.unwrap() > 0);
        let unknown = parse_start_estimate("@@tao-slurm:start\n18|N/A|Priority|1|polar\n@@tao-slurm:now 5\n", "h");
        assert_eq!(unknown.unwrap().start_time, None);
        assert_eq!(parse_start_estimate("", "h"), None, "not pending: no estimate");
    }
}
