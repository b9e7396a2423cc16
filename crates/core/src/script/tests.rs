use super::*;
use crate::plan::resolve_with_id;
use crate::plan::tests::{settings, spec};
use crate::spec::JobSpec;
use std::process::Command;

const ID: &str = "00000000-0000-4000-8000-000000000001";

fn plan(spec: JobSpec) -> Plan {
    resolve_with_id(&spec, &settings(), ID).unwrap()
}

fn bash_n(script: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sh");
    std::fs::write(&path, script).unwrap();
    let out = Command::new("bash").arg("-n").arg(&path).output().unwrap();
    assert!(out.status.success(), "bash -n: {}\n{script}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn two_nodes_of_eight() {
    let p = plan(JobSpec { gpus: Some(8), nodes: Some(2), ..spec() });
    let s = render_batch_script(&p);
    bash_n(&s);
    for line in [
        "#SBATCH --job-name=tao-job-00000000-0000-4000-8000-000000000001",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --ntasks=2",
        "#SBATCH --gres=gpu:8",
        "#SBATCH --exclusive",
        "#SBATCH --wait-all-nodes=1",
        "#SBATCH --cpus-per-task=16",
        "#SBATCH --time=04:00:00",
        "#SBATCH --partition=polar,polar3,polar4,grizzly",
        "#SBATCH --output=/lustre/alice/slurm-logs/.%x-%j.out",
        "#SBATCH --error=/lustre/alice/slurm-logs/.%x-%j.err",
        "#SBATCH --open-mode=append",
        "#SBATCH --requeue",
        "export WORLD_SIZE=2 NUM_GPU_PER_NODE=8 MASTER_PORT=29500 MASTER_ADDR",
        "export TAO_API_RESULTS_DIR=/lustre/alice/results",
        "exit \"$rc\"",
    ] {
        assert!(s.lines().any(|l| l == line), "missing line {line:?} in\n{s}");
    }
    assert!(s.contains("timeout --signal=TERM --kill-after=60 13680s srun"));
    assert!(s.contains(
        "--container-env=TAO_API_RESULTS_DIR,TAO_JOB_ID,TAO_SPECS_FILE,TAO_API_JOB_ID,TAO_RESULTS_ROOT,HF_HOME,PYTHONNOUSERSITE,PYTHONDONTWRITEBYTECODE,TAO_RESUME_CHECKPOINT,WORLD_SIZE,NUM_GPU_PER_NODE,MASTER_ADDR,MASTER_PORT"
    ));
    // What TAO's containers read: the job id under both names, the results root, the TAO SDK's defaults.
    assert!(s.lines().any(|l| l == "export TAO_API_JOB_ID=\"$TAO_JOB_ID\" TAO_RESULTS_ROOT=\"$TAO_API_RESULTS_DIR\""));
    assert!(s
        .lines()
        .any(|l| l == "export HF_HOME=/lustre/alice/.cache/huggingface PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1"));
    assert!(!s.contains("set -x"));
}

#[test]
fn single_node_unsets_rendezvous_and_has_no_ntasks() {
    let p = plan(JobSpec { gpus: Some(1), ..spec() });
    let s = render_batch_script(&p);
    bash_n(&s);
    assert!(s.contains("#SBATCH --gres=gpu:1\n"));
    assert!(!s.contains("--exclusive"));
    assert!(!s.contains("--ntasks=1"));
    assert!(!s.contains("export WORLD_SIZE"));
    assert!(s.contains("unset WORLD_SIZE NODE_RANK"));
}

#[test]
fn cpu_only_job_has_no_gres() {
    let s = render_batch_script(&plan(JobSpec { gpus: Some(0), ..spec() }));
    bash_n(&s);
    assert!(!s.contains("--gres"));
    assert!(!s.contains("--exclusive"));
}

/// Run the script under bash with stand-ins for srun, scontrol and timeout, and return (exit code,
/// what srun received one argument per line, stderr).
fn run_with_stubs(script: &str, srun_body: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let write_exe = |name: &str, body: &str| {
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/bash\n{body}\n")).unwrap();
        Command::new("chmod").arg("+x").arg(&p).status().unwrap();
    };
    let argfile = dir.path().join("srun-args");
    write_exe("srun", &format!("printf '%s\\n' \"$@\" > {}\n{srun_body}", argfile.display()));
    write_exe("scontrol", "if [ \"$1\" = show ]; then echo nodeA; echo nodeB; else echo \"scontrol $*\" >&2; fi");
    write_exe("timeout", "shift 3; \"$@\"");
    let script = script.replace("/lustre/alice", &dir.path().join("lustre").display().to_string());
    // The submission stages the specs file before the job starts; the script stops without it.
    if let Some(line) = script.lines().find_map(|l| l.strip_prefix("export TAO_SPECS_FILE=")) {
        let specs = std::path::PathBuf::from(line.trim_matches('\''));
        std::fs::create_dir_all(specs.parent().unwrap()).unwrap();
        std::fs::write(&specs, "{}").unwrap();
    }
    // The attempt's log directory, which the submission makes before the job starts.
    std::fs::create_dir_all(dir.path().join("lustre/slurm-logs/tao-job-x-77")).unwrap();
    let path = dir.path().join("job.sbatch");
    std::fs::write(&path, script).unwrap();
    let out = Command::new("bash")
        .arg(&path)
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("SLURM_JOB_ID", "77")
        .env("SLURM_JOB_NAME", "tao-job-x")
        .env("SLURM_JOB_NODELIST", "node[A-B]")
        .output()
        .unwrap();
    // srun's arguments as the plan wrote them (the run's paths were moved into the temporary dir).
    let args = std::fs::read_to_string(&argfile)
        .unwrap_or_default()
        .replace(&dir.path().join("lustre").display().to_string(), "/lustre/alice");
    (out.status.code().unwrap_or(-1), args, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn exit_status_is_the_container_steps() {
    let s = render_batch_script(&plan(spec()));
    assert_eq!(run_with_stubs(&s, "exit 3").0, 3);
    assert_eq!(run_with_stubs(&s, "exit 0").0, 0);
}

#[test]
fn a_multi_node_job_ends_with_the_failing_tasks_status_not_its_siblings_sigterm() {
    let s = render_batch_script(&plan(JobSpec { nodes: Some(2), gpus: Some(8), ..spec() }));
    // srun ends 143 (a sibling's SIGTERM); its own message names the failing task's status. What a
    // task prints goes to main.err, not through srun's standard error, so it cannot pose as that.
    let (rc, _, err) = run_with_stubs(
        &s,
        "echo 'srun: error: nodeA: task 0: Terminated' >&2; echo 'srun: error: nodeB: task 1: Exited with exit code 2' >&2; exit 143",
    );
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("task 1: Exited with exit code 2"), "srun's messages reach main.err: {err}");
    // A timeout stays a timeout (it requeues), and a plain failure keeps its status.
    assert_eq!(run_with_stubs(&s, "echo 'srun: error: nodeB: task 1: Exited with exit code 2' >&2; exit 124").0, 0);
    assert_eq!(run_with_stubs(&s, "exit 5").0, 5);
}

#[test]
fn a_job_never_runs_without_its_secrets_file() {
    // The stand-in tree has no secrets file: the script stops before srun, naming the file.
    let s = render_batch_script(&plan(JobSpec { secret_env: vec!["HF_TOKEN".into()], ..spec() }));
    let (rc, args, err) = run_with_stubs(&s, "exit 0");
    assert_eq!(rc, EXIT_MISSING_FILE, "{err}");
    assert!(args.is_empty(), "srun ran without the secrets");
    assert!(err.contains("secrets file") && err.contains("/secrets/") && err.contains("HF_TOKEN"), "{err}");
}

#[test]
fn timeout_requeues_until_the_cap() {
    let s = render_batch_script(&plan(JobSpec { max_timeout_requeues: Some(1), ..spec() }));
    // The counter lives in the results dir of the temp tree, so it persists across the two runs only
    // within one temp dir: run both in the same tree by reusing the stub runner's logic inline.
    let (rc, _, err) = run_with_stubs(&s, "exit 124");
    assert_eq!(rc, 0, "first timeout requeues: {err}");
    assert!(err.contains("scontrol requeue 77"), "{err}");
}

#[test]
fn srun_gets_exactly_the_command_words() {
    let nasty = vec!["echo".to_string(), "$(touch /tmp/x)".into(), "a'b".into(), "`id`".into(), "x\ny".into()];
    let p = plan(JobSpec { command: nasty.clone(), ..spec() });
    let s = render_batch_script(&p);
    bash_n(&s);
    let (rc, args, _) = run_with_stubs(&s, "exit 0");
    assert_eq!(rc, 0);
    let args: Vec<&str> = args.trim_end_matches('\n').split('\n').collect();
    let dash = args.iter().position(|a| *a == "--").unwrap();
    assert_eq!(&args[dash + 1..dash + 3], &["sh", "-c"]);
    assert_eq!(args[dash + 4], "tao-task");
    let tail: Vec<String> = args[dash + 5..].iter().map(|s| s.to_string()).collect();
    // "x\ny" arrives as two lines of the arg file: rejoin the last two.
    assert_eq!(tail[..4], nasty[..4]);
    assert_eq!(format!("{}\n{}", tail[4], tail[5]), nasty[4]);
    assert!(args.contains(&"--container-image=ubuntu:22.04"));
    let specs = format!("/lustre/alice/specs/{}.json", p.layout.job_id);
    assert!(args.contains(&format!("--container-mounts=/lustre,{specs}:{specs}:ro").as_str()), "{args:?}");
}

/// Golden scripts for typical jobs: any change to the rendered text shows up as a diff here.
/// Regenerate with `UPDATE_GOLDEN=1 cargo test golden`.
#[test]
fn golden_scripts() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let cases: Vec<(&str, JobSpec)> = vec![
        ("one_gpu", JobSpec { gpus: Some(1), ..spec() }),
        ("eight_gpus_one_node", JobSpec { gpus: Some(8), ..spec() }),
        (
            "two_nodes_of_eight",
            JobSpec {
                image: "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt".into(),
                nodes: Some(2),
                gpus: Some(8),
                command: vec!["train".into(), "--epochs".into(), "10".into()],
                ..spec()
            },
        ),
        ("cpu_only", JobSpec { gpus: Some(0), cpus_per_task: Some(4), memory: Some("8G".into()), ..spec() }),
        ("sqsh_image", JobSpec { image: "/lustre/images/tao.sqsh".into(), ..spec() }),
        (
            "docker_hub_image",
            JobSpec {
                image: "nvidia/cuda:12.4.1-base".into(),
                shell: true,
                command: vec!["nvidia-smi && echo done".into()],
                ..spec()
            },
        ),
        (
            "with_secrets",
            JobSpec {
                secret_env: vec!["NGC_KEY".into(), "HF_TOKEN".into()],
                env: [("EXPERIMENT".to_string(), "it's \"quoted\"".to_string())].into(),
                account: Some("research".into()),
                partition: Some("long".into()),
                time_hours: Some(30.0),
                timeout_hours: Some(29.5),
                sbatch_options: [("mail-type".to_string(), "END,FAIL".to_string())].into(),
                ..spec()
            },
        ),
    ];
    let update = std::env::var("UPDATE_GOLDEN").is_ok();
    for (name, spec) in cases {
        let script = render_batch_script(&plan(spec));
        bash_n(&script);
        let path = dir.join(format!("{name}.sbatch"));
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &script).unwrap();
        }
        let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(script, want, "golden {name} differs; rerun with UPDATE_GOLDEN=1 if the change is intended");
    }
}

mod injection {
    //! Arbitrary text in every free-text field is either rejected or inert: the script parses, and run
    //! under bash with stand-in srun/scontrol it runs only the intended command.
    use super::*;
    use proptest::prelude::*;

    const PAYLOADS: &[&str] = &[
        "$(touch @C@)",
        "`touch @C@`",
        "'; touch @C@; '",
        "\"; touch @C@; \"",
        "\ntouch @C@\n",
        "${IFS}touch${IFS}@C@",
        "; touch @C@",
        "| touch @C@",
        "&& touch @C@",
        "#\ntouch @C@",
        "\\'$(touch @C@)",
        "\r\ntouch @C@",
        "ü; touch @C@",
    ];

    fn field_text() -> impl Strategy<Value = String> {
        (any::<String>(), proptest::sample::select(PAYLOADS), "[ -~]{0,6}")
            .prop_map(|(noise, payload, tail)| format!("{}{payload}{tail}", noise.chars().take(4).collect::<String>()))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn every_field_is_rejected_or_inert(texts in proptest::collection::vec(field_text(), 10)) {
            let dir = tempfile::tempdir().unwrap();
            let canary = dir.path().join("canary");
            let t: Vec<String> = texts.iter().map(|s| s.replace("@C@", &canary.display().to_string())).collect();
            let candidates: Vec<JobSpec> = vec![
                JobSpec { command: vec!["echo".into(), t[0].clone(), t[1].clone()], ..spec() },
                JobSpec { shell: true, command: vec![format!("echo {}", crate::script::shell::quote(&t[2]))], ..spec() },
                JobSpec { env: [("FOO".to_string(), t[3].clone())].into(), ..spec() },
                JobSpec { partition: Some(t[4].clone()), ..spec() },
                JobSpec { account: Some(t[5].clone()), ..spec() },
                JobSpec { mounts: vec![t[6].clone()], ..spec() },
                JobSpec { container_workdir: Some(format!("/w{}", t[7])), ..spec() },
                JobSpec { image: t[8].clone(), ..spec() },
                JobSpec { constraint: Some(t[9].clone()), name: Some(t[9].clone()), ..spec() },
                JobSpec { inputs: [("model.x".to_string(), format!("s3://b/{}", t[0]))].into(), ..spec() },
                JobSpec { inputs: [("model.y".to_string(), format!("hf_model://{}", t[1]))].into(), ..spec() },
            ];
            for spec in candidates {
                let Ok(p) = resolve_with_id(&spec, &settings(), ID) else { continue };
                let script = render_batch_script(&p);
                bash_n(&script);
                let (rc, args, err) = run_with_stubs(&script, "exit 0");
                prop_assert_eq!(rc, 0, "{}", err);
                prop_assert!(!canary.exists(), "injected code ran for {:?}", spec);
                // srun received exactly the intended command after the prelude.
                let srun = srun_argv(&p);
                prop_assert_eq!(args, srun[1..].iter().map(|a| format!("{a}\n")).collect::<String>());
            }
        }
    }
}

/// A GPU job samples its GPUs beside its step on every node (and stops with it); a job on no GPU, or
/// one that asks for no sampling, does not.
#[test]
fn the_gpu_sampler_runs_beside_the_step_of_a_gpu_job() {
    let watch = crate::gpu::GpuWatchSpec { sample_secs: Some(15), ..Default::default() };
    let p = plan(JobSpec { nodes: Some(2), gpus: Some(8), gpu_watch: Some(watch.clone()), ..spec() });
    let s = render_batch_script(&p);
    bash_n(&s);
    let start = s.find("srun --overlap --nodes=2 --ntasks=2 --ntasks-per-node=1").expect("the sampler's step");
    let step = s.find("--container-image=").unwrap();
    let stop = s.find("kill \"${tao_gpu:-}\"").expect("the sampler is stopped");
    assert!(start < step && step < stop, "{s}");
    assert!(
        s.contains(&format!("{}/{}", p.layout.results_dir(), crate::gpu::SAMPLE_DIR))
            && s.contains(" 15 5 60 </dev/null"),
        "{s}"
    );
    let cpu = plan(JobSpec { gpus: Some(0), gpu_watch: Some(watch), ..spec() });
    assert!(!render_batch_script(&cpu).contains("tao-gpu"));
    let off = plan(JobSpec {
        gpus: Some(8),
        gpu_watch: Some(crate::gpu::GpuWatchSpec { sample_secs: Some(0), ..Default::default() }),
        ..spec()
    });
    assert!(!render_batch_script(&off).contains("tao-gpu"));
    let e = crate::plan::resolve_with_id(
        &JobSpec {
            gpu_watch: Some(crate::gpu::GpuWatchSpec { idle_percent: Some(101), ..Default::default() }),
            ..spec()
        },
        &crate::fixtures::settings(),
        "x",
    )
    .unwrap_err();
    assert_eq!(e.field, "gpu_watch.idle_percent");
}

/// The batch script's first step names the files Slurm opened in the logs root main.out and main.err
/// of the attempt's log directory: the same files (what Slurm wrote before and writes after is
/// there), an array task's directory named as Slurm names its files, a requeued run's links kept, and
/// a directory that cannot be made said, with where the logs are.
#[test]
fn the_first_step_links_slurms_files_into_the_log_directory() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings();
    s.base_results_dir = Some(dir.path().join("base").display().to_string());
    let p = crate::plan::resolve_with_id(&spec(), &s, "00000000-0000-4000-8000-000000000009").unwrap();
    let logs = p.layout.logs_root();
    std::fs::create_dir_all(&logs).unwrap();
    let mut step = String::new();
    write_log_links(&mut step, &p);
    let run = |env: &[(&str, &str)]| {
        let out =
            Command::new("bash").arg("-c").arg(format!("set -u\n{step}")).envs(env.iter().copied()).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for (env, (name, id)) in [
        (vec![("SLURM_JOB_NAME", "tao-job-x"), ("SLURM_JOB_ID", "77")], ("tao-job-x", "77")),
        (
            vec![
                ("SLURM_JOB_NAME", "tao-sweep-s"),
                ("SLURM_JOB_ID", "73"),
                ("SLURM_ARRAY_JOB_ID", "70"),
                ("SLURM_ARRAY_TASK_ID", "3"),
            ],
            ("tao-sweep-s", "70_3"),
        ),
    ] {
        let (out, err) = (p.layout.slurm_output(name, id, "out"), p.layout.slurm_output(name, id, "err"));
        std::fs::write(&out, "before the script\n").unwrap();
        std::fs::write(&err, "").unwrap();
        for _run in 0..2 {
            let (ok, stderr) = run(&env);
            assert!(ok && stderr.is_empty(), "{stderr}");
        }
        let log_dir = format!("{logs}/{name}-{id}");
        let mut f = std::fs::OpenOptions::new().append(true).open(&out).unwrap();
        std::io::Write::write_all(&mut f, b"after\n").unwrap();
        assert_eq!(std::fs::read_to_string(format!("{log_dir}/main.out")).unwrap(), "before the script\nafter\n");
        for (slurm, main) in [(&out, "main.out"), (&err, "main.err")] {
            let (a, b) = (std::fs::metadata(slurm).unwrap(), std::fs::metadata(format!("{log_dir}/{main}")).unwrap());
            assert_eq!((a.dev(), a.ino()), (b.dev(), b.ino()), "{main} is Slurm's file");
        }
    }
    // A file where the log directory goes: the job runs on, and says where its logs are.
    std::fs::write(format!("{logs}/tao-job-x-78"), "").unwrap();
    let (ok, stderr) = run(&[("SLURM_JOB_NAME", "tao-job-x"), ("SLURM_JOB_ID", "78")]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("cannot name this job's logs") && stderr.contains("/.tao-job-x-78.out"), "{stderr}");
}

/// TAO's entrypoint (what NVIDIA's AutoML runner submits: about 92 KB, one line of 82 KB, a literal
/// `{config_path}` for the entrypoint to fill) is staged as a file and sourced, never put on a command
/// line; a short shell command stays as it was.
#[test]
fn a_long_shell_command_is_staged_as_a_file_and_sourced_never_argv() {
    let line = "A".repeat(82 * 1024);
    let text = format!(
        "set -euo pipefail\necho '{line}' >/dev/null\necho \"0=$0 1=${{1:-}} cfg={{config_path}}\"\n{}",
        "true\n".repeat(2000)
    );
    assert!(text.len() > 90 * 1024);
    let p = plan(JobSpec { command: vec![text.clone()], shell: true, ..spec() });
    let script = render_batch_script(&p);
    assert!(!script.contains(&line), "the command is not in the batch script");
    assert!(script.len() < 32 * 1024, "{} bytes", script.len());
    let file = p.layout.command_file();
    assert!(script.contains(&format!("bash -c '. {file}'")), "{script}");
    let staged = staged_files(&p, &serde_json::json!({}), "alice", &["login".into()]);
    let staged: Vec<&StagedFile> = staged.iter().filter(|f| f.path == file).collect();
    assert_eq!(staged.len(), 1);
    assert_eq!(staged[0].contents, text, "staged as given: {{config_path}} left for the entrypoint");
    // Sourced, it runs as `bash -c TEXT` would: the same $0 and arguments, the same exit status.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("command.sh");
    std::fs::write(&f, &text).unwrap();
    let run = |argv: &[&str]| {
        let out = std::process::Command::new("bash").args(argv).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let sourced = format!(". {}", f.display());
    assert_eq!(run(&["-c", &sourced, "x", "y"]), run(&["-c", &text, "x", "y"]));
    assert_eq!(run(&["-c", &sourced, "x", "y"]).1, "0=x 1=y cfg={config_path}\n");
    // A short one is not staged.
    let short = plan(JobSpec { command: vec!["echo hi".into()], shell: true, ..spec() });
    assert!(render_batch_script(&short).contains("bash -c 'echo hi'"));
    assert!(staged_files(&short, &serde_json::json!({}), "alice", &["login".into()])
        .iter()
        .all(|f| !f.path.ends_with(".command.sh")));
}

/// Every placement field a job sets reaches the batch script as its `#SBATCH` directive (a field
/// added to `spec::Placement` fails here until the plan and the script carry it).
#[test]
fn every_placement_field_is_a_directive_of_the_script() {
    let mut fields = serde_json::Map::new();
    for f in crate::spec::placement_fields() {
        let value = match *f {
            "cpus_per_task" => serde_json::json!(3),
            "memory" => serde_json::json!("64G"),
            _ => serde_json::json!("node7"),
        };
        fields.insert(f.to_string(), value);
    }
    let placement: crate::spec::Placement = serde_json::from_value(serde_json::Value::Object(fields.clone())).unwrap();
    let s = render_batch_script(&plan(JobSpec { image: spec().image, command: spec().command, ..placement.spec() }));
    for (f, v) in &fields {
        let option = if f == "memory" { "mem".to_string() } else { f.replace('_', "-") };
        let value = v.as_str().map_or(v.to_string(), str::to_string);
        assert!(s.contains(&format!("\n#SBATCH --{option}={value}\n")), "no --{option}={value} for {f}:\n{s}");
    }
}
