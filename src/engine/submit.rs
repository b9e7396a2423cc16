//! Submission in one round trip: stage the job's files, `sbatch --hold`, create the attempt's log
//! directory (its name holds the Slurm job id, so it can only be made after sbatch and must exist
//! before the job starts), then release the hold.

use crate::engine::{sections, SECTION};
use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::remote::{Idempotency, Remote, RemoteError};
use crate::script::shell::quote;
use crate::script::StagedFile;
use crate::slurm::parse_sbatch_parsable;
use crate::spec::SecretValues;
use crate::status::PlatformStatus;
use crate::store::StatusUpdate;
use crate::store::Store;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Submitted {
    pub job_id: String,
    pub slurm_job_id: String,
    pub login_host: String,
    pub job_dir: String,
}

/// What one submission is for: the attempt's token (its Slurm job name) and the nodes to avoid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptTicket {
    pub number: u32,
    pub slurm_job_name: String,
    pub exclude: String,
}

impl AttemptTicket {
    pub fn first(plan: &Plan) -> AttemptTicket {
        AttemptTicket { number: 1, slurm_job_name: plan.layout.job_name.clone(), exclude: String::new() }
    }
}

/// The Slurm job name of attempt `number` (the first keeps the contract's `tao-job-<id>`).
pub fn attempt_name(plan: &Plan, number: u32) -> String {
    if number <= 1 {
        plan.layout.job_name.clone()
    } else {
        format!("{}.a{number}", plan.layout.job_name)
    }
}

/// A submission lock older than this, with no Slurm job behind it, was left by a submitter that died
/// before sbatch; it may be taken over.
pub const STALE_SUBMIT_LOCK_SECS: u64 = 120;

/// Test hook: `TAO_SLURM_FAILPOINT=<name>` stops the submission at that point (it sleeps) so that a
/// fault-injection test can kill the process there. Names: `after-record`, `remote-before-sbatch`,
/// `after-sbatch`.
pub const FAILPOINT_ENV: &str = "TAO_SLURM_FAILPOINT";

fn failpoint(name: &str) -> bool {
    std::env::var(FAILPOINT_ENV).is_ok_and(|v| v == name)
}

pub(crate) fn pause_at_failpoint(name: &str) {
    if failpoint(name) {
        eprintln!("tao-slurm: failpoint {name} reached");
        std::thread::sleep(std::time::Duration::from_secs(120));
    }
}

/// The remote script that stages `files` and submits one attempt of the plan's batch script. Pure.
///
/// It can be run any number of times for the same attempt, from any process and host: a lock
/// directory per attempt token on shared storage admits one sbatch ever; a later run finds the job
/// (by the id the first run wrote, or by name in squeue/sacct) and adopts it instead.
///
/// Secret values travel only here, on ssh's standard input, and land in one file of mode 600 in a
/// fresh directory of mode 700 that the batch script reads (retries need it) and tao-slurm deletes
/// once the job is terminal. They are never in argv (printf is a builtin), the batch script, the
/// staged JSON or a log. A submission without the values (a retry, or a resumed submission) checks
/// that the file is there and refuses to submit an attempt that would run without it.
pub fn submit_script(plan: &Plan, files: &[StagedFile], secrets: &SecretValues, ticket: &AttemptTicket) -> String {
    let layout = &plan.layout;
    let name = &ticket.slurm_job_name;
    let lock = format!("{}/sbatch/.submit-{name}", layout.job_dir);
    let mut s = String::from("set -u\numask 077\n");
    s.push_str(crate::script::trust::TRUST_FUNCTIONS);
    let mut dirs: Vec<String> =
        files.iter().filter_map(|f| f.path.rsplit_once('/').map(|(d, _)| d.to_string())).collect();
    dirs.extend([
        layout.job_dir.clone(),
        format!("{}/sbatch", layout.job_dir),
        layout.logs_root(),
        layout.results_root.clone(),
        layout.results_dir(),
    ]);
    let writes_secrets = !plan.secret_names.is_empty() && !secrets.0.is_empty();
    if writes_secrets {
        dirs.push(format!("{}/secrets", layout.job_dir));
    }
    dirs.sort();
    dirs.dedup();
    let dir_list = dirs.iter().map(|d| quote(d)).collect::<Vec<_>>().join(" ");
    s.push_str(&format!("tao_trust_base {}\n", quote(&layout.job_dir)));
    s.push_str(&format!(
        "mkdir -p -- {dir_list} || {{ echo 'tao-slurm: cannot create the job directories' >&2; exit 10; }}\ntao_own_dirs {dir_list}\n"
    ));
    s.push_str(&format!("lock={}\nlogdir_prefix={}\n", quote(&lock), quote(&format!("{}/{name}", layout.logs_root()))));
    // Adopt rather than submit twice. The id in the lock is only ever digits (a job can write there).
    s.push_str(&format!(
        "adopt() {{ case \"$1\" in ''|*[!0-9]*) return;; esac; tao_put \"$lock/slurm_job_id\" \"$1\"; mkdir -p \"$logdir_prefix-$1\"; scontrol release \"$1\" >/dev/null 2>&1; echo \"{SECTION}slurm_job_id $1\"; echo '{SECTION}adopted'; exit 0; }}\n\
         if ! mkdir \"$lock\" 2>/dev/null; then\n\
         \x20 [ -d \"$lock\" ] && [ ! -L \"$lock\" ] && [ -O \"$lock\" ] || {{ echo \"tao-slurm: refusing $lock: not a directory of yours\" >&2; exit 14; }}\n\
         \x20 if [ -f \"$lock/slurm_job_id\" ] && [ ! -L \"$lock/slurm_job_id\" ]; then adopt \"$(head -c 24 \"$lock/slurm_job_id\" | head -n 1)\"; fi\n\
         \x20 existing=\"$(squeue --me -h --name={n} -o %i 2>/dev/null | head -n 1)\"\n\
         \x20 [ -n \"$existing\" ] || existing=\"$(sacct -X -P -n -S now-30days -E now -s {states} --name={n} -o JobIDRaw 2>/dev/null | head -n 1)\"\n\
         \x20 if [ -n \"$existing\" ]; then adopt \"$existing\"; fi\n\
         \x20 age=$(( $(date +%s) - $(stat -c %Y \"$lock\") ))\n\
         \x20 if [ \"$age\" -lt {STALE_SUBMIT_LOCK_SECS} ]; then echo 'tao-slurm: another submission of this attempt is in flight' >&2; exit 23; fi\n\
         \x20 touch -h \"$lock\"\n\
         fi\n",
        n = quote(name),
        states = crate::engine::refresh::SACCT_ALL_STATES,
    ));
    if failpoint("remote-before-sbatch") {
        s.push_str("echo 'tao-slurm: failpoint remote-before-sbatch reached' >&2\nsleep 20\n");
    }
    let secrets_file = quote(&layout.secrets_file());
    if writes_secrets {
        let dir = quote(&layout.secrets_dir());
        s.push_str(&format!("rm -rf -- {dir} && mkdir -m 700 -- {dir} || {{ rm -rf \"$lock\"; exit 12; }}\n"));
        // A debug log of this script shows `***` for the values (see `crate::redact`).
        s.push_str("{\n");
        for name in &plan.secret_names {
            if let Some(value) = secrets.0.get(name) {
                s.push_str(&format!("printf 'export %s=%s\\n' {name} {}\n", quote(&quote(value.expose()))));
            }
        }
        s.push_str(&format!("}} > {secrets_file} || {{ rm -rf \"$lock\"; exit 12; }}\n"));
    } else if !plan.secret_names.is_empty() {
        s.push_str(&format!(
            "if [ ! -f {secrets_file} ] || [ -L {secrets_file} ] || [ ! -O {secrets_file} ]; then rm -rf \"$lock\"; echo \"tao-slurm: the secrets file {} is missing (or is not a regular file of yours), so this attempt would run without {}; tao-slurm keeps secret values only on the cluster: submit the job again with them\" >&2; exit 13; fi\n",
            layout.secrets_file().replace(['"', '$', '`', '\\'], ""),
            plan.secret_names.join(", ")
        ));
    }
    for f in files {
        s.push_str(&format!(
            "tao_put {} {} || {{ rm -rf \"$lock\"; echo 'tao-slurm: cannot write {}' >&2; exit 11; }}\n",
            quote(&f.path),
            quote(&f.contents),
            f.path.replace(['\'', '\\'], "")
        ));
    }
    let exclude =
        if ticket.exclude.is_empty() { String::new() } else { format!(" --exclude={}", quote(&ticket.exclude)) };
    s.push_str(&format!(
        "out=\"$(sbatch --parsable --hold --job-name={}{exclude} {})\" || {{ rm -rf \"$lock\"; echo 'tao-slurm: sbatch refused the job' >&2; exit 20; }}\n",
        quote(name),
        quote(&layout.script_file())
    ));
    s.push_str("id=\"$(printf '%s\\n' \"$out\" | tail -n 1)\"; id=\"${id%%;*}\"\n");
    s.push_str("tao_put \"$lock/slurm_job_id\" \"$id\"\n");
    s.push_str(&format!("echo \"{SECTION}slurm_job_id $id\"\n"));
    s.push_str("mkdir -p \"$logdir_prefix-$id\" || { scancel \"$id\"; echo 'tao-slurm: cannot create the log directory; job cancelled' >&2; exit 21; }\n");
    s.push_str(
        "scontrol release \"$id\" || { echo \"tao-slurm: job $id is held: scontrol release failed\" >&2; exit 22; }\n",
    );
    s
}

/// Submit one attempt of a plan whose job (and attempt) is already recorded in the store.
pub fn submit(
    remote: &dyn Remote,
    store: &Store,
    plan: &Plan,
    files: &[StagedFile],
    secrets: &SecretValues,
    ticket: &AttemptTicket,
) -> Result<Submitted> {
    let job_id = &plan.layout.job_id;
    pause_at_failpoint("after-record");
    let script = submit_script(plan, files, secrets, ticket);
    let out = match remote.run_script(&script, Idempotency::RunAtMostOnce) {
        Ok(out) => out,
        Err(e @ (RemoteError::Lost { .. } | RemoteError::TimedOut { .. })) => {
            // The outcome is unknown: the job stays Pending and is found again by its unique Slurm
            // job name (or submitted again later, which its lock makes safe).
            store.update_status(
                job_id,
                &StatusUpdate {
                    status: PlatformStatus::Pending,
                    message: format!("submission outcome unknown: {e}"),
                    slurm_state: None,
                    exit_code: None,
                    node_list: None,
                    progress: None,
                },
            )?;
            return Err(e.into());
        }
        // Nothing reached the cluster: the attempt stays as it was (a retry stays due, and is tried
        // again at the next refresh); the caller decides what a first submission's failure means.
        Err(e) => return Err(e.into()),
    };
    let slurm_job_id = sections(&out.stdout)
        .into_iter()
        .find(|(name, _, _)| name == "slurm_job_id")
        .and_then(|(_, arg, _)| parse_sbatch_parsable(&arg));
    if slurm_job_id.is_some() {
        pause_at_failpoint("after-sbatch");
    }
    if let Some(id) = &slurm_job_id {
        // Recorded even if a later step failed: a submitted job is never forgotten.
        store.set_submitted(job_id, id, &out.host)?;
    }
    if out.exit_code != 0 {
        let detail = out.stderr.trim();
        let message = match &slurm_job_id {
            Some(id) => {
                format!("job {job_id} (Slurm job {id}) was submitted but not started: {detail}")
            }
            None => format!("submission of job {job_id} failed on {}: {detail}", out.host),
        };
        store.add_event(job_id, "submit_failed", &message)?;
        if slurm_job_id.is_none() && out.exit_code != 23 {
            store.update_status(
                job_id,
                &StatusUpdate {
                    status: PlatformStatus::Error,
                    message: message.clone(),
                    slurm_state: None,
                    exit_code: None,
                    node_list: None,
                    progress: None,
                },
            )?;
        }
        return Err(Error::RemoteCommand(message));
    }
    let slurm_job_id =
        slurm_job_id.ok_or_else(|| Error::RemoteCommand(format!("sbatch printed no job id: {}", out.stdout.trim())))?;
    Ok(Submitted { job_id: job_id.clone(), slurm_job_id, login_host: out.host, job_dir: plan.layout.job_dir.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{JobSpec, Secret};
    use crate::test_fixtures::{settings, spec};
    use proptest::prelude::*;
    use std::process::Command;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// The staging script writes every file byte for byte and hands secrets to sbatch's environment,
        /// whatever they contain, and runs nothing else.
        #[test]
        fn staging_is_exact_and_inert(value in "[ -~]{0,16}", secret in "[^\u{0}]{0,16}", payload in proptest::sample::select(vec!["$(touch @C@)", "`touch @C@`", "'; touch @C@; '", "\ntouch @C@\n"])) {
            let dir = tempfile::tempdir().unwrap();
            let canary = dir.path().join("canary");
            let inject = |s: &str| format!("{s}{}", payload.replace("@C@", &canary.display().to_string()));
            let mut settings = settings();
            settings.base_results_dir = Some(dir.path().join("base").display().to_string());
            let spec = JobSpec { env: [("FOO".to_string(), inject(&value).replace('\n', " "))].into(), secret_env: vec!["TOKEN".into()], ..spec() };
            let plan = crate::plan::resolve(&spec, &settings).unwrap();
            let files = crate::script::staged_files(&plan, &serde_json::to_value(&spec).unwrap(), "alice", &["login".into()]);
            // A prefix no staged file can contain unless the secret leaked into it.
            let secret_value = inject(&format!("SECRET-{secret}"));
            let secrets = SecretValues([("TOKEN".to_string(), Secret::new(secret_value.clone()))].into());
            let script = submit_script(&plan, &files, &secrets, &AttemptTicket::first(&plan));
            let bin = dir.path().join("bin");
            std::fs::create_dir(&bin).unwrap();
            let seen = dir.path().join("seen-token");
            std::fs::write(bin.join("sbatch"), "#!/bin/bash\necho 4242\n").unwrap();
            std::fs::write(bin.join("scontrol"), "#!/bin/bash\nexit 0\n").unwrap();
            Command::new("chmod").arg("-R").arg("+x").arg(&bin).status().unwrap();
            let out = Command::new("bash").arg("-c").arg(&script).env("PATH", format!("{}:/usr/bin:/bin", bin.display())).output().unwrap();
            prop_assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            prop_assert!(String::from_utf8_lossy(&out.stdout).contains("slurm_job_id 4242"));
            prop_assert!(!canary.exists(), "injected code ran");
            for f in &files {
                prop_assert_eq!(std::fs::read_to_string(&f.path).unwrap(), f.contents.clone());
                prop_assert!(!f.contents.contains("SECRET-"), "the secret leaked into {}", f.path);
            }
            // The secrets file holds the value exactly, as a line that bash reads back.
            let read_back = Command::new("bash").arg("-c").arg(format!(". {}; printf '%s' \"$TOKEN\"", plan.layout.secrets_file())).output().unwrap();
            prop_assert_eq!(String::from_utf8(read_back.stdout).unwrap(), secret_value);
            use std::os::unix::fs::PermissionsExt;
            prop_assert_eq!(std::fs::metadata(plan.layout.secrets_file()).unwrap().permissions().mode() & 0o777, 0o600);
            prop_assert_eq!(std::fs::metadata(plan.layout.secrets_dir()).unwrap().permissions().mode() & 0o777, 0o700);
            let _ = &seen;
            prop_assert!(std::path::Path::new(&plan.layout.log_dir(&plan.layout.job_name, "4242")).is_dir(), "log dir made before release");
            // A second run of the same attempt adopts the job instead of submitting again.
            let again = Command::new("bash").arg("-c").arg(&script).env("PATH", format!("{}:/usr/bin:/bin", bin.display())).output().unwrap();
            let text = String::from_utf8_lossy(&again.stdout).to_string();
            prop_assert!(text.contains("@@tao-slurm:adopted") && text.contains("slurm_job_id 4242"), "{}", text);
        }
    }
}
