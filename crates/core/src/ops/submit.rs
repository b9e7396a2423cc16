//! Submission of one attempt: its ticket (the attempt's unique Slurm job name, by which it is found
//! again) and the one remote script that stages the job's files and submits it at most once. Pure.

use crate::plan::Plan;
use crate::protocol::SECTION;
use crate::script::shell::quote;
use crate::script::StagedFile;
use crate::spec::SecretValues;

/// What one submission is for: the attempt's token (its Slurm job name) and the nodes to avoid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptTicket {
    pub number: u32,
    pub slurm_job_name: String,
    pub exclude: String,
    /// `--dependency=` of the attempt (a job that runs after others: see [`crate::ops::depend`]).
    pub dependency: Option<String>,
    /// Leave the attempt held after submission (released by tao-slurm when its dependencies are met).
    pub hold: bool,
}

impl AttemptTicket {
    pub fn first(plan: &Plan) -> AttemptTicket {
        AttemptTicket {
            number: 1,
            slurm_job_name: plan.layout.job_name.clone(),
            exclude: String::new(),
            dependency: None,
            hold: false,
        }
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
    submit_script_with_hook(plan, files, secrets, ticket, "")
}

/// [`submit_script`] with `before_sbatch` (script text) run once the attempt's lock is held, just
/// before anything is written or submitted: the fault-injection tests' pause point.
pub fn submit_script_with_hook(
    plan: &Plan,
    files: &[StagedFile],
    secrets: &SecretValues,
    ticket: &AttemptTicket,
    before_sbatch: &str,
) -> String {
    let layout = &plan.layout;
    let name = &ticket.slurm_job_name;
    let lock = format!("{}/sbatch/.submit-{name}", layout.base_dir);
    let mut s = String::from("set -u\numask 077\n");
    s.push_str(crate::script::trust::TRUST_FUNCTIONS);
    let mut dirs: Vec<String> =
        files.iter().filter_map(|f| f.path.rsplit_once('/').map(|(d, _)| d.to_string())).collect();
    dirs.extend([
        layout.base_dir.clone(),
        format!("{}/sbatch", layout.base_dir),
        layout.logs_root(),
        layout.results_root.clone(),
        layout.results_dir(),
    ]);
    let writes_secrets = !plan.secret_names.is_empty() && !secrets.0.is_empty();
    if writes_secrets {
        dirs.push(format!("{}/secrets", layout.base_dir));
    }
    dirs.sort();
    dirs.dedup();
    let dir_list = dirs.iter().map(|d| quote(d)).collect::<Vec<_>>().join(" ");
    s.push_str(&format!("tao_trust_base {}\n", quote(&layout.base_dir)));
    s.push_str(&format!(
        "mkdir -p -- {dir_list} || {{ echo 'tao-slurm: cannot create the job directories' >&2; exit 10; }}\ntao_own_dirs {dir_list}\n"
    ));
    s.push_str(&format!("lock={}\nlogdir_prefix={}\n", quote(&lock), quote(&format!("{}/{name}", layout.logs_root()))));
    // Adopt rather than submit twice. The id in the lock is only ever digits (a job can write there).
    let release_adopted = if ticket.hold { "" } else { "scontrol release \"$1\" >/dev/null 2>&1; " };
    let n = quote(name);
    let lookup = format!(
        "  existing=\"$(squeue --me -h --name={n} -o %i 2>/dev/null | head -n 1)\"\n  \
         [ -n \"$existing\" ] || existing=\"$(sacct -X -P -n -S now-30days -E now -s {states} --name={n} -o JobIDRaw 2>/dev/null | head -n 1)\"",
        states = crate::ops::refresh::SACCT_ALL_STATES,
    );
    s.push_str(&lock_script(&format!("mkdir -p \"$logdir_prefix-$1\"; {release_adopted}"), &lookup, "attempt"));
    s.push_str(before_sbatch);
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
    let mut exclude =
        if ticket.exclude.is_empty() { String::new() } else { format!(" --exclude={}", quote(&ticket.exclude)) };
    if let Some(d) = &ticket.dependency {
        exclude.push_str(&format!(" --dependency={}", quote(d)));
    }
    s.push_str(&format!(
        "out=\"$(sbatch --parsable --hold --job-name={}{exclude} {})\" || {{ rm -rf \"$lock\"; echo 'tao-slurm: sbatch refused the job' >&2; exit 20; }}\n",
        quote(name),
        quote(&layout.script_file())
    ));
    s.push_str("id=\"$(printf '%s\\n' \"$out\" | tail -n 1)\"; id=\"${id%%;*}\"\n");
    s.push_str("tao_put \"$lock/slurm_job_id\" \"$id\"\n");
    s.push_str(&format!("echo \"{SECTION}slurm_job_id $id\"\n"));
    s.push_str("mkdir -p \"$logdir_prefix-$id\" || { scancel \"$id\"; echo 'tao-slurm: cannot create the log directory; job cancelled' >&2; exit 21; }\n");
    if !ticket.hold {
        s.push_str(
            "scontrol release \"$id\" || { echo \"tao-slurm: job $id is held: scontrol release failed\" >&2; exit 22; }\n",
        );
    }
    s
}

/// The lock-or-adopt step of a submission ([`templates/submit_lock.sh`]): `on_adopt` runs for an
/// adopted Slurm job id (`$1`), `lookup` sets `existing` to the id found by name, `what` names the
/// submission in the message of exit 23.
pub(crate) fn lock_script(on_adopt: &str, lookup: &str, what: &str) -> String {
    super::template::fill(
        include_str!("templates/submit_lock.sh"),
        &[
            ("ON_ADOPT", on_adopt),
            ("LOOKUP", lookup),
            ("WHAT", what),
            ("SECTION", SECTION),
            ("STALE_SECS", &STALE_SUBMIT_LOCK_SECS.to_string()),
        ],
    )
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_lock_template_is_filled_whole() {
        let script = lock_script("mkdir -p \"$d\"; ", "  existing=x", "attempt");
        assert_eq!(crate::ops::template::unfilled(&script), Vec::<String>::new(), "{script}");
        assert!(script.contains("another submission of this attempt is in flight") && script.contains("existing=x"));
    }

    use super::*;
    use crate::plan::tests::{resolve, settings, spec};
    use crate::spec::{JobSpec, Secret};
    use proptest::prelude::*;
    use std::process::Command;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// The staging script writes every file byte for byte and writes secrets only to the mode-600 secrets file,
        /// whatever they contain, and runs nothing else.
        #[test]
        fn staging_is_exact_and_inert(value in "[ -~]{0,16}", secret in "[^\u{0}]{0,16}", payload in proptest::sample::select(vec!["$(touch @C@)", "`touch @C@`", "'; touch @C@; '", "\ntouch @C@\n"])) {
            let dir = tempfile::tempdir().unwrap();
            let canary = dir.path().join("canary");
            let inject = |s: &str| format!("{s}{}", payload.replace("@C@", &canary.display().to_string()));
            let mut settings = settings();
            settings.base_results_dir = Some(dir.path().join("base").display().to_string());
            let spec = JobSpec { env: [("FOO".to_string(), inject(&value).replace('\n', " "))].into(), secret_env: vec!["TOKEN".into()], ..spec() };
            let plan = resolve(&spec, &settings).unwrap();
            let files = crate::script::staged_files(&plan, &serde_json::to_value(&spec).unwrap(), "alice", &["login".into()]);
            // A prefix no staged file can contain unless the secret leaked into it.
            let secret_value = inject(&format!("SECRET-{secret}"));
            let secrets = SecretValues([("TOKEN".to_string(), Secret::new(secret_value.clone()))].into());
            let script = submit_script(&plan, &files, &secrets, &AttemptTicket::first(&plan));
            let bin = dir.path().join("bin");
            std::fs::create_dir(&bin).unwrap();
            let seen = dir.path().join("seen-token");
            // sbatch records what it was given: its arguments and its environment.
            std::fs::write(bin.join("sbatch"), format!("#!/bin/bash\n{{ printf '%s\\n' \"$@\"; env; }} >> {}\necho 4242\n", seen.display())).unwrap();
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
            let given = std::fs::read_to_string(&seen).unwrap();
            prop_assert!(given.contains("--parsable"), "sbatch ran: {}", given);
            prop_assert!(!given.contains("SECRET-"), "the secret reached sbatch's arguments or environment");
            prop_assert!(std::path::Path::new(&plan.layout.log_dir(&plan.layout.job_name, "4242")).is_dir(), "log dir made before release");
            // A second run of the same attempt adopts the job instead of submitting again.
            let again = Command::new("bash").arg("-c").arg(&script).env("PATH", format!("{}:/usr/bin:/bin", bin.display())).output().unwrap();
            let text = String::from_utf8_lossy(&again.stdout).to_string();
            prop_assert!(text.contains("@@tao-slurm:adopted") && text.contains("slurm_job_id 4242"), "{}", text);
        }
    }
}
