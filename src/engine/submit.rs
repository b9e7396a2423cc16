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

/// The remote script that stages `files` and submits the plan's batch script. Pure.
///
/// Secret values travel only here: on ssh's standard input into `bash -s`, where `export` (a builtin)
/// puts them in sbatch's environment. They are never in argv, never in a file, and Slurm hands the
/// job's environment only to the job's own processes.
pub fn submit_script(plan: &Plan, files: &[StagedFile], secrets: &SecretValues) -> String {
    let layout = &plan.layout;
    let mut s = String::from("set -u\numask 077\n");
    let mut dirs: Vec<String> =
        files.iter().filter_map(|f| f.path.rsplit_once('/').map(|(d, _)| d.to_string())).collect();
    dirs.push(layout.logs_root());
    dirs.push(layout.results_dir());
    dirs.dedup();
    s.push_str(&format!(
        "mkdir -p {} || {{ echo 'tao-slurm: cannot create the job directories' >&2; exit 10; }}\n",
        dirs.iter().map(|d| quote(d)).collect::<Vec<_>>().join(" ")
    ));
    for f in files {
        s.push_str(&format!(
            "printf '%s' {} > {} || {{ echo 'tao-slurm: cannot write {}' >&2; exit 11; }}\n",
            quote(&f.contents),
            quote(&f.path),
            f.path.replace('\'', "")
        ));
    }
    for name in &plan.secret_names {
        if let Some(value) = secrets.0.get(name) {
            s.push_str(&format!("export {name}={}\n", quote(value.expose())));
        }
    }
    s.push_str(&format!(
        "out=\"$(sbatch --parsable --hold --export=ALL {})\" || {{ echo 'tao-slurm: sbatch refused the job' >&2; exit 20; }}\n",
        quote(&layout.script_file())
    ));
    s.push_str("id=\"$(printf '%s\\n' \"$out\" | tail -n 1)\"; id=\"${id%%;*}\"\n");
    s.push_str(&format!("echo \"{SECTION}slurm_job_id $id\"\n"));
    s.push_str(&format!(
        "mkdir -p {}-\"$id\" || {{ scancel \"$id\"; echo 'tao-slurm: cannot create the log directory; job cancelled' >&2; exit 21; }}\n",
        quote(&format!("{}/{}", layout.logs_root(), layout.job_name))
    ));
    s.push_str(
        "scontrol release \"$id\" || { echo \"tao-slurm: job $id is held: scontrol release failed\" >&2; exit 22; }\n",
    );
    s
}

/// Submit a plan whose job is already recorded in the store.
pub fn submit(
    remote: &dyn Remote,
    store: &Store,
    plan: &Plan,
    files: &[StagedFile],
    secrets: &SecretValues,
) -> Result<Submitted> {
    let job_id = &plan.layout.job_id;
    let script = submit_script(plan, files, secrets);
    let out = match remote.run_script(&script, Idempotency::RunAtMostOnce) {
        Ok(out) => out,
        Err(e) => {
            // Unreachable: nothing was sent, so the job is not on the cluster. Lost: the outcome is
            // unknown; the job stays Pending and is found again by its unique Slurm job name.
            let (status, message) = match &e {
                RemoteError::Lost { .. } => {
                    (PlatformStatus::Pending, format!("submission outcome unknown (connection lost): {e}"))
                }
                _ => (PlatformStatus::Error, format!("not submitted: {e}")),
            };
            store.update_status(
                job_id,
                &StatusUpdate { status, message, slurm_state: None, exit_code: None, node_list: None, progress: None },
            )?;
            return Err(e.into());
        }
    };
    let slurm_job_id = sections(&out.stdout)
        .into_iter()
        .find(|(name, _, _)| name == "slurm_job_id")
        .and_then(|(_, arg, _)| parse_sbatch_parsable(&arg));
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
        if slurm_job_id.is_none() {
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
    use crate::plan::tests::{settings, spec};
    use crate::spec::{JobSpec, Secret};
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
            let script = submit_script(&plan, &files, &secrets);
            let bin = dir.path().join("bin");
            std::fs::create_dir(&bin).unwrap();
            let seen = dir.path().join("seen-token");
            std::fs::write(bin.join("sbatch"), format!("#!/bin/bash\nprintf '%s' \"$TOKEN\" > {}\necho 4242\n", seen.display())).unwrap();
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
            prop_assert_eq!(std::fs::read_to_string(&seen).unwrap(), secret_value);
            prop_assert!(std::path::Path::new(&plan.layout.log_dir("4242")).is_dir(), "log dir made before release");
        }
    }
}
