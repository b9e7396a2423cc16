//! The squashfs image cache on shared storage: cache names that cannot collide, and the remote script
//! that converts an image once (under a lock with an owner and an expiry) while other submitters wait.
//! Pure: `engine::image` runs the script.

use crate::protocol::SECTION;
use crate::script::shell::quote;
use crate::spec::ImageRef;
use sha2::{Digest, Sha256};

/// How the cache behaves; from the settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqshPolicy {
    pub cache_dir: String,
    pub partition: String,
    pub timeout_minutes: u64,
    pub memory: String,
    /// Convert `:latest` again even when cached.
    pub force_reconvert_latest: bool,
    /// Convert `:latest` again once the cache file is older than this (0: never by age).
    pub latest_max_age_hours: u64,
    /// Where `enroot import` unpacks (SLURM_ENROOT_TEMP_PATH): a directory per conversion inside it,
    /// removed afterwards. None: enroot's own default.
    pub enroot_temp_path: Option<String>,
}

/// A readable form of the reference plus a short hash of all of it: `a/b_c:d` and `a_b/c:d` differ.
pub fn cache_file_name(image: &ImageRef) -> String {
    let readable: String = image
        .pyxis
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' { c } else { '+' })
        .take(100)
        .collect();
    let hash = Sha256::digest(image.pyxis.as_bytes());
    let short: String = hash.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("{readable}-{short}.sqsh")
}

/// A reference without a tag or digest, or tagged `latest`, can change under the same name.
pub fn is_latest(image: &ImageRef) -> bool {
    let name = image.pyxis.rsplit_once('#').map(|(_, n)| n).unwrap_or(&image.pyxis);
    if name.contains('@') {
        return false;
    }
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.split_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

pub fn cache_path(policy: &SqshPolicy, image: &ImageRef) -> String {
    format!("{}/{}", policy.cache_dir.trim_end_matches('/'), cache_file_name(image))
}

/// Whether a cache entry may be used: a regular file (not a symlink, FIFO or device), owned by us and
/// writable by nobody else, with the squashfs magic. Only we (or root) can make a file owned by us,
/// so an entry passes only if we made it; whatever another user left under the name, or replaced it
/// with, is never handed to a job. The magic is read only after the type check (a FIFO would hang),
/// by the shell (no process; it skips NUL bytes, so NULs before the magic would pass: only we could
/// have written such a file).
pub const TRUSTED_FUNCTION: &str = r#"sqsh_trusted() { [ -f "$1" ] && [ ! -L "$1" ] && [ -O "$1" ] && [ -z "$(find "$1" -maxdepth 0 -perm /022 2>/dev/null)" ] && { local m=; IFS= read -r -N 4 m < "$1"; [ "$m" = hsqs ]; } 2>/dev/null; }
"#;

/// A cheap probe, run in the submit's first round trip: prints `sqsh_cached PATH` when the image is
/// already in the cache and needs no conversion (then the conversion round trip is skipped). Pure.
pub fn cached_probe_script(policy: &SqshPolicy, image: &ImageRef) -> String {
    let latest = is_latest(image);
    if latest && policy.force_reconvert_latest {
        return String::new();
    }
    let max_age = if latest { policy.latest_max_age_hours * 3600 } else { 0 };
    format!(
        "{TRUSTED_FUNCTION}c={c}; if sqsh_trusted \"$c\" && {{ [ {max_age} -eq 0 ] || [ $(( $(date +%s) - $(stat -c %Y \"$c\") )) -lt {max_age} ]; }}; then echo \"{SECTION}sqsh_cached $c\"; fi\n",
        c = quote(&cache_path(policy, image)),
    )
}

/// The conversion script. Its `sqsh` sections: `cached PATH`, `waited PATH`, `converted PATH`,
/// `stale-lock OWNER`, `failed RC LOG` (followed by the log's tail). Pure.
pub fn conversion_script(policy: &SqshPolicy, image: &ImageRef, force: bool) -> String {
    let cache = cache_path(policy, image);
    let latest = is_latest(image);
    let force = force || (latest && policy.force_reconvert_latest);
    let max_age_secs = if latest { policy.latest_max_age_hours * 3600 } else { 0 };
    let timeout_secs = policy.timeout_minutes * 60;
    // A lock older than the conversion could ever take belongs to a converter that died.
    let expiry_secs = timeout_secs + 300;
    let job_name = format!("tao-sqsh-{}", &cache_file_name(image).trim_end_matches(".sqsh"));
    format!(
        r#"set -u
umask 077
{trusted}{trust}dir={dir}; cache={cache}; lock="$cache.lock"
# The directories above the cache as the base's (by default it is in the base): nothing is made
# below one another user could replace. The cache itself may be anyone's: its entries are checked.
tao_trust_base {parent}
mkdir -p "$dir" || {{ echo "tao-slurm: cannot create the image cache $dir" >&2; exit {dirs}; }}
[ -d "$dir" ] && [ ! -L "$dir" ] || {{ echo "tao-slurm: the image cache $dir is not a directory" >&2; exit {dirs}; }}
fresh() {{ sqsh_trusted "$cache" && {{ [ {max_age} -eq 0 ] || [ $(( $(date +%s) - $(stat -c %Y "$cache") )) -lt {max_age} ]; }}; }}
if [ {force} -eq 0 ] && fresh; then echo "{S}sqsh cached $cache"; exit 0; fi
deadline=$(( $(date +%s) + {expiry} ))
while ! mkdir "$lock" 2>/dev/null; do
  age=$(( $(date +%s) - $(stat -c %Y "$lock" 2>/dev/null || date +%s) ))
  if [ "$age" -gt {expiry} ]; then echo "{S}sqsh stale-lock $(head -c 200 "$lock/owner" 2>/dev/null | tr -cd '[:print:]')"; rm -rf "$lock"; continue; fi
  [ "$(date +%s)" -lt "$deadline" ] || {{ echo "tao-slurm: timed out waiting for another conversion of {image}" >&2; exit {busy}; }}
  sleep 1
done
echo "$(hostname) $$ $(date +%s)" > "$lock/owner"
trap 'rm -rf "$lock"' EXIT
if [ {force} -eq 0 ] && fresh; then echo "{S}sqsh waited $cache"; exit 0; fi
if [ -e "$cache" ] || [ -L "$cache" ]; then echo "tao-slurm: not using $cache: it is not a squashfs file of yours (another user's, a symlink, or writable by others); converting again" >&2; fi
# Partials of converters that died are ours to remove (rm never follows a link it removes).
rm -f -- "$cache".partial.* 2>/dev/null
# Fresh random names: nothing planted under a predictable name is ever written through.
log="$(mktemp -- "$cache.log.XXXXXX")" || exit {dirs}
partial="$(mktemp -u -- "$cache.partial.XXXXXX")"
{enroot_temp}srun -n1 -N1 -p {partition} --time={minutes} --mem={memory} -J {job} enroot import -o "$partial" {uri} > "$log" 2>&1
rc=$?
if [ "$rc" -ne 0 ] || ! sqsh_trusted "$partial"; then
  rm -f -- "$partial"
  echo "{S}sqsh failed $rc $log"
  tail -n 20 -- "$log" | {prefix}
  exit {failed}
fi
mv -fT -- "$partial" "$cache" || {{ rm -f -- "$partial"; echo "{S}sqsh failed 32 $log"; echo "|tao-slurm: cannot replace $cache (it belongs to another user): remove it, or set TAO_SLURM_SQSH_CACHE_DIR to a directory of your own"; exit {failed}; }}
mv -fT -- "$log" "$cache.log"
echo "{S}sqsh converted $cache"
"#,
        trusted = TRUSTED_FUNCTION,
        trust = crate::script::trust::trust_functions(),
        parent = quote(match policy.cache_dir.trim_end_matches('/').rsplit_once('/') {
            Some(("", _)) | None => "/",
            Some((parent, _)) => parent,
        }),
        enroot_temp = enroot_temp_lines(policy),
        dirs = crate::exit_codes::CANNOT_CREATE_DIRS,
        busy = crate::exit_codes::CONVERSION_BUSY,
        failed = crate::exit_codes::CONVERSION_FAILED,
        dir = quote(&policy.cache_dir),
        cache = quote(&cache),
        max_age = max_age_secs,
        force = u8::from(force),
        expiry = expiry_secs,
        image = image.original.replace(['"', '$', '`', '\\'], ""),
        partition = quote(&policy.partition),
        minutes = policy.timeout_minutes.max(1),
        memory = quote(&policy.memory),
        job = quote(&job_name),
        uri = quote(&format!("docker://{}", image.pyxis)),
        S = SECTION,
        prefix = crate::protocol::PREFIX_LINES,
    )
}

/// The lines that give `enroot import` its own temporary directory inside SLURM_ENROOT_TEMP_PATH
/// (removed when the script ends), or nothing.
fn enroot_temp_lines(policy: &SqshPolicy) -> String {
    match &policy.enroot_temp_path {
        Some(dir) if !dir.is_empty() => format!(
            "export ENROOT_TEMP_PATH={}/\"tao-sqsh-$$\"\nmkdir -p -- \"$ENROOT_TEMP_PATH\" || exit {}\ntrap 'rm -rf \"$lock\" \"$ENROOT_TEMP_PATH\"' EXIT\n",
            quote(dir.trim_end_matches('/')),
            crate::exit_codes::CANNOT_CREATE_DIRS
        ),
        _ => String::new(),
    }
}

/// What a run of [`conversion_script`] reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConversionOutcome {
    /// The image is ready at `path`: `cached`, `waited` (another submitter converted it) or `converted`.
    Ready { how: String, path: String },
    /// `enroot import` exited `rc`; its log file and the log's last lines.
    Failed { rc: String, log: String, tail: String },
    /// The script said neither (it stopped early: see its stderr).
    Unknown,
}

/// Read [`conversion_script`]'s output: the outcome, and the owners of expired conversion locks it took
/// over (for a warning).
pub fn read_conversion(stdout: &str) -> (ConversionOutcome, Vec<String>) {
    let mut ready = None;
    let mut failed = None;
    let mut stale_owners = Vec::new();
    for (name, arg, body) in crate::protocol::sections(stdout) {
        if name != "sqsh" {
            continue;
        }
        let mut words = arg.splitn(3, ' ');
        match words.next() {
            Some(how @ ("cached" | "waited" | "converted")) => {
                ready = Some(ConversionOutcome::Ready {
                    how: how.to_string(),
                    path: words.next().unwrap_or("").to_string(),
                });
            }
            Some("failed") => {
                failed = Some(ConversionOutcome::Failed {
                    rc: words.next().unwrap_or("?").to_string(),
                    log: words.next().unwrap_or("").to_string(),
                    tail: crate::protocol::unprefix_lines(&body).trim_end().to_string(),
                });
            }
            Some("stale-lock") => stale_owners.push(words.collect::<Vec<_>>().join(" ")),
            _ => {}
        }
    }
    (ready.or(failed).unwrap_or(ConversionOutcome::Unknown), stale_owners)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(s: &str) -> ImageRef {
        ImageRef::parse(s).unwrap()
    }

    #[test]
    fn names_are_readable_and_never_collide() {
        let a = cache_file_name(&img("nvcr.io/a/b_c:d"));
        let b = cache_file_name(&img("nvcr.io/a_b/c:d"));
        assert_ne!(a, b);
        assert!(a.starts_with("nvcr.io+a+b_c+d-") && a.ends_with(".sqsh"), "{a}");
        assert_eq!(cache_file_name(&img("ubuntu:22.04")), cache_file_name(&img("ubuntu:22.04")));
    }

    #[test]
    fn latest_detection() {
        for (s, want) in [
            ("ubuntu", true),
            ("ubuntu:latest", true),
            ("nvcr.io/n/t:latest", true),
            ("ubuntu:22.04", false),
            ("localhost:5000/x", true),
        ] {
            assert_eq!(is_latest(&img(s)), want, "{s}");
        }
        let digest = format!("ubuntu@sha256:{}", "a".repeat(64));
        assert!(!is_latest(&img(&digest)));
    }

    fn policy(dir: &std::path::Path) -> SqshPolicy {
        SqshPolicy {
            cache_dir: dir.display().to_string(),
            partition: "debug".into(),
            timeout_minutes: 1,
            memory: "1G".into(),
            force_reconvert_latest: false,
            latest_max_age_hours: 0,
            enroot_temp_path: None,
        }
    }

    #[test]
    fn enroot_unpacks_in_its_own_directory_under_slurm_enroot_temp_path_removed_afterwards() {
        let dir = tempfile::tempdir().unwrap();
        let seen = dir.path().join("seen");
        let bin = crate::stand_ins::StandIns::new();
        bin.add("srun", "while [[ $1 == -* ]]; do shift; [[ $1 != -* && $1 != enroot ]] && shift; done\nexec \"$@\"");
        bin.add(
            "enroot",
            &format!(
                "echo \"$ENROOT_TEMP_PATH\" > {}; test -d \"$ENROOT_TEMP_PATH\"; printf hsqs > \"$3\"",
                seen.display()
            ),
        );
        let tmp = dir.path().join("enroot-tmp");
        let p = SqshPolicy { enroot_temp_path: Some(tmp.display().to_string()), ..policy(&dir.path().join("cache")) };
        let out = bin.stdout(&conversion_script(&p, &img("ubuntu:22.04"), false));
        assert!(out.contains("sqsh converted"), "{out}");
        let used = std::fs::read_to_string(&seen).unwrap();
        assert!(used.trim().starts_with(&format!("{}/tao-sqsh-", tmp.display())), "{used}");
        assert!(!std::path::Path::new(used.trim()).exists(), "removed when the conversion ended");
        assert!(!conversion_script(&policy(dir.path()), &img("ubuntu:22.04"), false).contains("ENROOT_TEMP_PATH"));
    }

    #[test]
    fn converts_once_then_serves_the_cache_and_ignores_stale_partials() {
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("imports");
        let bin = crate::stand_ins::StandIns::new();
        // Stand-in srun: run the command (enroot import -o OUT URI), here a fake enroot.
        bin.add("srun", "while [[ $1 == -* ]]; do shift; [[ $1 != -* && $1 != enroot ]] && shift; done\nexec \"$@\"");
        bin.add("enroot", &format!("echo x >> {}\nprintf 'hsqs%s' \"$4\" > \"$3\"", count.display()));
        let p = policy(&dir.path().join("cache"));
        let image = img("nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt");
        std::fs::create_dir_all(&p.cache_dir).unwrap();
        let stale = format!("{}.partial.999", cache_path(&p, &image));
        std::fs::write(&stale, "half").unwrap();
        let out = bin.stdout(&conversion_script(&p, &image, false));
        assert!(out.contains("sqsh converted"), "{out}");
        assert!(!std::path::Path::new(&stale).exists(), "the stale partial was removed");
        let out = bin.stdout(&conversion_script(&p, &image, false));
        assert!(out.contains("sqsh cached"), "{out}");
        assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 1, "converted once");
        assert!(std::fs::read_to_string(cache_path(&p, &image)).unwrap().starts_with("hsqs"));
    }

    /// The default cache is in the base directory: below a directory others can write, nothing is
    /// made (and nothing converted), as the submit refuses such a base.
    #[test]
    fn no_cache_is_made_below_a_directory_others_could_replace() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let bin = crate::stand_ins::StandIns::new();
        bin.add("srun", &format!("touch {}/srun-ran", dir.path().display()));
        let p = policy(&open.join("me/tao/sqsh-cache"));
        let out = bin.run(&conversion_script(&p, &img("ubuntu:22.04"), false));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(crate::exit_codes::UNTRUSTED_STORAGE), "{err}");
        assert!(err.contains(&format!("{} is writable by group or others", open.display())), "{err}");
        assert!(!open.join("me").exists() && !dir.path().join("srun-ran").exists(), "nothing made, nothing run");
    }

    #[test]
    fn entries_that_are_not_ours_are_never_used() {
        let dir = tempfile::tempdir().unwrap();
        let p = policy(&dir.path().join("cache"));
        std::fs::create_dir_all(&p.cache_dir).unwrap();
        let image = img("nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt");
        let path = cache_path(&p, &image);
        let bin = crate::stand_ins::StandIns::new();
        let probe = |what: &str| {
            let out = bin.stdout(&cached_probe_script(&p, &image));
            (out.contains("sqsh_cached"), what.to_string())
        };
        // A symlink to a squashfs file elsewhere, a FIFO (reading it would hang), a file writable by others.
        let elsewhere = dir.path().join("elsewhere.sqsh");
        std::fs::write(&elsewhere, "hsqs-someone-else").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert_eq!(probe("symlink"), (false, "symlink".into()));
        std::fs::remove_file(&path).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(&path).status().unwrap().success());
        assert_eq!(probe("fifo"), (false, "fifo".into()));
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "hsqs").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(probe("writable"), (false, "writable".into()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(probe("ours"), (true, "ours".into()));
        // Ours, but not a squashfs file: another magic, or too short (a conversion cut short).
        for (what, bytes) in [("other magic", "hsqt-more"), ("short", "hsq")] {
            std::fs::write(&path, bytes).unwrap();
            assert_eq!(probe(what), (false, what.into()));
        }
    }

    #[test]
    fn a_conversion_reads_as_ready_failed_or_unknown() {
        let ready = "@@tao-slurm:sqsh stale-lock pid 7 on login2\n@@tao-slurm:sqsh converted /c/a.sqsh\n";
        let (outcome, stale) = read_conversion(ready);
        assert_eq!(outcome, ConversionOutcome::Ready { how: "converted".into(), path: "/c/a.sqsh".into() });
        assert_eq!(stale, ["pid 7 on login2"]);
        let failed = "@@tao-slurm:sqsh failed 1 /c/a.log\n|no space left\n";
        match read_conversion(failed).0 {
            ConversionOutcome::Failed { rc, log, tail } => {
                assert_eq!((rc.as_str(), log.as_str()), ("1", "/c/a.log"));
                assert!(tail.contains("no space left"), "{tail}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(read_conversion("junk\n").0, ConversionOutcome::Unknown);
    }
}
