//! The body of a Cosmos-RL batch script: three `srun` steps in one allocation (the controller on the
//! first node, overlapping the policy step; the policy on the first nodes; the rollout on the rest),
//! each role logging to `<log dir>/<role>/<task>.out|err`. The first role to fail stops the others
//! and its exit status becomes `rc`, which the common tail turns into the job's (or a timeout
//! requeue). Pure, like the rest of the script.

use super::shell::{join, quote};
use super::{container_options, task_argv, timeout_prefix};
use crate::cosmos::{config_file, CosmosPlan, Role, CONTROLLER_PORT, COSMOS_VARS};
use crate::plan::Plan;
use std::fmt::Write as _;

/// Written into the attempt's log directory by the batch script when a role fails (not on a
/// timeout): `<role> <exit status>`. The failure's evidence names the role from it.
pub const FAILED_ROLE_FILE: &str = "failed_role";

/// The evidence line for a [`FAILED_ROLE_FILE`]'s content (`<role> <exit status>`); None for
/// anything else (the file is in a directory the job can write to).
pub fn failed_role_evidence(text: &str) -> Option<String> {
    let mut words = text.split_whitespace();
    let role = Role::parse(words.next()?)?;
    let code: i32 = words.next()?.parse().ok()?;
    Some(format!("Cosmos-RL role {role} failed with exit code {code}"))
}

/// Where each step's srun writes its own messages (not the tasks' output): `<log dir>/<role>/srun.log`.
/// They are copied into main.err when the step ends, and they hold the tasks' real exit codes.
pub const SRUN_MESSAGES_FILE: &str = "srun.log";

/// Log files of the failing role shown in main.err (their last lines), so that the failure's
/// classification sees the role's own errors.
const ERR_FILES_SHOWN: u32 = 8;
const ERR_LINES_SHOWN: u32 = 20;
/// Seconds the script waits for one of those reads (a task can make its log a FIFO).
const ERR_READ_SECS: u32 = 30;
// The exit status when the staged config is missing: the one the batch script gives a missing
// staged file, distinct from any command's.
use crate::exit_codes::MISSING_FILE as EXIT_MISSING_CONFIG;

pub use crate::cosmos::SCRIPT_VAR_PREFIX;

/// The names a Cosmos-RL job adds to `--container-env`: its variables, and Slurm's node identity,
/// by which Cosmos-RL's launcher finds its node in the role's list.
pub fn container_env_names(_plan: &CosmosPlan) -> Vec<String> {
    let mut names: Vec<String> = COSMOS_VARS.iter().map(|n| n.to_string()).collect();
    names.extend(["SLURM_NODEID", "SLURMD_NODENAME"].map(String::from));
    names
}

/// The shell words (with expansions, so not quoted) naming a role's nodes for `--nodelist`.
fn nodelist(role: Role) -> &'static str {
    match role {
        Role::Controller => "\"$CONTROLLER_NODE\"",
        Role::Policy => "\"${POLICY_NODES// /,}\"",
        Role::Rollout => "\"${ROLLOUT_NODES// /,}\"",
    }
}

/// The node list a role's launcher reads as `LOCAL_NODE_LIST` (the controller belongs to the policy
/// nodes, as in Cosmos-RL's own Slurm script).
fn local_node_list(role: Role) -> &'static str {
    match role {
        Role::Controller | Role::Policy => "\"$POLICY_NODES\"",
        Role::Rollout => "\"$ROLLOUT_NODES\"",
    }
}

/// One role's step line, started in the background.
fn step_line(plan: &Plan, cosmos: &CosmosPlan, role: Role) -> String {
    let tasks = cosmos.tasks(role);
    let mut head = vec!["srun".to_string(), "--kill-on-bad-exit=1".to_string()];
    // The controller shares the first node with a policy task.
    if role != Role::Rollout {
        head.push("--overlap".to_string());
    }
    head.extend([format!("--nodes={tasks}"), format!("--ntasks={tasks}"), "--ntasks-per-node=1".to_string()]);
    let mut tail = container_options(plan);
    let container = super::role_container_name(&plan.layout.job_id, role);
    tail.push(format!("--container-name={container}"));
    tail.extend(task_argv(plan, &container, cosmos.command(role)));
    format!(
        "COSMOS_NODE_ROLE={role} LOCAL_NODE_LIST={} {} {} --nodelist={} --output=\"$tao_logs/{role}/%t.out\" --error=\"$tao_logs/{role}/%t.err\" {} 2>\"$tao_logs/{role}/{SRUN_MESSAGES_FILE}\" &",
        local_node_list(role),
        timeout_prefix(plan),
        join(&head),
        nodelist(role),
        join(&tail)
    )
}

pub(super) fn write_steps(s: &mut String, plan: &Plan, cosmos: &CosmosPlan) {
    write_environment(s, plan, cosmos);
    let roles = cosmos.roles();
    let role_words: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
    let role_words = role_words.join(" ");
    let w = |s: &mut String, line: &str| {
        s.push_str(line);
        s.push('\n');
    };
    w(s, "declare -A tao_step");
    for role in &roles {
        w(s, &step_line(plan, cosmos, *role));
        let _ = writeln!(s, "tao_step[{role}]=$!");
    }
    write_reaper(s, &role_words);
    write_failure_lines(s);
}

/// The allocation checked against the split, and the variables every role reads.
fn write_environment(s: &mut String, plan: &Plan, cosmos: &CosmosPlan) {
    let split = &cosmos.split;
    let (n_policy, n_rollout, total) = (split.policy_nodes(), split.rollout_nodes(), split.total_nodes());
    let roles = cosmos.roles();
    let w = |s: &mut String, line: &str| {
        s.push_str(line);
        s.push('\n');
    };
    w(s, "# Cosmos-RL: the controller, policy and rollout roles are steps of this allocation. The first role");
    w(s, "# to fail stops the others, and its exit status is the job's.");
    let _ = writeln!(s, "tao_logs={}/\"$SLURM_JOB_NAME-$SLURM_JOB_ID\"", quote(&plan.layout.logs_root()));
    let _ =
        writeln!(s, "mkdir -p {}", roles.iter().map(|r| format!("\"$tao_logs/{r}\"")).collect::<Vec<_>>().join(" "));
    let _ = writeln!(s, "rm -f \"$tao_logs/{FAILED_ROLE_FILE}\"");
    // Whatever the submitting environment held under these names, they start empty here.
    w(s, "unset tao_hosts tao_step");
    w(s, "mapfile -t tao_hosts < <(scontrol show hostnames \"$SLURM_JOB_NODELIST\")");
    let _ = writeln!(
        s,
        "if [ \"${{#tao_hosts[@]}}\" -ne {total} ]; then echo \"tao-slurm: the allocation has ${{#tao_hosts[@]}} nodes; the Cosmos-RL split needs {total}\" >&2; exit 1; fi"
    );
    let _ = writeln!(
        s,
        "export COSMOS_RL_MULTINODE=1 NUM_POLICY_NODES={n_policy} NUM_ROLLOUT_NODES={n_rollout} TOTAL_NODES={total} CONTROLLER_PORT={CONTROLLER_PORT}"
    );
    let _ = writeln!(s, "export COSMOS_RL_CONFIG={}", quote(&config_file(&plan.layout)));
    let _ = writeln!(
        s,
        "[ -f \"$COSMOS_RL_CONFIG\" ] || {{ echo \"tao-slurm: the staged Cosmos-RL config $COSMOS_RL_CONFIG is missing\" >&2; exit {EXIT_MISSING_CONFIG}; }}"
    );
    let _ = writeln!(s, "export NODE_LAUNCH_METADATA_POLICY={}", quote(&split.launch_metadata_json(Role::Policy)));
    let _ = writeln!(s, "export NODE_LAUNCH_METADATA_ROLLOUT={}", quote(&split.launch_metadata_json(Role::Rollout)));
    w(s, "export CONTROLLER_NODE=\"${tao_hosts[0]}\"");
    let _ = writeln!(s, "export COSMOS_CONTROLLER_HOST=\"$CONTROLLER_NODE:{CONTROLLER_PORT}\"");
    let _ = writeln!(s, "export POLICY_NODES=\"${{tao_hosts[*]:0:{n_policy}}}\"");
    let _ = writeln!(s, "export ROLLOUT_NODES=\"${{tao_hosts[*]:{n_policy}}}\"");
    w(s, "echo \"tao-slurm: Cosmos-RL controller at $COSMOS_CONTROLLER_HOST; policy on $POLICY_NODES; rollout on ${ROLLOUT_NODES:-no nodes}\" >&2");
}

/// Wait for the roles; the first to fail stops the others and gives the job its exit status.
fn write_reaper(s: &mut String, role_words: &str) {
    let w = |s: &mut String, line: &str| {
        s.push_str(line);
        s.push('\n');
    };
    // Bash reaps the steps as they end and keeps their statuses for `wait`; `kill -0` tells which
    // have ended (as portable as it gets: `wait -n -p` needs bash 5.1). The script's own variables
    // all begin with `tao_` (and `rc`, the common tail's), so no job variable can collide with them.
    w(s, "rc=0; tao_failed_role=\"\"");
    w(s, "while :; do");
    w(s, "  tao_running=0");
    let _ = writeln!(s, "  for tao_role in {role_words}; do");
    w(s, "    tao_pid=\"${tao_step[$tao_role]:-}\"");
    w(s, "    [ -n \"$tao_pid\" ] || continue");
    w(s, "    if kill -0 \"$tao_pid\" 2>/dev/null; then tao_running=1; continue; fi");
    w(s, "    wait \"$tao_pid\"; tao_rc=$?");
    w(s, "    tao_step[$tao_role]=\"\"");
    // srun reports a step whose failing task made it kill the others (--kill-on-bad-exit) by the
    // others' signal (143); the failing task's own status is in srun's messages. Read only a
    // regular file, briefly: the log directory is the job's to write.
    let _ = writeln!(s, "    tao_msgs=\"$tao_logs/$tao_role/{SRUN_MESSAGES_FILE}\"");
    w(s, "    if [ -f \"$tao_msgs\" ] && [ ! -L \"$tao_msgs\" ]; then");
    let _ = writeln!(s, "      timeout {ERR_READ_SECS} cat -- \"$tao_msgs\" >&2");
    w(s, "      if [ \"$tao_rc\" -gt 128 ]; then");
    let _ = writeln!(
        s,
        "        tao_code=\"$(timeout {ERR_READ_SECS} grep -o 'Exited with exit code [0-9]*' -- \"$tao_msgs\" | head -n 1)\""
    );
    w(s, "        [ -z \"$tao_code\" ] || tao_rc=\"${tao_code##* }\"");
    w(s, "      fi");
    w(s, "    fi");
    w(s, "    echo \"tao-slurm: Cosmos-RL role $tao_role ended with exit code $tao_rc\" >&2");
    w(s, "    if [ \"$tao_rc\" -ne 0 ] && [ \"$rc\" -eq 0 ]; then");
    w(s, "      rc=$tao_rc");
    // A timeout is the job's, not a role's failure: the common tail requeues it.
    let _ = writeln!(
        s,
        "      if [ \"$rc\" -ne 124 ]; then tao_failed_role=$tao_role; printf '%s %s\\n' \"$tao_role\" \"$rc\" > \"$tao_logs/{FAILED_ROLE_FILE}\"; fi"
    );
    w(s, "      echo \"tao-slurm: stopping the other Cosmos-RL roles\" >&2");
    let _ = writeln!(
        s,
        "      for tao_other in {role_words}; do if [ -n \"${{tao_step[$tao_other]:-}}\" ]; then kill -TERM \"${{tao_step[$tao_other]}}\" 2>/dev/null; fi; done"
    );
    w(s, "    fi");
    w(s, "  done");
    w(s, "  [ \"$tao_running\" = 1 ] || break");
    w(s, "  sleep 1");
    w(s, "done");
}

/// The failing role named, with the last lines of its error files.
fn write_failure_lines(s: &mut String) {
    let w = |s: &mut String, line: &str| {
        s.push_str(line);
        s.push('\n');
    };
    // The failing role's own error lines, where the failure's classification reads (main.err). Only
    // regular files, under a time limit: a task can replace its log with a FIFO or a symlink.
    w(s, "if [ -n \"$tao_failed_role\" ]; then");
    w(s, "  tao_shown=0");
    w(s, "  for tao_f in \"$tao_logs/$tao_failed_role\"/[0-9]*.err; do");
    let _ = writeln!(
        s,
        "    [ -f \"$tao_f\" ] && [ ! -L \"$tao_f\" ] && [ -s \"$tao_f\" ] && [ \"$tao_shown\" -lt {ERR_FILES_SHOWN} ] || continue"
    );
    w(s, "    tao_shown=$((tao_shown + 1))");
    w(s, "    echo \"tao-slurm: the last lines of $tao_f:\" >&2");
    let _ = writeln!(s, "    timeout {ERR_READ_SECS} tail -n {ERR_LINES_SHOWN} -- \"$tao_f\" >&2");
    w(s, "  done");
    w(s, "  echo \"tao-slurm: Cosmos-RL role $tao_failed_role failed with exit code $rc; the other roles were stopped\" >&2");
    w(s, "fi");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::resolve_with_id;
    use crate::plan::tests::{settings, spec};
    use crate::script::render_batch_script;
    use crate::spec::{CosmosRlSpec, JobSpec, RoleCommands};
    use std::path::Path;
    use std::process::Command;
    use std::time::{Duration, Instant};

    const ID: &str = "00000000-0000-4000-8000-000000000001";
    /// Policy replicas of 16 GPUs (two whole nodes); four rollout replicas of 4 GPUs, two per node.
    const TWO_AND_TWO: &str = "[policy.parallelism]\ntp_size = 2\ndp_shard_size = 8\n[rollout.parallelism]\ntp_size = 4\nn_init_replicas = 4\n";
    const SFT: &str = "[train.train_policy]\ntype = \"sft\"\n[policy.parallelism]\ntp_size = 4\n";

    fn cosmos_spec(config: &str) -> JobSpec {
        JobSpec {
            image: "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt".into(),
            command: vec!["python".into(), "-m".into(), "nvidia_tao_core.entrypoint".into()],
            cosmos_rl: Some(CosmosRlSpec { config_text: Some(config.into()), ..CosmosRlSpec::default() }),
            ..spec()
        }
    }

    fn render(spec: JobSpec) -> String {
        render_batch_script(&resolve_with_id(&spec, &settings(), ID).unwrap())
    }

    /// Golden scripts of Cosmos-RL jobs. Regenerate with `UPDATE_GOLDEN=1 cargo test golden`.
    #[test]
    fn golden_cosmos_scripts() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
        let cases: Vec<(&str, JobSpec)> = vec![
            ("cosmos_two_policy_two_rollout", cosmos_spec(TWO_AND_TWO)),
            ("cosmos_sft_one_node", JobSpec { gpus: Some(4), ..cosmos_spec(SFT) }),
            (
                "cosmos_role_commands_and_secrets",
                JobSpec {
                    secret_env: vec!["WANDB_API_KEY".into()],
                    env: [("EXPERIMENT".to_string(), "it's".to_string())].into(),
                    sbatch_options: [("mail-type".to_string(), "END,FAIL".to_string())].into(),
                    no_container_mount_home: true,
                    cosmos_rl: Some(CosmosRlSpec {
                        config_text: Some(TWO_AND_TWO.into()),
                        commands: RoleCommands {
                            controller: vec!["bash".into(), "-c".into(), "launch_controller.sh --port 8082".into()],
                            ..RoleCommands::default()
                        },
                        ..CosmosRlSpec::default()
                    }),
                    ..cosmos_spec(TWO_AND_TWO)
                },
            ),
        ];
        let update = std::env::var("UPDATE_GOLDEN").is_ok();
        for (name, spec) in cases {
            let script = render(spec);
            let path = dir.join(format!("{name}.sbatch"));
            if update {
                std::fs::write(&path, &script).unwrap();
            }
            let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(script, want, "golden {name} differs; rerun with UPDATE_GOLDEN=1 if the change is intended");
            let out = Command::new("bash").arg("-n").arg(&path).output().unwrap();
            assert!(out.status.success(), "bash -n {name}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }

    /// `exec --role` and `--node` of a Cosmos-RL job reach the role's nodes and the container its
    /// step named; a plain job has no roles; a Cosmos-RL job needs one.
    #[test]
    fn exec_reaches_a_roles_nodes_and_its_container() {
        use crate::ops::running::{exec_argv, resolve_place, ExecError, ExecTarget, Place};
        let plan = resolve_with_id(&cosmos_spec(TWO_AND_TWO), &settings(), ID).unwrap();
        let cosmos = plan.cosmos.as_ref();
        let script = render_batch_script(&plan);
        let nodes = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        type Case<'a> = (Option<&'a str>, Option<&'a str>, Result<Place, ExecError>);
        let cases: &[Case] = &[
            (None, Some("controller"), Ok(Place::Role(Role::Controller, nodes(&["node1"])))),
            (None, Some("policy"), Ok(Place::Role(Role::Policy, nodes(&["node1", "node2"])))),
            (None, Some("rollout"), Ok(Place::Role(Role::Rollout, nodes(&["node3", "node4"])))),
            (Some("node4"), None, Ok(Place::Role(Role::Rollout, nodes(&["node4"])))),
            (Some("node1"), None, Ok(Place::Role(Role::Policy, nodes(&["node1"])))),
            (Some("node9"), None, Err(ExecError::NotItsNode("node9".into(), "node[1-4]".into()))),
            (None, None, Err(ExecError::NeedRole("controller, policy, rollout".into()))),
            (Some("node1"), Some("policy"), Err(ExecError::NodeAndRole)),
            (None, Some("critic"), Err(ExecError::BadRole("critic".into(), "controller, policy, rollout".into()))),
        ];
        for (node, role, want) in cases {
            assert_eq!(&resolve_place(*node, *role, cosmos, "node[1-4]"), want, "{node:?} {role:?}");
        }
        assert_eq!(resolve_place(None, Some("policy"), None, "node1"), Err(ExecError::NoRoles));
        assert_eq!(resolve_place(Some("node1"), None, None, "node1"), Ok(Place::Node("node1".into())));
        // The container each role's step names is the one exec joins.
        for role in Role::ALL {
            let place = resolve_place(None, Some(role.as_str()), cosmos, "node[1-4]").unwrap();
            let target = ExecTarget {
                slurm_job_id: "7",
                job_id: ID,
                place,
                pty: false,
                node_list: "n[1-4]",
                results_dir: "/r",
                image: "x",
            };
            let argv = exec_argv(&target, &["nvidia-smi".into()]).unwrap().join(" ");
            let name = format!("--container-name=tao-{ID}-{role}");
            assert!(argv.contains(&name), "{argv}");
            assert!(script.contains(&name), "the {role} step names its container");
        }
        let target = ExecTarget {
            slurm_job_id: "7",
            job_id: ID,
            place: Place::Role(Role::Rollout, nodes(&["node3", "node4"])),
            pty: false,
            node_list: "node[1-4]",
            results_dir: "/r",
            image: "x",
        };
        let argv = exec_argv(&target, &["hostname".into()]).unwrap().join(" ");
        assert!(argv.contains("--nodelist=node3,node4 --nodes=2 --ntasks=2 --ntasks-per-node=1"), "{argv}");
        let shell = ExecTarget { pty: true, ..target };
        let argv = exec_argv(&shell, &["bash".into()]).unwrap().join(" ");
        assert!(argv.contains("--nodelist=node3 --nodes=1 --ntasks=1 --pty"), "{argv}");
    }

    #[test]
    fn the_script_keeps_our_guarantees() {
        let s = render(JobSpec { secret_env: vec!["HF_TOKEN".into()], ..cosmos_spec(TWO_AND_TWO) });
        assert!(!s.contains("set -x") && !s.starts_with("#!/bin/bash -x"), "no xtrace");
        assert!(!s.contains("mail-"), "mail only when asked");
        assert!(!s.contains("scancel"), "the job ends with the role's status, not CANCELLED");
        for line in [
            "#SBATCH --nodes=4",
            "#SBATCH --ntasks=4",
            "#SBATCH --gres=gpu:8",
            "#SBATCH --exclusive",
            "#SBATCH --mem=0",
        ] {
            assert!(s.lines().any(|l| l == line), "missing {line:?}");
        }
        assert_eq!(s.matches(" srun ").count(), 3);
        assert_eq!(
            s.matches("timeout --signal=TERM --kill-after=60 13680s srun").count(),
            3,
            "each step has the inner timeout"
        );
        assert_eq!(
            s.matches(",HF_TOKEN --container-name=").count(),
            3,
            "the secret reaches every step's container by name"
        );
        assert!(s.contains("exit \"$rc\""));
    }

    /// Stand-ins: `scontrol` knows four nodes; `srun` records its arguments and environment per role,
    /// then behaves as `STUB_<ROLE>` says (a shell snippet; default: exit 0).
    fn run(script: &str, behaviour: &[(&str, &str)]) -> (i32, String, tempfile::TempDir, Duration) {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let write_exe = |name: &str, body: &str| {
            let p = bin.join(name);
            std::fs::write(&p, format!("#!/bin/bash\n{body}\n")).unwrap();
            Command::new("chmod").arg("+x").arg(&p).status().unwrap();
        };
        let rec = dir.path().join("rec");
        std::fs::create_dir(&rec).unwrap();
        write_exe(
            "srun",
            &format!(
                "printf '%s\\n' \"$@\" > {r}/$COSMOS_NODE_ROLE.args; env > {r}/$COSMOS_NODE_ROLE.env\n\
                 exec 3>&2; for a in \"$@\"; do case $a in --error=*) e=${{a#--error=}}; exec 2>\"${{e//%t/0}}\";; esac; done\n\
                 v=STUB_${{COSMOS_NODE_ROLE^^}}\neval \"${{!v:-exit 0}}\"",
                r = rec.display()
            ),
        );
        write_exe(
            "scontrol",
            "if [ \"$1\" = show ]; then for i in $(seq \"${STUB_NODES:-4}\"); do echo \"node$i\"; done; else echo \"scontrol $*\" >&2; fi",
        );
        // `exec`: the script's kill reaches the stand-in srun itself.
        write_exe("timeout", "while [[ $1 == -* || $1 =~ ^[0-9]+s?$ ]]; do shift; done; exec \"$@\"");
        let script = script.replace("/lustre/alice", &dir.path().join("lustre").display().to_string());
        std::fs::create_dir_all(dir.path().join("lustre/slurm-logs/tao-job-x-77")).unwrap();
        std::fs::create_dir_all(dir.path().join("lustre/specs")).unwrap();
        // The staged specs file, as the submission leaves it (the script stops without it).
        std::fs::write(dir.path().join(format!("lustre/specs/{ID}.json")), "{}").unwrap();
        if !behaviour.iter().any(|(k, _)| *k == "no_config") {
            std::fs::write(dir.path().join(format!("lustre/specs/{ID}.cosmos-rl.toml")), TWO_AND_TWO).unwrap();
        }
        let path = dir.path().join("job.sbatch");
        std::fs::write(&path, script).unwrap();
        let mut cmd = Command::new("bash");
        cmd.arg(&path)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("SLURM_JOB_ID", "77")
            .env("SLURM_JOB_NAME", "tao-job-x")
            .env("SLURM_JOB_NODELIST", "node[1-4]");
        for (role, snippet) in behaviour {
            cmd.env(format!("STUB_{}", role.to_uppercase()), snippet);
        }
        let start = Instant::now();
        let out = cmd.output().unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned(), dir, start.elapsed())
    }

    fn recorded(dir: &Path, role: &str, what: &str) -> String {
        std::fs::read_to_string(dir.join("rec").join(format!("{role}.{what}"))).unwrap_or_default()
    }

    fn env_var(env: &str, name: &str) -> String {
        env.lines().find_map(|l| l.strip_prefix(&format!("{name}="))).unwrap_or("<unset>").to_string()
    }

    #[test]
    fn each_role_runs_on_its_nodes_with_its_environment() {
        let (rc, err, dir, _) = run(&render(cosmos_spec(TWO_AND_TWO)), &[]);
        assert_eq!(rc, 0, "{err}");
        let args = |role: &str| recorded(dir.path(), role, "args");
        assert!(args("controller").contains("--overlap\n--nodes=1\n--ntasks=1\n"), "{}", args("controller"));
        assert!(args("controller").contains("--nodelist=node1\n"));
        assert!(args("policy").contains("--overlap\n--nodes=2\n--ntasks=2\n"));
        assert!(args("policy").contains("--nodelist=node1,node2\n"));
        assert!(!args("rollout").contains("--overlap"));
        assert!(args("rollout").contains("--nodelist=node3,node4\n"));
        let logs = dir.path().join("lustre/slurm-logs/tao-job-x-77");
        assert!(args("rollout").contains(&format!("--output={}/rollout/%t.out\n", logs.display())));
        for role in ["controller", "policy", "rollout"] {
            assert!(logs.join(role).is_dir(), "{role} log directory made before the steps");
            let env = recorded(dir.path(), role, "env");
            assert_eq!(env_var(&env, "COSMOS_NODE_ROLE"), role);
            assert_eq!(env_var(&env, "CONTROLLER_NODE"), "node1");
            assert_eq!(env_var(&env, "COSMOS_CONTROLLER_HOST"), "node1:8082");
            assert_eq!(env_var(&env, "POLICY_NODES"), "node1 node2");
            assert_eq!(env_var(&env, "ROLLOUT_NODES"), "node3 node4");
            assert_eq!(env_var(&env, "LOCAL_NODE_LIST"), if role == "rollout" { "node3 node4" } else { "node1 node2" });
            for (name, value) in [
                ("COSMOS_RL_MULTINODE", "1"),
                ("NUM_POLICY_NODES", "2"),
                ("NUM_ROLLOUT_NODES", "2"),
                ("TOTAL_NODES", "4"),
                ("CONTROLLER_PORT", "8082"),
            ] {
                assert_eq!(env_var(&env, name), value, "{role} {name}");
            }
            let meta: serde_json::Value = serde_json::from_str(&env_var(&env, "NODE_LAUNCH_METADATA_ROLLOUT")).unwrap();
            assert_eq!(meta[1]["colocation"][1]["rendezvous_port"], 29348);
        }
        assert!(!logs.join(FAILED_ROLE_FILE).exists(), "nothing failed");
    }

    #[test]
    fn the_first_failing_role_stops_the_others_and_gives_its_status() {
        let s = render(cosmos_spec(TWO_AND_TWO));
        let long = "exec sleep 30";
        // As srun reports it: task 1 exited 2, so task 0 was terminated and srun exits 143.
        let rollout = "echo 'CUDA out of memory' >&2; sleep 0.3; \
                       echo 'srun: error: node4: task 1: Exited with exit code 2' >&3; \
                       echo 'srun: error: node3: task 0: Terminated' >&3; exit 143";
        let (rc, err, dir, took) = run(&s, &[("controller", long), ("policy", long), ("rollout", rollout)]);
        assert_eq!(rc, 2, "{err}");
        assert!(took < Duration::from_secs(10), "the other roles were stopped, not waited for: {took:?}");
        let logs = dir.path().join("lustre/slurm-logs/tao-job-x-77");
        assert_eq!(std::fs::read_to_string(logs.join(FAILED_ROLE_FILE)).unwrap(), "rollout 2\n");
        assert!(err.contains("tao-slurm: the last lines of") && err.contains("CUDA out of memory"), "{err}");
        assert!(err.contains("tao-slurm: Cosmos-RL role rollout ended with exit code 2"), "{err}");
        assert!(err.contains("Cosmos-RL role rollout failed with exit code 2; the other roles were stopped"), "{err}");
        assert!(err.contains("role policy ended with exit code 143"), "policy got TERM: {err}");
        assert!(
            err.contains("srun: error: node4: task 1: Exited with exit code 2"),
            "srun's messages reach main.err: {err}"
        );

        // The controller failing alone: its status, its name.
        let (rc, err, dir, _) = run(&s, &[("controller", "exit 7"), ("policy", long), ("rollout", long)]);
        assert_eq!(rc, 7, "{err}");
        let logs = dir.path().join("lustre/slurm-logs/tao-job-x-77");
        assert_eq!(std::fs::read_to_string(logs.join(FAILED_ROLE_FILE)).unwrap(), "controller 7\n");

        // Roles that end well at different times: success.
        let (rc, err, _, _) = run(&s, &[("controller", "sleep 1.5"), ("rollout", "sleep 0.5")]);
        assert_eq!(rc, 0, "{err}");
    }

    #[test]
    fn a_missing_config_stops_the_job_before_any_step() {
        let (rc, err, dir, _) = run(&render(cosmos_spec(TWO_AND_TWO)), &[("no_config", "")]);
        assert_eq!(rc, EXIT_MISSING_CONFIG, "{err}");
        assert!(err.contains("the staged Cosmos-RL config") && err.contains("is missing"), "{err}");
        assert!(recorded(dir.path(), "controller", "args").is_empty(), "no step started");
    }

    #[test]
    fn a_role_timing_out_requeues_the_job_and_names_no_role() {
        let s = render(cosmos_spec(TWO_AND_TWO));
        let (rc, err, dir, _) =
            run(&s, &[("controller", "exec sleep 30"), ("policy", "exit 124"), ("rollout", "exec sleep 30")]);
        assert_eq!(rc, 0, "requeued: {err}");
        assert!(err.contains("scontrol requeue 77"), "{err}");
        assert!(!dir.path().join("lustre/slurm-logs/tao-job-x-77").join(FAILED_ROLE_FILE).exists());
    }

    #[test]
    fn role_commands_reach_srun_word_for_word() {
        let nasty = vec!["echo".to_string(), "$(touch /tmp/x)".into(), "a'b".into(), "`id`".into(), "; exit 9".into()];
        let spec = JobSpec {
            cosmos_rl: Some(CosmosRlSpec {
                config_text: Some(TWO_AND_TWO.into()),
                commands: RoleCommands { rollout: nasty.clone(), ..RoleCommands::default() },
                ..CosmosRlSpec::default()
            }),
            ..cosmos_spec(TWO_AND_TWO)
        };
        let (rc, err, dir, _) = run(&render(spec), &[]);
        assert_eq!(rc, 0, "{err}");
        let words = |role: &str| -> Vec<String> {
            let args = recorded(dir.path(), role, "args");
            let all: Vec<String> = args.lines().map(String::from).collect();
            let at = all.iter().position(|a| a == "tao-task").expect("the prelude's $0");
            all[at + 1..].to_vec()
        };
        assert_eq!(words("rollout"), nasty);
        assert_eq!(words("policy"), vec!["python", "-m", "nvidia_tao_core.entrypoint"]);
    }

    #[test]
    fn the_failed_role_file_becomes_evidence() {
        assert_eq!(
            failed_role_evidence("rollout 2\n").as_deref(),
            Some("Cosmos-RL role rollout failed with exit code 2")
        );
        for bad in ["", "rollout", "trainer 2", "policy two", "$(id) 1"] {
            assert_eq!(failed_role_evidence(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn sft_jobs_have_no_rollout_step() {
        let s = render(cosmos_spec(SFT));
        assert_eq!(s.matches(" srun ").count(), 2);
        let (rc, err, dir, _) = run(&s, &[("nodes", "1")]);
        assert_eq!(rc, 0, "{err}");
        let env = recorded(dir.path(), "policy", "env");
        assert_eq!(env_var(&env, "POLICY_NODES"), "node1");
        assert_eq!(env_var(&env, "NUM_ROLLOUT_NODES"), "0");
        assert_eq!(env_var(&env, "ROLLOUT_NODES"), "");
        assert_eq!(env_var(&env, "NODE_LAUNCH_METADATA_ROLLOUT"), "[]");
        assert!(recorded(dir.path(), "rollout", "args").is_empty());
    }
}
