//! A sweep's submission: its variants' plans (each an ordinary job with its own id, results and
//! retries) and the one remote script that stages them all and submits one Slurm job array. Pure: the
//! caller draws the ids.

use crate::config::Settings;
use crate::exit_codes::{CANNOT_CREATE_DIRS, CANNOT_STAGE};
use crate::layout::slurm_job_name;
use crate::plan::{resolve_with_id, Plan};
use crate::script::shell::quote;
use crate::script::{render_array_script, StagedFile};
use crate::spec::{JobSpec, SecretValues, SpecError, Variant};

/// A sweep ready to submit: its id, its array's Slurm job name, and each variant with its plan.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepPlan {
    pub sweep_id: String,
    /// The Slurm job name of the array (`tao-sweep-<id>`): the first attempt of every variant.
    pub array_name: String,
    pub max_concurrent: Option<u32>,
    pub variants: Vec<(Variant, Plan)>,
}

/// The array's Slurm job name.
pub fn array_name(sweep_id: &str) -> String {
    slurm_job_name(sweep_id).replacen("tao-job-", "tao-sweep-", 1)
}

/// The Slurm id of a variant's array task.
pub fn task_id(array_id: &str, index: u32) -> String {
    format!("{array_id}_{index}")
}

impl SweepPlan {
    /// Where the array's batch script is staged.
    pub fn array_script_file(&self) -> String {
        format!("{}/sbatch/sweep_{}.sbatch", self.first().layout.base_dir, self.sweep_id)
    }

    fn first(&self) -> &Plan {
        &self.variants[0].1
    }

    /// `0-N` with the cap (`%K`) if any.
    pub fn array_range(&self) -> String {
        let last = self.variants.len().saturating_sub(1);
        match self.max_concurrent {
            Some(cap) => format!("0-{last}%{cap}"),
            None => format!("0-{last}"),
        }
    }

    /// The array's batch script (see [`render_array_script`]).
    pub fn array_script(&self) -> String {
        let scripts: Vec<(u32, String)> =
            self.variants.iter().map(|(v, p)| (v.index, p.layout.script_file())).collect();
        render_array_script(self.first(), &self.array_name, &self.array_range(), &scripts)
    }
}

/// Resolve every variant of `spec`'s sweep into the plan of its own job (`variant_ids[i]` for the
/// variant of index i), each told its sweep id, index and values. Errors name the field.
pub fn plan_sweep(
    spec: &JobSpec,
    settings: &Settings,
    sweep_id: &str,
    variant_ids: &[String],
) -> Result<SweepPlan, SpecError> {
    let sweep = spec.sweep.as_ref().ok_or_else(|| SpecError::new("sweep", "is missing"))?;
    if !spec.steps.is_empty() {
        return Err(SpecError::new("sweep", "a sweep cannot also be a pipeline (give [sweep] or [[steps]])"));
    }
    let variants = sweep.variants()?;
    if variants.len() != variant_ids.len() {
        return Err(SpecError::new("sweep", format!("{} variants but {} ids", variants.len(), variant_ids.len())));
    }
    let mut out = Vec::with_capacity(variants.len());
    // The grid copied once, not once a variant (a variant's spec has no sweep).
    let base = spec.without_sweep();
    for (v, id) in variants.into_iter().zip(variant_ids) {
        let mut plan = resolve_with_id(&base.for_variant(&v), settings, id)?;
        if plan.resources.nodes > 1 || plan.cosmos.is_some() {
            return Err(SpecError::new(
                "sweep",
                "variants must be single-node jobs (a multi-node or Cosmos-RL job's tasks write logs by Slurm job id, which an array task does not have); submit such jobs one by one",
            ));
        }
        // A label that tells the variants apart in listings.
        plan.name = Some(format!("{}[{}]", plan.name.as_deref().unwrap_or("sweep"), v.index));
        plan.env.push(("TAO_SWEEP_ID".into(), sweep_id.to_string()));
        plan.env.push(("TAO_SWEEP_INDEX".into(), v.index.to_string()));
        plan.env.push(("TAO_SWEEP_VALUES".into(), v.describe()));
        out.push((v, plan));
    }
    Ok(SweepPlan {
        sweep_id: sweep_id.to_string(),
        array_name: array_name(sweep_id),
        max_concurrent: sweep.max_concurrent,
        variants: out,
    })
}

/// The remote script that stages every variant's files (and secrets, one file per variant so that
/// each is removed when its variant ends) and the array's script, then submits the array once:
/// `sbatch --hold --array`, every task's log directory, release. Like [`crate::ops::submit::submit_script`]
/// it may run any number of times: a lock per sweep admits one sbatch; a later run adopts the array.
/// Prints `slurm_job_id <array id>`.
pub fn sweep_submit_script(sweep: &SweepPlan, files: &[Vec<StagedFile>], secrets: &SecretValues) -> String {
    let first = sweep.first();
    let layout = &first.layout;
    let name = &sweep.array_name;
    let dirs: Vec<String> =
        files.iter().flatten().filter_map(|f| f.path.rsplit_once('/').map(|(d, _)| d.to_string())).collect();
    let writes_secrets = !first.secret_names.is_empty() && !secrets.0.is_empty();
    let mut s = crate::ops::submit::preamble(layout, dirs, writes_secrets, name);
    // Results directories: one mkdir for all (they sit in the results root checked above).
    s.push_str("mkdir -p --");
    for (_, p) in &sweep.variants {
        s.push(' ');
        s.push_str(&quote(&p.layout.results_dir()));
    }
    s.push_str(&format!(
        " || {{ echo 'tao-slurm: cannot create the results directories' >&2; exit {CANNOT_CREATE_DIRS}; }}\n"
    ));
    let n = sweep.variants.len();
    s.push_str(&format!(
        "logdirs() {{ local d=() i; for ((i = 0; i < {n}; i++)); do d+=(\"$logdir_prefix-$1_$i\"); done; mkdir -p -- \"${{d[@]}}\"; }}\n"
    ));
    s.push_str(&crate::ops::submit::lock_script(
        "logdirs \"$1\"; scontrol release \"$1\" >/dev/null 2>&1; ",
        &format!("  existing=\"$(squeue --me -h --name={} -o %F 2>/dev/null | head -n 1)\"", quote(name)),
        "sweep",
        0,
    ));
    if writes_secrets {
        for (_, plan) in &sweep.variants {
            s.push_str(&crate::ops::submit::secrets_file_script(plan, secrets));
        }
    }
    // Thousands of files: written by the shell's own printf into a fresh private staging directory
    // (no process per file), then renamed into place with one `mv` per destination directory. As
    // with `tao_put`, a symlink planted where a file goes is replaced, never followed.
    let array_file = StagedFile { path: sweep.array_script_file(), contents: sweep.array_script() };
    let mut by_dir: std::collections::BTreeMap<&str, Vec<(&str, &str)>> = Default::default();
    for f in files.iter().flatten().chain(std::iter::once(&array_file)) {
        let (dir, name) = f.path.rsplit_once('/').unwrap_or((".", f.path.as_str()));
        by_dir.entry(dir).or_default().push((name, f.contents.as_str()));
    }
    s.push_str(&format!(
        "stage=\"$(mktemp -d -- {})\" || {{ rm -rf \"$lock\"; echo 'tao-slurm: cannot create a staging directory' >&2; exit {CANNOT_STAGE}; }}\n\
         staged() {{ rm -rf -- \"$stage\" \"$lock\"; echo \"tao-slurm: cannot stage the sweep's files ($1)\" >&2; exit {CANNOT_STAGE}; }}\n",
        quote(&format!("{}/sbatch/.stage-XXXXXX", layout.base_dir))
    ));
    s.push_str("mkdir --");
    for i in 0..by_dir.len() {
        s.push_str(&format!(" \"$stage/{i}\""));
    }
    s.push_str(" || staged mkdir\nset -C\n");
    for (i, (_, entries)) in by_dir.iter().enumerate() {
        for (name, contents) in entries {
            s.push_str(&format!("printf '%s' {} > \"$stage/{i}/\"{} || staged write\n", quote(contents), quote(name)));
        }
    }
    s.push_str("set +C\n");
    for (i, (dir, _)) in by_dir.iter().enumerate() {
        s.push_str(&format!("mv -f -t {} -- \"$stage/{i}\"/* || staged rename\n", quote(dir)));
    }
    s.push_str("rm -rf -- \"$stage\"\n");
    s.push_str(&crate::ops::submit::sbatch_script(&crate::ops::submit::SbatchSteps {
        what: "sweep",
        name,
        options: "",
        script: &array_file.path,
        log_dirs: "logdirs \"$id\"",
        log_dirs_failed: "cannot create the log directories; sweep cancelled",
        hold: true,
        release: true,
    }));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::{settings, spec};
    use crate::spec::{Secret, SweepSpec};
    use std::process::Command;

    fn sweep_spec(n: usize) -> JobSpec {
        JobSpec {
            sweep: Some(SweepSpec {
                grid: [("LR".to_string(), (0..n).map(|i| format!("0.{i}")).collect())].into(),
                max_concurrent: Some(3),
                ..SweepSpec::default()
            }),
            secret_env: vec!["TOKEN".into()],
            ..spec()
        }
    }

    #[test]
    fn variants_are_jobs_of_their_own_told_their_index_and_values() {
        let ids: Vec<String> = (0..4).map(|i| format!("v{i}")).collect();
        let plan = plan_sweep(&sweep_spec(4), &settings(), "sw1", &ids).unwrap();
        assert_eq!(plan.array_name, "tao-sweep-sw1");
        assert_eq!(plan.array_range(), "0-3%3");
        let (v, p) = &plan.variants[2];
        assert_eq!(p.layout.job_id, "v2");
        assert!(p.env.contains(&("LR".to_string(), "0.2".to_string())));
        assert!(p.env.contains(&("TAO_SWEEP_INDEX".to_string(), "2".to_string())));
        assert!(p.env.contains(&("TAO_SWEEP_VALUES".to_string(), "LR=0.2".to_string())));
        assert_eq!(v.index, 2);
        assert_eq!(p.name.as_deref(), Some("sweep[2]"));
        let script = plan.array_script();
        assert!(script.contains("#SBATCH --array=0-3%3\n"), "{script}");
        assert!(script.contains("#SBATCH --job-name=tao-sweep-sw1\n"), "{script}");
        assert!(script.contains("/slurm-logs/.%x-%A_%a.out"), "{script}");
        assert!(!script.contains("%x-%j"), "{script}");
        assert!(script.contains(&format!("2) tao_variant={} ;;", quote(&p.layout.script_file()))));
        // The task's log directory is the one the engine computes from the task's Slurm id.
        assert_eq!(
            p.layout.log_dir(&plan.array_name, &task_id("77", 2)),
            format!("{}/tao-sweep-sw1-77_2", p.layout.logs_root())
        );
        let err = plan_sweep(&JobSpec { nodes: Some(2), ..sweep_spec(2) }, &settings(), "s", &["a".into(), "b".into()])
            .unwrap_err();
        assert_eq!(err.field, "sweep");
        let err = plan_sweep(
            &JobSpec { env: [("TAO_SWEEP_ID".into(), "x".into())].into(), ..sweep_spec(1) },
            &settings(),
            "s",
            &["a".into()],
        )
        .unwrap_err();
        assert_eq!(err.field, "env", "{err}");
    }

    /// The submit script stages every variant and the array script byte for byte, one sbatch with
    /// the array range, every task's log directory before release; a second run adopts the array.
    #[test]
    fn one_sbatch_for_the_array_and_a_second_run_adopts_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = settings();
        settings.base_results_dir = Some(dir.path().join("base").display().to_string());
        let ids: Vec<String> = (0..5).map(|i| format!("v{i}")).collect();
        let plan = plan_sweep(&sweep_spec(5), &settings, "sw", &ids).unwrap();
        let files: Vec<Vec<StagedFile>> = plan
            .variants
            .iter()
            .map(|(_, p)| crate::script::staged_files(p, &serde_json::json!({}), "alice", &["login".into()]))
            .collect();
        let secrets = SecretValues([("TOKEN".to_string(), Secret::new("s3cr$(touch x)et"))].into());
        let script = sweep_submit_script(&plan, &files, &secrets);
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let calls = dir.path().join("calls");
        std::fs::write(
            bin.join("sbatch"),
            format!("#!/bin/bash\necho \"sbatch $*\" >> {}\necho 4242\n", calls.display()),
        )
        .unwrap();
        std::fs::write(bin.join("scontrol"), format!("#!/bin/bash\necho \"scontrol $*\" >> {}\n", calls.display()))
            .unwrap();
        Command::new("chmod").arg("-R").arg("+x").arg(&bin).status().unwrap();
        // A symlink planted where a file goes is replaced, never followed.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let planted = &files[1][0].path;
        std::fs::create_dir_all(std::path::Path::new(planted).parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&victim, planted).unwrap();
        let run = || {
            Command::new("bash")
                .arg("-c")
                .arg(&script)
                .current_dir(dir.path())
                .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                .output()
                .unwrap()
        };
        let out = run();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("slurm_job_id 4242"));
        for f in files.iter().flatten() {
            assert_eq!(std::fs::read_to_string(&f.path).unwrap(), f.contents);
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!std::fs::symlink_metadata(planted).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(plan.array_script_file()).unwrap(), plan.array_script());
        for (v, p) in &plan.variants {
            assert!(std::path::Path::new(&p.layout.log_dir(&plan.array_name, &task_id("4242", v.index))).is_dir());
            assert!(std::path::Path::new(&p.layout.results_dir()).is_dir());
            assert_eq!(std::fs::read_to_string(p.layout.secrets_file()).unwrap(), "export TOKEN='s3cr$(touch x)et'\n");
        }
        assert!(!dir.path().join("x").exists(), "a secret value never runs");
        let again = run();
        assert!(String::from_utf8_lossy(&again.stdout).contains("@@tao-slurm:adopted"));
        let calls = std::fs::read_to_string(&calls).unwrap();
        assert_eq!(calls.matches("sbatch ").count(), 1, "{calls}");
        assert!(
            calls.contains(&format!("sbatch --parsable --hold --job-name=tao-sweep-sw {}", plan.array_script_file()))
        );
        assert!(calls.contains("scontrol release 4242"));
    }
}
