//! Render a [`Plan`] into the batch script and the staged JSON files. Pure: the same plan always gives
//! the same text, and every value reaches the script through [`shell::quote`] or a character check.

pub mod cosmos;
pub mod shell;
pub mod trust;

use crate::plan::{Plan, MASTER_PORT, RENDEZVOUS_VARS};
use crate::slurm::format_duration_minutes;
use serde_json::json;
use shell::quote;
use std::fmt::Write as _;

/// The files staged on shared storage for one job, with their remote paths.
#[derive(Debug, Clone, PartialEq)]
pub struct StagedFile {
    pub path: String,
    pub contents: String,
}

/// The batch script's exit status when a file it needs (the secrets file, the staged specs) is
/// missing or not trustworthy: distinct from any command's, and never retried (a user error).
pub const EXIT_MISSING_FILE: i32 = 85;

/// The batch script text.
pub fn render_batch_script(plan: &Plan) -> String {
    let mut out = String::from("#!/bin/bash\n");
    write_directives(
        &mut |line: String| {
            let _ = writeln!(out, "#SBATCH {line}");
        },
        plan,
    );
    write_body(&mut out, plan);
    out
}

fn write_directives(directive: &mut impl FnMut(String), plan: &Plan) {
    let r = &plan.resources;
    let logs = plan.layout.logs_root();
    directive(format!("--job-name={}", plan.layout.job_name));
    directive(format!("--nodes={}", r.nodes));
    directive("--ntasks-per-node=1".into());
    if r.nodes > 1 {
        directive(format!("--ntasks={}", r.nodes));
    }
    if r.gpus_per_node > 0 {
        directive(format!("--gres=gpu:{}", r.gpus_per_node));
    }
    if r.exclusive {
        directive("--exclusive".into());
    }
    directive("--wait-all-nodes=1".into());
    directive(format!("--cpus-per-task={}", r.cpus_per_task));
    directive(format!("--time={}", format_duration_minutes(plan.time_minutes)));
    directive(format!("--partition={}", plan.partition));
    // Values below were checked against the characters their field allows (never `#` or a space).
    for (option, value) in [
        ("account", &plan.account),
        ("qos", &plan.qos),
        ("mem", &plan.memory),
        ("constraint", &plan.constraint),
        ("exclude", &plan.exclude),
        ("reservation", &plan.reservation),
    ] {
        if let Some(v) = value {
            directive(format!("--{option}={v}"));
        }
    }
    for (option, value) in &plan.sbatch_options {
        directive(format!("--{option}={value}"));
    }
    directive(format!("--output={logs}/%x-%j/main.out"));
    directive(format!("--error={logs}/%x-%j/main.err"));
    directive("--open-mode=append".into());
    directive(if plan.requeue { "--requeue".into() } else { "--no-requeue".into() });
}

/// Names passed to `--container-env`: the variables the container must take from the task environment
/// rather than from the image.
pub fn container_env_names(plan: &Plan) -> Vec<String> {
    let mut names: Vec<String> = TAO_CONTAINER_VARS.iter().map(|v| v.to_string()).collect();
    if plan.resources.nodes > 1 {
        names.extend(["WORLD_SIZE", "NUM_GPU_PER_NODE", "MASTER_ADDR", "MASTER_PORT"].map(String::from));
    }
    if let Some(c) = &plan.cosmos {
        names.extend(cosmos::container_env_names(c));
    }
    for n in plan.env.iter().map(|(n, _)| n).chain(&plan.secret_names) {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    names
}

/// What every container is given, as TAO's containers read it: the job id under both names (TAO's
/// own code reads `TAO_API_JOB_ID`), the results root, the staged specs, and the TAO SDK's defaults
/// for Hugging Face's cache and Python (a job's own `env` may replace the last three).
pub const TAO_CONTAINER_VARS: &[&str] = &[
    "TAO_API_RESULTS_DIR",
    "TAO_JOB_ID",
    "TAO_SPECS_FILE",
    "TAO_API_JOB_ID",
    "TAO_RESULTS_ROOT",
    "HF_HOME",
    "PYTHONNOUSERSITE",
    "PYTHONDONTWRITEBYTECODE",
];

/// The argv of the container step, before the inner `timeout`.
pub fn srun_argv(plan: &Plan) -> Vec<String> {
    let mut argv = vec!["srun".to_string(), "--kill-on-bad-exit=1".to_string()];
    if plan.resources.nodes > 1 && plan.cosmos.is_none() {
        // The tasks write the job's logs themselves (srun's own messages are kept apart).
        let logs = plan.layout.logs_root();
        argv.push(format!("--output={logs}/%x-%j/main.out"));
        argv.push(format!("--error={logs}/%x-%j/main.err"));
        argv.push("--open-mode=append".to_string());
    }
    argv.extend(container_options(plan));
    argv.extend(task_argv(plan, &plan.command));
    argv
}

/// The container options of a step: image, mounts, the environment it takes from the task, workdir.
fn container_options(plan: &Plan) -> Vec<String> {
    let mut argv = vec![format!("--container-image={}", plan.image.pyxis)];
    if !plan.mounts.is_empty() {
        argv.push(format!("--container-mounts={}", plan.mounts.join(",")));
    }
    argv.push(format!("--container-env={}", container_env_names(plan).join(",")));
    if let Some(w) = &plan.container_workdir {
        argv.push(format!("--container-workdir={w}"));
    }
    if !plan.mount_home {
        argv.push("--no-container-mount-home".to_string());
    }
    argv
}

/// What each task runs in the container: the prelude, then `command`.
fn task_argv(plan: &Plan, command: &[String]) -> Vec<String> {
    // The task prelude runs inside the container, on every node: NODE_RANK must come from that task's
    // own SLURM_NODEID (evaluating it in the batch step would give every node rank 0).
    let prelude = if plan.resources.nodes > 1 {
        "export NODE_RANK=\"$SLURM_NODEID\"; exec \"$@\"".to_string()
    } else {
        format!("unset {}; exec \"$@\"", RENDEZVOUS_VARS.join(" "))
    };
    let mut argv = vec!["--".to_string(), "sh".to_string(), "-c".to_string(), prelude, "tao-task".to_string()];
    argv.extend(command.iter().cloned());
    argv
}

/// The inner timeout every container step runs under (exit 124 requeues the job, up to a cap).
/// Without it (SLURM_USE_TIMEOUT=false) the prefix is bash's `command`, which runs the step as is.
fn timeout_prefix(plan: &Plan) -> String {
    if !plan.use_timeout {
        return "command".to_string();
    }
    format!("timeout --signal=TERM --kill-after=60 {}s", plan.timeout_seconds)
}

fn write_body(s: &mut String, plan: &Plan) {
    let layout = &plan.layout;
    let r = &plan.resources;
    let w = |s: &mut String, line: &str| {
        s.push_str(line);
        s.push('\n');
    };
    w(s, "");
    w(s, "# Generated by tao-slurm. No xtrace: the environment must never be echoed into the logs.");
    w(s, "set -u -o pipefail");
    let _ = writeln!(s, "export TAO_JOB_ID={}", quote(&layout.job_id));
    let _ = writeln!(s, "export TAO_API_RESULTS_DIR={}", quote(&layout.results_root));
    let _ = writeln!(s, "export TAO_SPECS_FILE={}", quote(&layout.specs_file()));
    let _ = writeln!(s, "export TAO_API_JOB_ID=\"$TAO_JOB_ID\" TAO_RESULTS_ROOT=\"$TAO_API_RESULTS_DIR\"");
    let _ = writeln!(
        s,
        "export HF_HOME={} PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1",
        quote(&format!("{}/.cache/huggingface", layout.job_dir))
    );
    for (name, value) in &plan.env {
        let _ = writeln!(s, "export {name}={}", quote(value));
    }
    if !plan.secret_names.is_empty() {
        // Written by the submission (mode 600, directory 700); never echoed. Sourced only if it is a
        // regular file of ours: a job must never run without its secrets, nor with someone else's.
        let f = quote(&layout.secrets_file());
        let _ = writeln!(
            s,
            "if [ -f {f} ] && [ ! -L {f} ] && [ -O {f} ]; then . {f}; else echo \"tao-slurm: the secrets file \"{f}\" is missing, a symlink or not yours: the job does not run without its secrets ({})\" >&2; exit {EXIT_MISSING_FILE}; fi",
            plan.secret_names.join(", ")
        );
    }
    // The staged specs file the job reads as $TAO_SPECS_FILE must be there too.
    let _ = writeln!(
        s,
        "[ -f \"$TAO_SPECS_FILE\" ] || {{ echo \"tao-slurm: the staged specs file $TAO_SPECS_FILE is missing\" >&2; exit {EXIT_MISSING_FILE}; }}"
    );
    let _ = writeln!(s, "mkdir -p {}", quote(&layout.results_dir()));
    write_fetches(s, plan);
    if r.nodes > 1 {
        w(s, "MASTER_ADDR=\"$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\"");
        let _ = writeln!(
            s,
            "export WORLD_SIZE={} NUM_GPU_PER_NODE={} MASTER_PORT={MASTER_PORT} MASTER_ADDR",
            r.nodes, r.gpus_per_node
        );
    } else {
        let _ = writeln!(s, "unset {}", RENDEZVOUS_VARS.join(" "));
    }
    w(s, "echo \"tao-slurm: job $TAO_JOB_ID, Slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST (restart ${SLURM_RESTART_COUNT:-0})\" >&2");
    match &plan.cosmos {
        // Three steps in one allocation; `rc` is the first failing role's exit status.
        Some(c) => cosmos::write_steps(s, plan, c),
        None if r.nodes > 1 => {
            // Several tasks: srun's own messages go to a file of their own (the tasks write main.out
            // and main.err themselves), because with --kill-on-bad-exit srun ends with the highest
            // status of its tasks, usually a sibling's SIGTERM (143), and only its message says which
            // status the failing task itself ended with. Nothing a task prints can pose as it.
            let _ =
                writeln!(s, "tao_srun_log={}/\"$SLURM_JOB_NAME-$SLURM_JOB_ID\"/srun.log", quote(&layout.logs_root()));
            let _ = writeln!(s, "{} {} 2>\"$tao_srun_log\"", timeout_prefix(plan), shell::join(&srun_argv(plan)));
            w(s, "rc=$?");
            w(s, "cat -- \"$tao_srun_log\" >&2");
            w(s, "if [ \"$rc\" -ne 0 ] && [ \"$rc\" -ne 124 ]; then");
            w(s, "  tao_task_rc=\"$(sed -n 's/^srun: error: .*: task [0-9]*: Exited with exit code \\([0-9]*\\)$/\\1/p' \"$tao_srun_log\" | head -n 1)\"");
            w(s, "  if [ -n \"$tao_task_rc\" ] && [ \"$tao_task_rc\" -ne 0 ]; then rc=\"$tao_task_rc\"; fi");
            w(s, "fi");
        }
        None => {
            let _ = writeln!(s, "{} {}", timeout_prefix(plan), shell::join(&srun_argv(plan)));
            w(s, "rc=$?");
        }
    }
    // The batch script's exit status is the container step's: a failing command must be FAILED in Slurm.
    let counter = format!("{}/.timeout_requeues", layout.results_dir());
    let _ = writeln!(s, "if [ \"$rc\" -eq 124 ]; then");
    let _ = writeln!(s, "  counter={}", quote(&counter));
    w(s, "  done_requeues=\"$(cat \"$counter\" 2>/dev/null || echo 0)\"");
    if plan.requeue {
        let _ = writeln!(s, "  if [ \"$done_requeues\" -lt {} ]; then", plan.max_timeout_requeues);
        w(s, "    echo $((done_requeues + 1)) > \"$counter\"");
        let _ = writeln!(
            s,
            "    echo \"tao-slurm: inner timeout reached; requeueing (timeout requeue $((done_requeues + 1)) of {})\" >&2",
            plan.max_timeout_requeues
        );
        w(s, "    scontrol requeue \"$SLURM_JOB_ID\" && exit 0");
        w(s, "  fi");
    }
    w(s, "  echo \"tao-slurm: timed out $((done_requeues + 1)) times\" >&2");
    w(s, "fi");
    w(s, "exit \"$rc\"");
}

/// Auxiliary inputs are fetched once into their cache directory (credentials come from the secret
/// environment sourced above), under a time limit and a size cap; a failure ends the job before the
/// command starts. Jobs that share an input take turns: a lock directory (`mkdir` is atomic on shared
/// filesystems, where `flock` may not be) admits one fetcher; the others wait for its completion mark,
/// or take over if it failed, or break its lock once it is older than the fetch time limit allows.
fn write_fetches(s: &mut String, plan: &Plan) {
    for f in &plan.fetches {
        let rest = f.uri.split_once("://").map(|(_, r)| r).unwrap_or(&f.uri);
        let dir = quote(&f.dir);
        let lock = quote(&format!("{}.lock", f.dir));
        let command = match f.scheme.as_str() {
            "s3" if f.path != f.dir => format!("aws s3 cp {} {}", quote(&f.uri), quote(&f.path)),
            "s3" => format!("aws s3 sync {} {dir}", quote(&f.uri)),
            "hf_model" => format!("huggingface-cli download {} --local-dir {dir}", quote(rest)),
            "hf_dataset" => format!("huggingface-cli download {} --repo-type dataset --local-dir {dir}", quote(rest)),
            _ => format!("ngc registry model download-version {} --dest {dir}", quote(rest)),
        };
        let uri = quote(&f.uri);
        let stale_after = plan.aux_timeout_minutes + 5;
        let _ = writeln!(s, "if [ ! -f {dir}/.tao-complete ]; then");
        let _ = writeln!(s, "  owned=0; said=0");
        let _ = writeln!(s, "  while [ ! -f {dir}/.tao-complete ]; do");
        let _ =
            writeln!(s, "    if mkdir -p \"$(dirname {lock})\" && mkdir {lock} 2>/dev/null; then owned=1; break; fi");
        let _ = writeln!(
            s,
            "    if [ -n \"$(find {lock} -maxdepth 0 -mmin +{stale_after} 2>/dev/null)\" ]; then echo \"tao-slurm: removing the stale fetch lock {}\" >&2; rm -rf {lock}; continue; fi",
            f.dir
        );
        let _ = writeln!(
            s,
            "    [ \"$said\" = 1 ] || echo \"tao-slurm: waiting for another job fetching \"{uri}\" into {}\" >&2; said=1",
            f.dir
        );
        let _ = writeln!(s, "    sleep 5");
        let _ = writeln!(s, "  done");
        let _ = writeln!(s, "  if [ \"$owned\" = 1 ] && [ ! -f {dir}/.tao-complete ]; then");
        let _ = writeln!(s, "    echo \"${{SLURM_JOB_ID:-?}} $(hostname)\" > {lock}/owner");
        let _ = writeln!(s, "    echo \"tao-slurm: fetching \"{uri}\" into {}\" >&2", f.dir);
        let _ = writeln!(s, "    rm -rf {dir} && mkdir -p {dir} || {{ rm -rf {lock}; exit 86; }}");
        let _ = writeln!(
            s,
            "    timeout {}m {command} </dev/null >&2 || {{ echo \"tao-slurm: fetching \"{uri}\" failed\" >&2; rm -rf {dir} {lock}; exit 86; }}",
            plan.aux_timeout_minutes
        );
        let _ = writeln!(s, "    size=\"$(du -sb {dir} | cut -f1)\"");
        let _ = writeln!(
            s,
            "    if [ \"$size\" -gt {cap} ]; then rm -rf {dir} {lock}; echo \"tao-slurm: \"{uri}\" is $size bytes, more than the {cap}-byte cap for auxiliary inputs; put large inputs on the shared filesystem (lustre://)\" >&2; exit 87; fi",
            cap = plan.aux_max_bytes
        );
        let _ = writeln!(s, "    touch {dir}/.tao-complete");
        let _ = writeln!(s, "  fi");
        let _ = writeln!(s, "  if [ \"$owned\" = 1 ]; then rm -rf {lock}; fi");
        let _ = writeln!(s, "fi");
    }
}

/// The staged JSON files (compact, as the contract's layout wants).
pub fn staged_files(plan: &Plan, spec_json: &serde_json::Value, slurm_user: &str, hosts: &[String]) -> Vec<StagedFile> {
    let layout = &plan.layout;
    let env: serde_json::Map<String, serde_json::Value> = plan.env.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    let meta = json!({
        "job_id": layout.job_id,
        "job_spec": spec_json,
        "backend_details": {"backend_type": "slurm", "partition": plan.partition},
        "cloud_specific_details": {"slurm_user": slurm_user, "slurm_hostname": hosts},
    });
    let mut files = vec![
        StagedFile { path: layout.spec_file(), contents: plan.specs_json().to_string() },
        StagedFile { path: layout.env_file(), contents: serde_json::Value::Object(env).to_string() },
        StagedFile { path: layout.meta_file(), contents: meta.to_string() },
    ];
    if let Some(c) = &plan.cosmos {
        files.push(StagedFile { path: crate::cosmos::config_file(layout), contents: c.config_text.clone() });
    }
    files.push(StagedFile { path: layout.script_file(), contents: render_batch_script(plan) });
    files
}

#[cfg(test)]
mod tests;
