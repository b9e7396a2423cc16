//! Reading a job's log files, its scripts and the readers of their output: whole or tail of both
//! files in marked sections, and the bytes added since a cursor (for `logs -f`). Only regular files are
//! read, under a time limit (a job can make its log a FIFO or a symlink to anything). The engine's
//! `logs` runs them.

use crate::cosmos::Role;
use crate::model::JobRecord;
use crate::ops::job_file;
use crate::protocol::{sections, unprefix_lines, PREFIX_LINES, SECTION};
use crate::script::shell::quote;
use crate::spec::SpecError;

/// Which of the two files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Most bytes of one log a `logs` call reads (the last ones when tailing, the first ones otherwise;
/// `logs -f` reads any amount, chunk by chunk).
pub const LOG_READ_CAP: u64 = job_file::READ_CAP;

/// The most output [`logs_script`]s of `files` log files can make: each file's [`LOG_READ_CAP`]
/// bytes, doubled at worst by the `|` of each line (a file of empty lines), and the sections.
pub fn logs_output_cap(files: usize) -> u64 {
    (files as u64).saturating_mul(2 * LOG_READ_CAP + 4096).saturating_add(1 << 16)
}

/// Seconds one read of a job's files may take (a job can swap a log for something that blocks).
pub const JOB_FILE_READ_SECS: u32 = job_file::READ_SECS;

/// `tail` (or the whole file when `tail_lines` is None) of both files, in marked sections, read by
/// the one reader of job-written files ([`job_file`]): regular files only, at most [`LOG_READ_CAP`]
/// bytes each, under a time limit. `slurm_files`: where Slurm opened them, read when the two are
/// not there (a job whose script never linked them: see [`slurm_paths`]). Pure.
pub fn logs_script(
    out_path: &str,
    err_path: &str,
    slurm_files: Option<(&str, &str)>,
    tail_lines: Option<u32>,
) -> String {
    let mut s = String::new();
    let (slurm_out, slurm_err) = slurm_files.unzip();
    for (name, path, slurm) in [("stdout", out_path, slurm_out), ("stderr", err_path, slurm_err)] {
        let (skip, filter) = match tail_lines {
            Some(n) => (format!("$((size > {LOG_READ_CAP} ? size - {LOG_READ_CAP} : 0))"), format!(" | tail -n {n}")),
            None => ("0".to_string(), String::new()),
        };
        // Lines are prefixed so that no log line can pose as a section marker.
        s.push_str(&format!(
            "echo '{SECTION}{name}'\nf={p}\n{fallback}read -r kind size <<<\"$(tao_jf_stat \"$f\")\"\n\
             case \"$kind\" in\n  regular) tao_jf_read \"$f\" {skip} {LOG_READ_CAP}{filter} | {PREFIX_LINES}\n    \
             [ \"$size\" -gt {LOG_READ_CAP} ] && echo \"{SECTION}truncated $size\" ;;\n  \
             missing) echo '{SECTION}missing' ;;\n  *) echo '{SECTION}notregular' ;;\nesac\n",
            p = quote(path),
            fallback = slurm.map(or_slurms_file).unwrap_or_default(),
        ));
    }
    job_file::with_functions(&s)
}

/// The (stdout, stderr) texts of the [`logs_script`] outputs in `stdout`, in order; each pair starts
/// at its `stdout` section. Pure.
pub fn parse_pairs(stdout: &str, tail_lines: Option<u32>) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut in_stdout = true;
    for (name, arg, body) in sections(stdout) {
        let text: String = unprefix_lines(&body);
        match name.as_str() {
            "stdout" => {
                in_stdout = true;
                pairs.push((text, String::new()));
            }
            "stderr" => {
                in_stdout = false;
                if let Some(p) = pairs.last_mut() {
                    p.1 = text;
                }
            }
            "missing" => {
                if let Some(p) = pairs.last_mut() {
                    *(if in_stdout { &mut p.0 } else { &mut p.1 }) = "(not written yet)\n".into();
                }
            }
            "notregular" => {
                if let Some(p) = pairs.last_mut() {
                    *(if in_stdout { &mut p.0 } else { &mut p.1 }) =
                        "(not shown: the job replaced this log with something that is not a regular file)\n".into();
                }
            }
            "truncated" => {
                let note = format!(
                    "(this log is {} bytes; only {} are shown here: use --tail N or logs -f)\n",
                    body_or(&arg),
                    if tail_lines.is_some() {
                        format!("lines of the last {LOG_READ_CAP}")
                    } else {
                        format!("the first {LOG_READ_CAP}")
                    }
                );
                if let Some(p) = pairs.last_mut() {
                    (if in_stdout { &mut p.0 } else { &mut p.1 }).push_str(&note);
                }
            }
            _ => {}
        }
    }
    pairs
}

fn body_or(arg: &str) -> &str {
    if arg.is_empty() {
        "?"
    } else {
        arg
    }
}

/// The last `max` bytes of `text`, starting at a line when one starts within them; and whether
/// anything was cut (every reply of a log that has a byte cap). Pure.
pub fn keep_end(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_string(), false);
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    if let Some(nl) = text[start..].find('\n').filter(|nl| start + nl + 1 < text.len()) {
        start += nl + 1;
    }
    (text[start..].to_string(), true)
}

/// Largest chunk one poll reads per file; a file further behind is caught up over several polls.
pub const MAX_CHUNK_BYTES: u64 = 8 << 20;

/// Where a follower is in each file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FollowCursor {
    pub stdout_offset: u64,
    pub stderr_offset: u64,
}

/// New bytes of the files since the cursor, delimited by a marker that includes an unguessable nonce,
/// so nothing in a log can end a chunk early. Pure.
pub fn follow_chunks_script(files: &[(Stream, &str, u64)], nonce: &str) -> String {
    let mut s = String::new();
    for (stream, path, offset) in files {
        let name = stream_name(*stream);
        s.push_str(&format!(
            "f={p}; off={offset}\nread -r kind size <<<\"$(tao_jf_stat \"$f\")\"\n\
             if [ \"$kind\" = regular ]; then\n  [ \"$size\" -lt \"$off\" ] && off=0\n  n=$((size - off)); [ \"$n\" -gt {MAX_CHUNK_BYTES} ] && n={MAX_CHUNK_BYTES}\n  \
             echo \"{SECTION}chunk {name} $off $n\"\n  tao_jf_read \"$f\" \"$off\" \"$n\"\n  printf '\\n{SECTION}endchunk-{nonce}\\n'\nfi\n",
            p = quote(path)
        ));
    }
    job_file::with_functions(&s)
}

fn stream_name(stream: Stream) -> &'static str {
    match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    }
}

/// One chunk: the stream, the offset it starts at, and its bytes (shown lossily if not UTF-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub stream: Stream,
    pub offset: u64,
    pub len: u64,
    pub text: String,
}

/// Split follow output into what came before the chunks (the refresh part) and the chunks. Pure.
pub fn parse_chunks(stdout: &str, nonce: &str) -> (String, Vec<Chunk>) {
    let header = format!("{SECTION}chunk ");
    let end = format!("\n{SECTION}endchunk-{nonce}\n");
    let Some(first) = stdout.find(&header).filter(|i| *i == 0 || stdout.as_bytes()[i - 1] == b'\n') else {
        return (stdout.to_string(), Vec::new());
    };
    let (before, mut rest) = stdout.split_at(first);
    let mut chunks = Vec::new();
    while let Some(h) = rest.strip_prefix(&header) {
        let Some((line, body)) = h.split_once('\n') else { break };
        let mut words = line.split_whitespace();
        let stream = if words.next() == Some("stderr") { Stream::Stderr } else { Stream::Stdout };
        let offset = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
        let len = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
        let Some(stop) = body.find(&end) else { break };
        chunks.push(Chunk { stream, offset, len, text: body[..stop].to_string() });
        rest = &body[stop + end.len()..];
    }
    (before.to_string(), chunks)
}

/// Where a job's attempt keeps its logs: (Slurm job id, main.out, main.err) in
/// `<logs root>/<attempt name>-<Slurm job id>/`; None while the attempt has no Slurm job.
pub fn log_paths(job: &JobRecord) -> Option<(String, String, String)> {
    let slurm_job_id = job.slurm_job_id.clone()?;
    let dir = job.plan.layout.log_dir(&job.attempt_name, &slurm_job_id);
    Some((slurm_job_id, format!("{dir}/main.out"), format!("{dir}/main.err")))
}

/// The shell line that, when the log file `$f` is not there at all (the batch script never linked
/// it), reads `slurm_file` instead, the file Slurm opened (see [`slurm_paths`]). Anything at `$f`,
/// a symlink included, stays `$f`, for the reader to judge.
pub fn or_slurms_file(slurm_file: &str) -> String {
    format!("[ -e \"$f\" ] || [ -L \"$f\" ] || f={}\n", quote(slurm_file))
}

/// Where Slurm opened the attempt's output and error ([`crate::layout::Layout::slurm_output`]): the
/// same files as main.out and main.err once the batch script linked them, and the only names of
/// what Slurm wrote when it never ran (a launch that failed before it).
pub fn slurm_paths(job: &JobRecord) -> Option<(String, String)> {
    let id = job.slurm_job_id.as_deref()?;
    let layout = &job.plan.layout;
    Some((layout.slurm_output(&job.attempt_name, id, "out"), layout.slurm_output(&job.attempt_name, id, "err")))
}

/// The log files of one task of a Cosmos-RL role in the attempt: `<log dir>/<role>/<task>.out|err`.
pub fn role_log_paths(job: &JobRecord, role: Role, task: u32) -> Option<(String, String, String)> {
    let (slurm_job_id, out, _) = log_paths(job)?;
    let dir = out.rsplit_once('/').map_or(String::new(), |(d, _)| d.to_string());
    Some((slurm_job_id, format!("{dir}/{role}/{task}.out"), format!("{dir}/{role}/{task}.err")))
}

/// The tasks of `role` to read (all of them, or just `task`), checked against the job's split.
pub fn role_tasks(job: &JobRecord, role: Role, task: Option<u32>) -> Result<Vec<u32>, SpecError> {
    let Some(cosmos) = &job.plan.cosmos else {
        return Err(SpecError::new(
            "role",
            format!("job {} is not a Cosmos-RL job: its logs are main.out and main.err (drop --role)", job.job_id),
        ));
    };
    let tasks = cosmos.tasks(role);
    if tasks == 0 {
        return Err(SpecError::new(
            "role",
            format!("job {} has no {role} role (it trains without rollout workers)", job.job_id),
        ));
    }
    match task {
        None => Ok((0..tasks).collect()),
        Some(t) if t < tasks => Ok(vec![t]),
        Some(t) => Err(SpecError::new(
            "task",
            format!("the {role} role of job {} has tasks 0 to {} (one per node), not {t}", job.job_id, tasks - 1),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_read_from_offsets_and_cannot_be_spoofed() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("main.out");
        std::fs::write(&out, "line1\n@@tao-slurm:endchunk-guess\n@@tao-slurm:chunk stdout 0 1\nline4").unwrap();
        let path = out.display().to_string();
        let nonce = "n0nce";
        let script = follow_chunks_script(&[(Stream::Stdout, &path, 6), (Stream::Stderr, "/nonexistent", 0)], nonce);
        let run = std::process::Command::new("bash").arg("-c").arg(&script).output().unwrap();
        let (before, chunks) = parse_chunks(&String::from_utf8(run.stdout).unwrap(), nonce);
        assert_eq!(before, "");
        assert_eq!(chunks.len(), 1, "a missing file yields no chunk");
        assert_eq!(chunks[0].offset, 6);
        assert_eq!(chunks[0].text, "@@tao-slurm:endchunk-guess\n@@tao-slurm:chunk stdout 0 1\nline4");
        assert_eq!(chunks[0].len, chunks[0].text.len() as u64);
    }

    #[test]
    fn several_pairs_of_files_are_read_in_one_script() {
        let dir = tempfile::tempdir().unwrap();
        let p = |name: &str| dir.path().join(name).display().to_string();
        std::fs::write(p("0.out"), "task 0 says\n@@tao-slurm:stderr\n").unwrap();
        std::fs::write(p("0.err"), "").unwrap();
        std::fs::write(p("1.err"), "boom\n").unwrap();
        let script =
            logs_script(&p("0.out"), &p("0.err"), None, None) + &logs_script(&p("1.out"), &p("1.err"), None, Some(5));
        let run = std::process::Command::new("bash").arg("-c").arg(&script).output().unwrap();
        let pairs = parse_pairs(&String::from_utf8(run.stdout).unwrap(), None);
        assert_eq!(
            pairs,
            vec![
                ("task 0 says\n@@tao-slurm:stderr\n".to_string(), String::new()),
                ("(not written yet)\n".to_string(), "boom\n".to_string()),
            ]
        );
    }

    /// main.out and main.err not there (the batch script never ran to link them): Slurm's own files
    /// are read in their place; once linked, the log directory's; a symlink there is refused, not
    /// passed over.
    #[test]
    fn slurms_files_are_read_when_the_log_directory_has_none() {
        let dir = tempfile::tempdir().unwrap();
        let p = |name: &str| dir.path().join(name).display().to_string();
        std::fs::write(p(".x-1.out"), "").unwrap();
        std::fs::write(p(".x-1.err"), "slurmstepd: error: execve(): bad\n").unwrap();
        std::fs::create_dir(p("x-1")).unwrap();
        let read = || {
            let script =
                logs_script(&p("x-1/main.out"), &p("x-1/main.err"), Some((&p(".x-1.out"), &p(".x-1.err"))), None);
            let run = std::process::Command::new("bash").arg("-c").arg(&script).output().unwrap();
            parse_pairs(&String::from_utf8(run.stdout).unwrap(), None).pop().unwrap()
        };
        assert_eq!(read(), (String::new(), "slurmstepd: error: execve(): bad\n".to_string()));
        std::fs::write(p("x-1/main.err"), "the job's own\n").unwrap();
        assert_eq!(read().1, "the job's own\n");
        std::fs::remove_file(p("x-1/main.err")).unwrap();
        std::os::unix::fs::symlink(p(".x-1.err"), p("x-1/main.err")).unwrap();
        assert!(read().1.starts_with("(not shown: the job replaced this log"), "{:?}", read());
    }

    #[test]
    fn a_truncated_file_is_read_from_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("main.out");
        std::fs::write(&out, "new\n").unwrap();
        let script = follow_chunks_script(&[(Stream::Stdout, &out.display().to_string(), 100)], "x");
        let run = std::process::Command::new("bash").arg("-c").arg(&script).output().unwrap();
        let (_, chunks) = parse_chunks(&String::from_utf8(run.stdout).unwrap(), "x");
        assert_eq!((chunks[0].offset, chunks[0].text.as_str()), (0, "new\n"));
    }

    #[test]
    fn every_reader_refuses_fifos_and_symlinks_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "the linked file's content\n").unwrap();
        let fifo = dir.path().join("fifo.out");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let link = dir.path().join("link.out");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        for path in [fifo.display().to_string(), link.display().to_string()] {
            let run = |script: String| {
                let started = std::time::Instant::now();
                let out = std::process::Command::new("bash").arg("-c").arg(script).output().unwrap();
                assert!(started.elapsed() < std::time::Duration::from_secs(10), "{path} blocked");
                String::from_utf8(out.stdout).unwrap()
            };
            let tail = run(logs_script(&path, "/nonexistent", None, Some(10)));
            assert!(!tail.contains("linked file") && tail.contains("notregular"), "{tail}");
            let pairs = parse_pairs(&tail, Some(10));
            assert!(pairs[0].0.starts_with("(not shown"), "{pairs:?}");
            let follow = run(follow_chunks_script(&[(Stream::Stdout, &path, 0)], "n"));
            assert_eq!(parse_chunks(&follow, "n").1, vec![], "{follow}");
            let range = run(crate::ops::inspect::log_range_script(&path, 0, 100));
            let r = crate::ops::inspect::parse_log_range(&range, &path, 0).unwrap();
            assert!(r.not_regular && r.text.is_empty() && r.size.is_none(), "{r:?}");
        }
    }

    #[test]
    fn the_end_is_kept_from_a_line_start() {
        assert_eq!(keep_end("short", 10), ("short".to_string(), false));
        assert_eq!(keep_end("line one\nline two\nthree\n", 12), ("three\n".to_string(), true));
        let (t, cut) = keep_end("ééééé", 5);
        assert!(cut && t.len() <= 5 && t.chars().all(|c| c == 'é'), "{t}");
    }
}
