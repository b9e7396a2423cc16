//! A job's results directory from outside: the files in it (with sizes), and a gzip'd tar of all or
//! some of them (plus the attempt's main.out/main.err as `logs/`), refused above a size cap before any
//! archive is made. The tar comes back base64-encoded (remote output is text). Pure: scripts, parsers,
//! and the check of the names a caller asks for.

use crate::protocol::{sections, SECTION};
use crate::script::names;
use crate::script::shell::{join, quote};
use crate::spec::SpecError;

/// One file of a results directory, its path relative to it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ResultFile {
    pub path: String,
    pub size: u64,
}

/// What an archive script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Archive {
    /// The gzip'd tar, base64-encoded.
    Base64(String),
    /// The selection holds this many bytes, more than the cap.
    TooLarge(u64),
    /// Names asked for that are not there.
    Missing(Vec<String>),
    /// The job has no results directory (yet).
    NoResults,
}

/// A name asked for must be a relative path inside the directory: no `..`, no leading `/` or `-`,
/// no control characters (the one rule: [`crate::script::names`]).
pub fn check_name(field: &str, name: &str) -> Result<(), SpecError> {
    names::check(field, name)
}

/// The logs of an attempt as the archive names them.
fn log_members(logs: Option<(&str, &str)>) -> Vec<(String, &'static str)> {
    match logs {
        Some((out, err)) => vec![(out.to_string(), "logs/main.out"), (err.to_string(), "logs/main.err")],
        None => Vec::new(),
    }
}

/// `find` tests of tao-slurm's own files at the top of a results directory.
fn bookkeeping_paths() -> String {
    crate::layout::BOOKKEEPING.map(|b| format!("-path ./{b}")).join(" -o ")
}

/// List the regular files under `dir` (at most `max`), then the log files that exist.
pub fn list_script(dir: &str, logs: Option<(&str, &str)>, max: usize) -> String {
    let mut s = format!(
        "d={}\nif [ -d \"$d\" ] && [ ! -L \"$d\" ]; then echo '{SECTION}files'; (cd \"$d\" && find . \\( {skip} \\) -prune -o -type f ! -name $'*\\n*' -printf '%s %P\\n' 2>/dev/null | head -n {max}); else echo '{SECTION}noresults'; fi\n",
        quote(dir),
        skip = bookkeeping_paths()
    );
    for (path, name) in log_members(logs) {
        s.push_str(&format!("[ -f {p} ] && echo \"{SECTION}log {name} $(stat -c %s {p})\"\n", p = quote(&path)));
    }
    s
}

/// The files [`list_script`] found: results first (sorted), then the logs.
pub fn parse_list(stdout: &str) -> Option<Vec<ResultFile>> {
    let secs = sections(stdout);
    let mut files: Vec<ResultFile> = secs
        .iter()
        .filter(|(n, _, _)| n == "files")
        .flat_map(|(_, _, body)| body.lines())
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, path)| names::is_inside(path))
        .filter_map(|(size, path)| Some(ResultFile { path: path.to_string(), size: size.parse().ok()? }))
        .collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    for (_, arg, _) in secs.iter().filter(|(n, _, _)| n == "log") {
        if let Some((name, size)) = arg.rsplit_once(' ') {
            files.push(ResultFile { path: name.to_string(), size: size.parse().unwrap_or(0) });
        }
    }
    let no_results = secs.iter().any(|(n, _, _)| n == "noresults");
    (!no_results || !files.is_empty()).then_some(files)
}

/// A gzip'd tar of `names` under `dir` (every file when empty), the newest checkpoint of the
/// patterns `latest` gives when it is there ([`crate::checkpoint`]), and the logs, refused above
/// `cap` bytes. Names must have passed [`check_name`]. Every name reaches `du` and `tar` as a
/// `./`-prefixed argument after `--` ([`crate::script::names`]): the newest checkpoint's name is the
/// job's to choose. `du` refuses a selection over the cap early; the cap itself holds on the tar
/// stream (before compression), cut at `cap + 1` bytes, which [`archive_over_cap`] detects: a file
/// that grows or is swapped after `du` looked cannot carry more.
pub fn archive_script(
    dir: &str,
    names: &[String],
    latest: Option<&[String]>,
    logs: Option<(&str, &str)>,
    cap: u64,
) -> String {
    let mut s = format!(
        "d={}\n[ -d \"$d\" ] && [ ! -L \"$d\" ] || {{ echo '{SECTION}noresults'; exit 0; }}\ncd \"$d\" || exit 3\nroot=\"$(pwd -P)\"\n{}miss=0\n",
        quote(dir),
        names::CHECK_FUNCTION
    );
    for n in names {
        s.push_str(&format!(
            "r=\"$(realpath -e -- {w} 2>/dev/null)\"\ncase \"$r\" in \"$root\"/*) tao_name_push {q} ;; *) echo \"{SECTION}missing \"{q}; miss=1 ;; esac\n",
            w = quote(&format!("./{n}")),
            q = quote(n)
        ));
    }
    if let Some(patterns) = latest {
        s.push_str(&format!(
            "c=\"$({})\"\n\
             [ -n \"$c\" ] && tao_name_push \"$c\" || {{ echo \"{SECTION}missing latest_model\"; miss=1; }}\n",
            crate::checkpoint::newest_pipeline(".", "%P", patterns)
        ));
    }
    if names.is_empty() && latest.is_none() {
        s.push_str("tao_names=(.)\n");
    }
    s.push_str("[ \"$miss\" = 0 ] || exit 0\nlg=()\ndl=()\n");
    for (path, name) in log_members(logs) {
        let (parent, file) = path.rsplit_once('/').unwrap_or((".", path.as_str()));
        s.push_str(&format!(
            "if [ -f {p} ]; then lg+=(-C {dir} --transform {tr} {f}); dl+=({p}); fi\n",
            p = quote(&path),
            dir = quote(parent),
            tr = quote(&format!("s,^{}$,{name},", file.replace('.', "\\."))),
            f = quote(file)
        ));
    }
    // The logs (tao-slurm's own paths) come before `-C "$root" --`; the job's names after it.
    let excludes: Vec<String> = ["--exclude=*.lock".to_string()]
        .into_iter()
        .chain(crate::layout::BOOKKEEPING.map(|b| format!("--exclude=./{b}")))
        .collect();
    let du = names::command("du -cbs", &[names::ARRAY.to_string(), "\"${dl[@]}\"".to_string()]);
    let tar = names::command(
        &format!("tar -cf - {} \"${{lg[@]}}\" -C \"$root\"", join(&excludes)),
        &[names::ARRAY.to_string()],
    );
    s.push_str(&format!(
        "size=\"$({du} 2>/dev/null | tail -n 1 | cut -f1)\"\n\
         if [ \"${{size:-0}}\" -gt {cap} ]; then echo \"{SECTION}too_large $size\"; exit 0; fi\n\
         echo '{SECTION}archive'\n\
         {tar} | head -c {over} | gzip -c | base64 -w 0 || exit 3\necho\n",
        over = cap.saturating_add(1)
    ));
    s
}

/// The most bytes of output an [`archive_script`] of `cap` can write: the base64 of a gzip of at
/// most `cap + 1` bytes (gzip adds at most a few bytes per 32 KiB block), plus its sections.
pub fn archive_output_cap(cap: u64) -> u64 {
    let gz = cap.saturating_add(cap / 1000).saturating_add(1 << 16);
    gz.saturating_div(3).saturating_add(1).saturating_mul(4).saturating_add(1 << 16)
}

/// Whether a tar stream of `tar_len` bytes (what the gzip'd archive holds) is over `cap`: the
/// script cut it at `cap + 1`, so a longer one is not whole.
pub fn archive_over_cap(tar_len: u64, cap: u64) -> bool {
    tar_len > cap
}

/// What [`archive_script`] answered.
pub fn parse_archive(stdout: &str) -> Archive {
    let secs = sections(stdout);
    if secs.iter().any(|(n, _, _)| n == "noresults") {
        return Archive::NoResults;
    }
    let missing: Vec<String> = secs.iter().filter(|(n, _, _)| n == "missing").map(|(_, a, _)| a.clone()).collect();
    if !missing.is_empty() {
        return Archive::Missing(missing);
    }
    if let Some((_, size, _)) = secs.iter().find(|(n, _, _)| n == "too_large") {
        return Archive::TooLarge(size.parse().unwrap_or(0));
    }
    let body = secs.iter().find(|(n, _, _)| n == "archive").map(|(_, _, b)| b.trim().to_string());
    Archive::Base64(body.unwrap_or_default())
}

/// The most bytes [`read_file_script`] brings back of one result file unless asked for fewer: a
/// metrics or status file is a few KiB; a checkpoint is not read this way.
pub const READ_FILE_MAX: u64 = 8 << 20;

/// What [`read_file_script`] answered about one result file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileRead {
    /// The file's bytes, base64-encoded, and its size when it was looked at.
    Base64 { size: u64, text: String },
    /// Nothing there, or the job has no results directory (yet).
    Missing,
    /// A symlink (the file or a directory on its way), a FIFO, a directory: never opened.
    NotRegular,
    /// The file holds this many bytes, more than asked for.
    TooLarge(u64),
}

/// Read one file of a job's results directory, `name` relative to it and checked first
/// ([`check_name`]): every directory on its way must be one and no symlink (a job can make one point
/// anywhere the login user reads), the file regular, at most `max_bytes`, read by the one reader of
/// job-written files ([`crate::ops::job_file`]: no symlink, no FIFO, a deadline). Base64, so any
/// byte comes back as it is. Pure.
pub fn read_file_script(field: &str, dir: &str, name: &str, max_bytes: u64) -> Result<String, SpecError> {
    check_name(field, name)?;
    let max = max_bytes.min(crate::ops::job_file::READ_CAP);
    Ok(crate::ops::job_file::with_functions(&format!(
        "d={d}; r={r}
         [ -d \"$d\" ] && [ ! -L \"$d\" ] || {{ echo '{SECTION}missing'; exit 0; }}
         p=\"$d\"; IFS=/ read -r -a parts <<<\"$r\"; last=$(( ${{#parts[@]}} - 1 ))
         for c in \"${{parts[@]:0:$last}}\"; do p=\"$p/$c\"
           if [ -L \"$p\" ]; then echo '{SECTION}notregular'; exit 0; fi
           [ -d \"$p\" ] || {{ echo '{SECTION}missing'; exit 0; }}
         done
         f=\"$d/$r\"; read -r kind size <<<\"$(tao_jf_stat \"$f\")\"
         case \"$kind\" in regular) ;; missing) echo '{SECTION}missing'; exit 0 ;; *) echo '{SECTION}notregular'; exit 0 ;; esac
         [ \"$size\" -gt {max} ] && {{ echo \"{SECTION}too_large $size\"; exit 0; }}
         echo \"{SECTION}file $size\"; tao_jf_read \"$f\" 0 {read} | base64 -w 0; echo
",
        d = quote(dir),
        r = quote(name),
        read = max + 1,
    )))
}

/// What [`read_file_script`] printed. Pure.
pub fn parse_read_file(stdout: &str) -> FileRead {
    let secs = sections(stdout);
    for (name, arg, body) in &secs {
        match name.as_str() {
            "file" => return FileRead::Base64 { size: arg.trim().parse().unwrap_or(0), text: body.trim().to_string() },
            "too_large" => return FileRead::TooLarge(arg.trim().parse().unwrap_or(0)),
            "notregular" => return FileRead::NotRegular,
            _ => {}
        }
    }
    FileRead::Missing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(dir: &std::path::Path, name: &str, max: u64) -> FileRead {
        let script = read_file_script("relative_path", &dir.display().to_string(), name, max).unwrap();
        let out = std::process::Command::new("bash").arg("-c").arg(&script).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        parse_read_file(&String::from_utf8_lossy(&out.stdout))
    }

    /// A result file is read inside the job's results directory only: no `..` or absolute name, no
    /// symlink on the way or at the end (a job's own files are hostile), no FIFO, not over the cap.
    #[test]
    fn a_result_file_is_read_inside_the_results_directory_only() {
        let top = tempfile::tempdir().unwrap();
        let d = top.path().join("results/job");
        std::fs::create_dir_all(d.join("results_dir/best")).unwrap();
        std::fs::write(d.join("results_dir/best/best_score.json"), "{\"best_score\": 0.25}\n").unwrap();
        std::fs::write(top.path().join("secret"), "private").unwrap();
        std::os::unix::fs::symlink(top.path().join("secret"), d.join("linked.json")).unwrap();
        std::os::unix::fs::symlink(top.path(), d.join("up")).unwrap();
        std::fs::write(d.join("big.json"), "x".repeat(5000)).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(d.join("fifo.json")).status().unwrap().success());
        match read(&d, "results_dir/best/best_score.json", READ_FILE_MAX) {
            FileRead::Base64 { size, text } => {
                assert_eq!(size, 21);
                let out = std::process::Command::new("bash")
                    .arg("-c")
                    .arg(format!("printf %s {} | base64 -d", quote(&text)))
                    .output()
                    .unwrap();
                assert_eq!(String::from_utf8_lossy(&out.stdout), "{\"best_score\": 0.25}\n");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(read(&d, "linked.json", READ_FILE_MAX), FileRead::NotRegular);
        assert_eq!(read(&d, "up/secret", READ_FILE_MAX), FileRead::NotRegular, "a linked directory on the way");
        assert_eq!(read(&d, "fifo.json", READ_FILE_MAX), FileRead::NotRegular);
        assert_eq!(read(&d, "results_dir", READ_FILE_MAX), FileRead::NotRegular, "a directory");
        assert_eq!(read(&d, "big.json", 4096), FileRead::TooLarge(5000));
        assert_eq!(read(&d, "results_dir/none.json", READ_FILE_MAX), FileRead::Missing);
        assert_eq!(read(&d, "nodir/x.json", READ_FILE_MAX), FileRead::Missing);
        assert_eq!(read(&top.path().join("nojob"), "x.json", READ_FILE_MAX), FileRead::Missing);
        for bad in ["../secret", "/etc/passwd", "a/../../secret", "-x", ""] {
            let e = read_file_script("relative_path", "/r", bad, READ_FILE_MAX).unwrap_err();
            assert_eq!(e.field, "relative_path", "{bad:?}");
        }
    }

    #[test]
    fn names_stay_inside() {
        for ok in ["status.json", "train/model_epoch_002.pth", "a b.txt"] {
            assert!(check_name("file_lists", ok).is_ok(), "{ok}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "-rf", "a\nb"] {
            assert_eq!(check_name("file_lists", bad).unwrap_err().field, "file_lists", "{bad:?}");
        }
    }

    #[test]
    fn lists_parse_sorted_with_logs_last() {
        let out = format!("{SECTION}files\n12 z.pth\n3 status.json\n1 ../x\n{SECTION}log logs/main.out 40\n");
        let files = parse_list(&out).unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(names, ["status.json", "z.pth", "logs/main.out"]);
        assert_eq!(files[2].size, 40);
        assert_eq!(parse_list(&format!("{SECTION}noresults\n")), None);
    }

    #[test]
    fn archives_parse() {
        assert_eq!(parse_archive(&format!("{SECTION}archive\nH4sI\n")), Archive::Base64("H4sI".into()));
        assert_eq!(parse_archive(&format!("{SECTION}too_large 99\n")), Archive::TooLarge(99));
        assert_eq!(parse_archive(&format!("{SECTION}missing a.pth\n")), Archive::Missing(vec!["a.pth".into()]));
        assert_eq!(parse_archive(&format!("{SECTION}noresults\n")), Archive::NoResults);
    }

    #[test]
    fn archive_names_are_quoted() {
        let s = archive_script("/r/x y", &["a b.pth".into()], None, None, 10);
        assert!(s.contains("d='/r/x y'") && s.contains("tao_name_push 'a b.pth'"), "{s}");
    }

    /// A job controls its results directory: a link in it (or the directory itself a link) never
    /// makes a download reach outside it. Run under bash with the real tar.
    #[test]
    fn links_never_lead_a_download_outside_the_results() {
        let tmp = std::env::temp_dir().join(format!("tao-slurm-results-{}", std::process::id()));
        let (results, outside) = (tmp.join("results"), tmp.join("outside"));
        std::fs::create_dir_all(&results).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "other's").unwrap();
        std::fs::write(results.join("model.pth"), "mine").unwrap();
        std::os::unix::fs::symlink(&outside, results.join("link")).unwrap();
        std::os::unix::fs::symlink(&outside, tmp.join("linked-results")).unwrap();
        let run = |dir: &std::path::Path, names: &[&str]| {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            let script = archive_script(dir.to_str().unwrap(), &names, None, None, 1 << 20);
            let out = std::process::Command::new("bash").arg("-c").arg(script).output().unwrap();
            parse_archive(&String::from_utf8_lossy(&out.stdout))
        };
        assert_eq!(run(&results, &["link/secret"]), Archive::Missing(vec!["link/secret".into()]));
        assert_eq!(run(&tmp.join("linked-results"), &["secret"]), Archive::NoResults);
        assert!(matches!(run(&results, &["model.pth"]), Archive::Base64(b) if !b.is_empty()));
        let list = std::process::Command::new("bash")
            .arg("-c")
            .arg(list_script(tmp.join("linked-results").to_str().unwrap(), None, 10))
            .output()
            .unwrap();
        assert_eq!(
            parse_list(&String::from_utf8_lossy(&list.stdout)),
            None,
            "a linked results directory lists nothing"
        );
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// The batch script's own files (attempts, the requeue counter) are not the job's results: a
    /// listing and a whole download leave them out, a file of the job's named like them stays.
    #[test]
    fn listings_and_whole_downloads_leave_out_tao_slurms_own_files() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::create_dir_all(d.join(".tao-slurm")).unwrap();
        std::fs::create_dir_all(d.join("train/.tao-slurm")).unwrap();
        for f in [".tao-slurm/attempts", ".timeout_requeues", "status.json", "train/.tao-slurm/mine"] {
            std::fs::write(d.join(f), "x").unwrap();
        }
        let list =
            std::process::Command::new("bash").arg("-c").arg(list_script(d.to_str().unwrap(), None, 10)).output();
        let names: Vec<String> =
            parse_list(&String::from_utf8_lossy(&list.unwrap().stdout)).unwrap().into_iter().map(|f| f.path).collect();
        assert_eq!(names, ["status.json", "train/.tao-slurm/mine"]);
        let script = archive_script(d.to_str().unwrap(), &[], None, None, 1 << 20);
        let out = std::process::Command::new("bash").arg("-c").arg(&script).output().unwrap();
        let Archive::Base64(b64) = parse_archive(&String::from_utf8_lossy(&out.stdout)) else { panic!("no archive") };
        std::fs::write(d.join("archive.b64"), b64).unwrap();
        let tar = format!("base64 -d < {}/archive.b64 | tar -tzf -", d.display());
        let out = std::process::Command::new("bash").arg("-c").arg(tar).output().unwrap();
        let members = String::from_utf8_lossy(&out.stdout);
        assert!(members.contains("./status.json") && members.contains("./train/.tao-slurm/mine"), "{members}");
        assert!(!members.contains("attempts") && !members.contains("timeout_requeues"), "{members}");
    }

    /// Runs an archive script under bash (with `path` first in PATH when given): the archive's
    /// members and contents, or why there is none.
    fn archive_in(
        dir: &std::path::Path,
        script: &str,
        path: Option<&std::path::Path>,
    ) -> Result<Vec<(String, Vec<u8>)>, Archive> {
        let mut cmd = std::process::Command::new("bash");
        cmd.arg("-c").arg(script);
        if let Some(p) = path {
            cmd.env("PATH", format!("{}:{}", p.display(), std::env::var("PATH").unwrap()));
        }
        let out = cmd.output().unwrap();
        let b64 = match parse_archive(&String::from_utf8_lossy(&out.stdout)) {
            Archive::Base64(b) => b,
            other => return Err(other),
        };
        std::fs::write(dir.join("a.b64"), b64).unwrap();
        let tar = dir.join("a.tar");
        let st = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("base64 -d < {d}/a.b64 | gzip -dc > {t}", d = dir.display(), t = tar.display()))
            .status()
            .unwrap();
        assert!(st.success());
        let mut members = Vec::new();
        let list = std::process::Command::new("tar").arg("-tf").arg(&tar).output().unwrap();
        for m in String::from_utf8_lossy(&list.stdout).lines() {
            let body = std::process::Command::new("tar").arg("-xOf").arg(&tar).arg("--").arg(m).output().unwrap();
            members.push((m.to_string(), body.stdout));
        }
        Ok(members)
    }

    /// A job names its newest checkpoint like a tar option (and gives it a future mtime): the
    /// newest checkpoint download archives that file as a file, runs nothing, reads nothing
    /// outside; a whole download too. Run under bash with the real tar and du.
    #[test]
    fn checkpoint_names_that_look_like_options_stay_names() {
        let tmp = tempfile::tempdir().unwrap();
        let (results, work) = (tmp.path().join("results"), tmp.path().join("work"));
        std::fs::create_dir_all(&results).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(results.join("big.bin"), vec![b'x'; 1 << 20]).unwrap();
        std::fs::write(results.join("list.pth"), "/etc/passwd\n").unwrap();
        let future = std::time::SystemTime::now() + std::time::Duration::from_secs(86_400);
        let patterns = crate::checkpoint::default_patterns();
        for hostile in ["--checkpoint-action=exec=touch marker;.pth", "--files-from=list.pth"] {
            let f = results.join(hostile);
            std::fs::write(&f, "").unwrap();
            std::fs::File::options().write(true).open(&f).unwrap().set_modified(future).unwrap();
            let dir = results.to_str().unwrap();
            for names in [vec![], vec!["big.bin".to_string()]] {
                let script = archive_script(dir, &names, Some(&patterns), None, 1 << 30);
                let members = archive_in(&work, &script, None).unwrap();
                let got: Vec<&str> = members.iter().map(|(m, _)| m.as_str()).collect();
                let mut want: Vec<String> = names.iter().map(|n| format!("./{n}")).collect();
                want.push(format!("./{hostile}"));
                assert_eq!(got, want, "{hostile}");
                assert!(members.iter().all(|(_, body)| !String::from_utf8_lossy(body).contains("root:")));
                assert!(!results.join("marker").exists(), "tar ran the job's command");
            }
            let whole = archive_in(&work, &archive_script(dir, &[], None, None, 1 << 30), None).unwrap();
            assert!(whole.iter().any(|(m, _)| m == &format!("./{hostile}")), "{whole:?}");
            assert!(!results.join("marker").exists());
            std::fs::File::options()
                .write(true)
                .open(&f)
                .unwrap()
                .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(86_400))
                .unwrap();
        }
    }

    /// The cap holds on the stream itself: with a `du` that fails (or lies, as a file swapped after
    /// it looked would make it), an archive over the cap comes back cut, and is refused.
    #[test]
    fn the_cap_holds_when_du_fails() {
        let tmp = tempfile::tempdir().unwrap();
        let (results, bin) = (tmp.path().join("results"), tmp.path().join("bin"));
        std::fs::create_dir_all(&results).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(results.join("model.pth"), vec![7u8; 300_000]).unwrap();
        let du = bin.join("du");
        std::fs::write(&du, "#!/bin/sh\nexit 1\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&du, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = results.to_str().unwrap();
        let cap = 100_000;
        let script = archive_script(dir, &["model.pth".to_string()], None, None, cap);
        let members = archive_in(tmp.path(), &script, Some(&bin));
        // The gzip'd stream holds cap + 1 bytes of tar: more than the cap, whatever du said.
        let tar_len = std::fs::metadata(tmp.path().join("a.tar")).unwrap().len();
        assert_eq!(tar_len, cap + 1);
        assert!(archive_over_cap(tar_len, cap));
        let _ = members;
        // Under the cap, the whole archive.
        let script = archive_script(dir, &["model.pth".to_string()], None, None, 1 << 20);
        let members = archive_in(tmp.path(), &script, Some(&bin)).unwrap();
        assert_eq!(members[0].1.len(), 300_000);
        assert!(!archive_over_cap(std::fs::metadata(tmp.path().join("a.tar")).unwrap().len(), 1 << 20));
        // The output stays under what the reader accepts for this cap.
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(archive_script(dir, &[], None, None, cap))
            .output()
            .unwrap();
        assert!((out.stdout.len() as u64) < archive_output_cap(cap), "{}", out.stdout.len());
    }
}
