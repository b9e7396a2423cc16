//! `tao_slurm._native`: the tao-slurm engine for the Python package `tao_slurm` (see
//! `python/tao_slurm/`). Thin on purpose: every call is one engine call through the public
//! [`tao_slurm_engine::Client`] API, run with the GIL released, its result handed over as JSON text that the
//! Python side turns into the TAO SDK's shapes. Errors become the exception classes of
//! `tao_slurm.errors`, one per class of the engine's error, with the engine's message unchanged.

use pyo3::prelude::*;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use tao_slurm_engine::client::{
    Client, FollowCursor, JobFilter, PathCheck, PreviewChecks, Secrets, Stream, Submission, SubmitOptions,
};
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::{Error, ErrorKind};
use tao_slurm_engine::spec::{JobSpec, SecretValues, SpecError};
use tao_slurm_engine::status::PlatformStatus;

/// Idle clients kept for the next calls (each holds a state-file connection and a warm shell on
/// the login host's shared SSH master); more concurrent calls open extra ones, dropped afterwards.
const MAX_IDLE: usize = 4;

/// The engine for one `SlurmSDK`: its settings and a pool of clients, so calls from several Python
/// threads (the monitor thread included) run side by side instead of queueing on one client.
#[pyclass(module = "tao_slurm._native", frozen)]
struct Engine {
    settings: Settings,
    idle: Mutex<Vec<Client>>,
    /// The monitor thread's memory between steps.
    monitor: Mutex<tao_slurm_engine::client::Monitor>,
}

/// The Python exception for an engine error: its class, its message unchanged, its CLI exit code,
/// and for a job spec error the field it names.
/// The job tao_slurm's JSON of `create_job`'s keywords describes: a value of the wrong type is a
/// `JobSpecError` naming its field (the keywords other than the TAO SDK's pass through as given).
fn spec_of(py: Python<'_>, spec_json: &str) -> PyResult<JobSpec> {
    let mut json = serde_json::Deserializer::from_str(spec_json);
    serde_path_to_error::deserialize(&mut json).map_err(|e| {
        let field = e.path().to_string();
        to_py(py, SpecError::new(&field, format!("{} (as a job file takes it)", e.inner())).into())
    })
}

fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let errors = py.import("tao_slurm.errors")?;
        let class = errors.getattr(e.kind().python_exception())?;
        let instance = class.call1((e.to_string(),))?;
        instance.setattr("exit_code", e.exit_code())?;
        if let Error::Spec(s) = &e {
            instance.setattr("field", s.field.clone())?;
        }
        Ok(PyErr::from_value(instance))
    };
    build().unwrap_or_else(|import_error| import_error)
}

/// One URI's answer from `check_paths`: the URI, whether it exists (None: not a shared path), and
/// why it was refused.
type PathAnswer = (String, Option<bool>, Option<String>);

/// Set by the interpreter's `atexit` (see [`interpreter_exiting`]): Python is about to finalise.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Engine calls that ended before [`EXITING`] was seen and are taking the GIL back.
static RETURNING: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// True on the thread that runs `atexit`, the one that finalises: it is never ended.
    static FINALISER: Cell<bool> = const { Cell::new(false) };
}

/// Called by `atexit` (registered at import): from now on, engine calls on other threads never take
/// the GIL back. Python up to 3.13 ends a thread that takes it during finalisation with
/// `pthread_exit`, whose unwinding through the extension's frames aborts the process ("FATAL:
/// exception not rethrown") after the program's last line. The calls already taking it back are
/// given it here, before finalisation begins (at most a second, so a stuck one cannot hang the exit).
#[pyfunction]
fn interpreter_exiting(py: Python<'_>) {
    FINALISER.with(|f| f.set(true));
    EXITING.store(true, Ordering::SeqCst);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while RETURNING.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < until {
        py.detach(|| std::thread::sleep(std::time::Duration::from_millis(1)));
    }
}

/// Run `f` with the GIL released. A thread whose call ends once the interpreter is exiting parks
/// for good instead of taking the GIL back (what Python 3.14 does itself); the process's exit ends it.
fn detached<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    let result = py.detach(|| {
        let result = f();
        // Counted before the flag is read, and the flag set before the count is read (both SeqCst):
        // either this thread parks, or `interpreter_exiting` waits until it holds the GIL again.
        RETURNING.fetch_add(1, Ordering::SeqCst);
        if EXITING.load(Ordering::SeqCst) && !FINALISER.with(Cell::get) {
            RETURNING.fetch_sub(1, Ordering::SeqCst);
            loop {
                std::thread::park();
            }
        }
        result
    });
    RETURNING.fetch_sub(1, Ordering::SeqCst);
    result
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("engine values serialise")
}

impl Engine {
    /// Run `f` with a pooled client, the GIL released for its whole duration.
    fn with<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&Client) -> Result<T, Error> + Send) -> PyResult<T> {
        let outcome = detached(py, || {
            let reused = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let client = match reused {
                Some(c) => c,
                None => Client::new(self.settings.clone())?,
            };
            let result = f(&client);
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            if idle.len() < MAX_IDLE {
                idle.push(client);
            }
            result
        });
        outcome.map_err(|e| to_py(py, e))
    }
}

#[pymethods]
impl Engine {
    /// Read the settings as the CLI does (flags > environment > env file > defaults, the TAO SDK's
    /// names included), with `state_path` as the state file when given. Raises `CredentialError`
    /// when SLURM_USER/SLURM_HOSTNAME (or SSH_USER/SSH_HOST) are missing, as the TAO SDK does.
    #[new]
    #[pyo3(signature = (state_path=None, env_file=None))]
    fn new(py: Python<'_>, state_path: Option<String>, env_file: Option<String>) -> PyResult<Engine> {
        let mut flags = HashMap::new();
        if let Some(p) = state_path {
            flags.insert("TAO_SLURM_STATE".to_string(), p);
        }
        let settings = tao_slurm_engine::config::gather(flags, env_file.as_deref().map(std::path::Path::new))
            .and_then(|s| Settings::from_sources(&s))
            .map_err(|e| to_py(py, e.into()))?;
        settings.require_remote().map_err(|e| to_py(py, e.into()))?;
        let monitor = Mutex::new(tao_slurm_engine::client::Monitor::new(&settings));
        let engine = Engine { settings, idle: Mutex::new(Vec::new()), monitor };
        // Opening the state file now reports a bad path here rather than at the first call.
        engine.with(py, |_| Ok(()))?;
        Ok(engine)
    }

    /// A few settings the Python side needs, as JSON.
    fn settings_json(&self) -> String {
        let s = &self.settings;
        json(&serde_json::json!({
            "max_gpus_per_node": s.max_gpus_per_node,
            "max_queries_per_minute": s.max_queries_per_minute,
            "base_dir": s.base_dir(),
            "state_path": s.state_path.display().to_string(),
            "slurm_user": s.slurm_user,
            "partition": s.partition,
            "account": s.account,
            "time_hours": s.time_hours,
            "timeout_hours": s.timeout_hours,
            "cpus_per_task": s.cpus_per_task,
            "max_cpus_per_task": s.max_cpus_per_task,
            "use_requeue": s.use_requeue,
            "use_timeout": s.use_timeout,
            "use_srun_logs": s.use_srun_logs,
            "use_sqsh": s.use_sqsh,
            "container_mounts": s.container_mounts,
            "mail_user": s.mail_user,
        }))
    }

    /// Validate, record, stage and submit a job (`spec_json` is a JobSpec); `secrets` holds the
    /// values of the spec's `secret_env` names that the caller gave (the others come from the
    /// environment). Returns the job as stored (JSON). An error raised once the job is recorded
    /// carries its id as `tao_job_id` (what NVIDIA's AutoML runner cancels and polls): a submission
    /// whose outcome is unknown may have started it; a refused one is kept, ended Error.
    fn create_job(&self, py: Python<'_>, spec_json: &str, secrets: BTreeMap<String, String>) -> PyResult<String> {
        let spec = spec_of(py, spec_json)?;
        let recorded: Mutex<Option<String>> = Mutex::new(None);
        let result = self.with(py, |c| {
            let values = SecretValues::resolve(&spec.secret_env, &secrets, &|n| std::env::var(n).ok())?;
            let note =
                |id: &str, _: &[String]| *recorded.lock().unwrap_or_else(|e| e.into_inner()) = Some(id.to_string());
            let opts = SubmitOptions { recorded: Some(&note), ..SubmitOptions::with_values(values) };
            let outcome = c.submit(&spec, opts)?;
            // The stored job with what the submission warned of (shown by `warnings.warn`).
            let mut view = serde_json::to_value(&c.stored_jobs(&[outcome.submission.first_job().to_string()])?[0])
                .expect("a view serialises");
            view["warnings"] = serde_json::json!(outcome.warnings);
            Ok(view.to_string())
        });
        result.inspect_err(|e| {
            if let Some(id) = recorded.into_inner().unwrap_or_else(|e| e.into_inner()) {
                // An attribute the error classes allow (they are plain exceptions).
                let _ = e.value(py).setattr("tao_job_id", id);
            }
        })
    }

    /// What a submit of `spec_json` would do, without doing it (the client's one preview, as the
    /// CLI's `submit --dry-run` and MCP's `dry_run` show it); `online`: a submit's checks with the
    /// cluster too. Returns JSON: job_id, plan, files (path, contents), warnings, variants, array, steps.
    #[pyo3(signature = (spec_json, secrets, online))]
    fn preview(
        &self,
        py: Python<'_>,
        spec_json: &str,
        secrets: BTreeMap<String, String>,
        online: bool,
    ) -> PyResult<String> {
        let spec = spec_of(py, spec_json)?;
        self.with(py, move |c| {
            let checks = if online {
                let values = SecretValues::resolve(&spec.secret_env, &secrets, &|n| std::env::var(n).ok())?;
                PreviewChecks::Online(Secrets::Values(values))
            } else {
                PreviewChecks::Offline
            };
            let p = c.preview(&spec, checks)?;
            Ok(json(&serde_json::json!({
                "job_id": p.plan.layout.job_id,
                "plan": p.plan,
                "files": p.files.iter().map(|f| serde_json::json!({"path": f.path, "contents": f.contents})).collect::<Vec<_>>(),
                "warnings": p.warnings,
                "variants": p.variants,
                "array": p.array,
                "steps": p.steps,
            })))
        })
    }

    /// Validate, record, stage and submit a sweep (`spec_json` is a JobSpec with a `sweep` section):
    /// one Slurm job array, each variant a job of its own. Returns the sweep (JSON: sweep_id,
    /// slurm_array_id, variants, and `jobs`, every variant as stored).
    fn create_sweep(&self, py: Python<'_>, spec_json: &str, secrets: BTreeMap<String, String>) -> PyResult<String> {
        let spec = spec_of(py, spec_json)?;
        self.with(py, move |c| {
            let values = SecretValues::resolve(&spec.secret_env, &secrets, &|n| std::env::var(n).ok())?;
            let outcome = c.submit(&spec, SubmitOptions::with_values(values))?;
            let Submission::Sweep(submitted) = &outcome.submission else {
                return Err(SpecError::new("sweep", "a sweep needs a sweep section").into());
            };
            let ids: Vec<String> = submitted.variants.iter().map(|v| v.job_id.clone()).collect();
            let mut out = serde_json::to_value(submitted).expect("serialisable");
            out["jobs"] = serde_json::to_value(c.stored_jobs(&ids)?).expect("serialisable");
            out["warnings"] = serde_json::json!(outcome.warnings);
            Ok(out.to_string())
        })
    }

    /// Refresh the given jobs (all active ones when empty) in one round trip, performing due
    /// retries. Returns the jobs (JSON list); with no ids, those that just ended are included.
    fn refresh(&self, py: Python<'_>, ids: Vec<String>) -> PyResult<String> {
        self.with(py, move |c| Ok(json(&c.refresh(&ids)?)))
    }

    /// One poll of the client's wait: refresh the jobs (one round trip) and say what changed after
    /// `cursor` (an event id; None: from now) and how long to sleep before the next poll (a fixed
    /// `interval_secs`, floored by the query budget, or the monitor's pace). Returns the tick (JSON:
    /// views, changes, cursor, all_terminal, paused, all_settled, pause).
    #[pyo3(signature = (ids, interval_secs=None, cursor=None))]
    fn wait_step(
        &self,
        py: Python<'_>,
        ids: Vec<String>,
        interval_secs: Option<f64>,
        cursor: Option<i64>,
    ) -> PyResult<String> {
        let interval = interval_secs.filter(|s| s.is_finite() && *s >= 0.0).map(std::time::Duration::from_secs_f64);
        self.with(py, move |c| {
            let wait = c.wait_start(&ids, cursor, interval)?;
            Ok(json(&c.wait_step(&wait)?))
        })
    }

    /// The jobs as the state file holds them (no remote call).
    fn stored(&self, py: Python<'_>, ids: Vec<String>) -> PyResult<String> {
        self.with(py, move |c| Ok(json(&c.stored_jobs(&ids)?)))
    }

    /// Every job in the state file, newest first (no remote call).
    fn list(&self, py: Python<'_>, active_only: bool) -> PyResult<String> {
        self.with(py, move |c| Ok(json(&c.list(&JobFilter { active_only, ..Default::default() })?.jobs)))
    }

    /// The specs the job was staged with (JSON; no remote call).
    fn staged_specs(&self, py: Python<'_>, id: String) -> PyResult<String> {
        self.with(py, move |c| Ok(json(&c.staged_specs(&id)?)))
    }

    /// The job's attempts, first to last (no remote call).
    fn attempts(&self, py: Python<'_>, id: String) -> PyResult<String> {
        self.with(py, move |c| Ok(json(&c.attempts(&id)?)))
    }

    /// main.out and main.err of the current attempt (their last `tail` lines when given).
    #[pyo3(signature = (id, tail=None))]
    fn logs(&self, py: Python<'_>, id: String, tail: Option<u32>) -> PyResult<(String, String)> {
        self.with(py, move |c| {
            let l = c.job_logs(&id, tail, None)?;
            Ok((l.stdout, l.stderr))
        })
    }

    /// Cancel jobs (idempotent). Returns them as they now are (JSON list).
    fn cancel(&self, py: Python<'_>, ids: Vec<String>) -> PyResult<String> {
        self.with(py, move |c| Ok(json(&c.cancel_jobs(&ids)?)))
    }

    /// A new attempt of a job that ended Error or Canceled, from its newest checkpoint (JSON view).
    fn retry(&self, py: Python<'_>, id: String) -> PyResult<String> {
        self.with(py, move |c| Ok(json(&c.retry_job(&id)?)))
    }

    /// Pause a job (graceful: the checkpoint signal first, Pausing until it ends or its grace
    /// passes); its view (JSON).
    #[pyo3(signature = (id, graceful=false))]
    fn pause(&self, py: Python<'_>, id: String, graceful: bool) -> PyResult<String> {
        self.with(py, move |c| Ok(json(&c.pause_job(&id, graceful)?)))
    }

    /// Resume a paused job from its newest checkpoint, with `specs` (a JSON object's text) replacing
    /// its own when given; its view (JSON).
    #[pyo3(signature = (id, specs=None))]
    fn resume(&self, py: Python<'_>, id: String, specs: Option<String>) -> PyResult<String> {
        self.with(py, move |c| {
            let specs: Option<serde_json::Value> = match specs {
                Some(text) => Some(serde_json::from_str(&text).map_err(|e| {
                    Error::from(tao_slurm_engine::spec::SpecError::new("specs", format!("not JSON: {e}")))
                })?),
                None => None,
            };
            Ok(json(&c.resume_job(&id, specs.as_ref())?))
        })
    }

    /// Run `command` in the running job's container (on `node`, or a Cosmos-RL job's `role`, else once
    /// per node): its exit status and at most `max_bytes` of each output stream (JSON).
    #[pyo3(signature = (id, command, node=None, timeout_secs=60, max_bytes=65536, role=None))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments, one each
    fn exec_job(
        &self,
        py: Python<'_>,
        id: String,
        command: Vec<String>,
        node: Option<String>,
        timeout_secs: u64,
        max_bytes: u64,
        role: Option<String>,
    ) -> PyResult<String> {
        let at = tao_slurm_engine::client::Where::new(node.as_deref(), role.as_deref());
        self.with(py, move |c| Ok(json(&c.exec_capture(&id, &at, &command, timeout_secs, max_bytes)?)))
    }

    /// One poll of following a job's logs from byte offsets `(stdout, stderr)`: returns the job
    /// (JSON), the new pieces as `(stream, text)`, whether it is finished, whether nothing more is
    /// waiting, and the new offsets.
    #[allow(clippy::type_complexity)]
    fn follow_poll(
        &self,
        py: Python<'_>,
        id: String,
        offsets: (u64, u64),
    ) -> PyResult<(String, Vec<(String, String)>, bool, bool, (u64, u64))> {
        self.with(py, move |c| {
            let mut cursor = FollowCursor { stdout_offset: offsets.0, stderr_offset: offsets.1 };
            let poll = c.follow_logs_poll(&id, &[Stream::Stdout, Stream::Stderr], &mut cursor)?;
            let chunks = poll
                .chunks
                .into_iter()
                .map(|ch| (if ch.stream == Stream::Stdout { "stdout" } else { "stderr" }.to_string(), ch.text))
                .collect();
            Ok((json(&poll.job), chunks, poll.finished, poll.caught_up, (cursor.stdout_offset, cursor.stderr_offset)))
        })
    }

    /// Which shared-storage URIs exist (one round trip): per URI, `true`/`false`, or None when it is
    /// not a shared path (s3://, hf_model://, ...), or the refusal's text for a URI that is not one.
    fn check_paths(&self, py: Python<'_>, uris: Vec<String>) -> PyResult<Vec<PathAnswer>> {
        self.with(py, move |c| {
            Ok(c.check_paths(&uris)?
                .into_iter()
                .map(|(uri, check)| match check {
                    PathCheck::Exists(_) => (uri, Some(true), None),
                    PathCheck::Missing(_) => (uri, Some(false), None),
                    PathCheck::NotChecked(_) => (uri, None, None),
                    PathCheck::Refused(why) => (uri, None, Some(why)),
                })
                .collect())
        })
    }

    /// A shared-storage directory's entries (JSON list of name, kind, size, modified), or None when
    /// nothing is there.
    fn list_path(&self, py: Python<'_>, uri: String) -> PyResult<Option<String>> {
        self.with(py, move |c| Ok(c.list_path(&uri)?.map(|entries| json(&entries))))
    }

    /// The checkpoint files of a job's results directory, newest last (JSON list of path, size,
    /// modified; paths relative to the results directory).
    fn checkpoints(&self, py: Python<'_>, id: String) -> PyResult<String> {
        self.with(py, move |c| Ok(json(&c.checkpoint_files(&id)?)))
    }

    /// One file of a job's results directory (`name` relative to it, at most `max_bytes`), or None
    /// when it is not there; a name outside it, a symlink, a file that is not regular or too large
    /// raise `JobSpecError` naming `relative_path`.
    fn read_result_file(&self, py: Python<'_>, id: String, name: String, max_bytes: u64) -> PyResult<Option<Vec<u8>>> {
        self.with(py, move |c| c.read_result_file(&id, "relative_path", &name, max_bytes))
    }

    /// Remove a finished job's results directory: true when removed, false when already gone.
    fn delete_job_results(&self, py: Python<'_>, id: String) -> PyResult<bool> {
        self.with(py, move |c| c.delete_job_results(&id))
    }

    /// The plan a spec resolves to, without submitting (no remote call): the resources, times and
    /// names the batch script will carry, as JSON.
    fn plan(&self, py: Python<'_>, spec_json: &str) -> PyResult<String> {
        let spec = spec_of(py, spec_json)?;
        self.with(py, move |c| {
            let p = c.plan(&spec)?;
            Ok(json(&serde_json::json!({
                "nodes": p.resources.nodes,
                "gpus_per_node": p.resources.gpus_per_node,
                "cpus_per_task": p.resources.cpus_per_task,
                "exclusive": p.resources.exclusive,
                "time_minutes": p.time_minutes,
                "timeout_seconds": p.timeout_seconds,
                "use_timeout": p.use_timeout,
                "requeue": p.requeue,
                "partition": p.partition,
                "env": p.env.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
                "secret_names": p.secret_names,
                "mounts": p.mounts,
            })))
        })
    }

    /// The preflight checks (settings, unknown settings, SSH, Slurm, accounting, partitions, Pyxis,
    /// credentials, results directory), as JSON.
    fn preflight(&self, py: Python<'_>) -> String {
        let settings = self.settings.clone();
        detached(py, move || json(&tao_slurm_engine::client::preflight(&settings).checks))
    }

    /// One step of the monitor (the one every door runs): every active job refreshed in one round
    /// trip, due retries performed. Returns the jobs (JSON list, those that just ended included), the
    /// seconds to the next step at the monitor's pace, and the query budget's floor in seconds.
    fn monitor_step(&self, py: Python<'_>) -> PyResult<(String, f64, f64)> {
        let monitor = &self.monitor;
        self.with(py, move |c| {
            let mut m = monitor.lock().unwrap_or_else(|e| e.into_inner());
            let step = m.step(c)?;
            let views: Vec<tao_slurm_engine::JobView> = {
                let now = tao_slurm_engine::client::now_secs();
                step.jobs.iter().map(|j| tao_slurm_engine::JobView::at(j, now)).collect()
            };
            Ok((json(&views), step.interval.as_secs_f64(), step.floor.as_secs_f64()))
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "Engine(user={:?}, hosts={}, state={})",
            self.settings.slurm_user.as_deref().unwrap_or(""),
            self.settings.login_hosts.iter().map(|h| h.label()).collect::<Vec<_>>().join(","),
            self.settings.state_path.display()
        )
    }
}

/// The TAO SDK's `gpu_count` (and `num_nodes`) as a job's `gpus`/`total_gpus`/`nodes`, by the one
/// packing rule of every door; a count that cannot be packed raises `JobSpecError` naming the field.
#[pyfunction]
#[pyo3(signature = (count, num_nodes, per_node))]
fn gpus_from_count(
    py: Python<'_>,
    count: i64,
    num_nodes: Option<u32>,
    per_node: u32,
) -> PyResult<HashMap<&'static str, u32>> {
    let ask = tao_slurm_engine::plan::gpus_from_count("gpu_count", count, num_nodes, per_node)
        .map_err(|e| to_py(py, e.into()))?;
    let mut out = HashMap::new();
    for (key, value) in [("gpus", ask.gpus), ("total_gpus", ask.total_gpus), ("nodes", ask.nodes)] {
        if let Some(v) = value {
            out.insert(key, v);
        }
    }
    Ok(out)
}

/// The job fields the Python package offers, each with its keyword there (`spec::doors`: the one
/// list of what each door names differently or leaves out), in the spec's order.
#[pyfunction]
fn job_keywords() -> Vec<(&'static str, &'static str)> {
    use tao_slurm_engine::spec::doors::{names_at, Door};
    names_at(Door::Python)
}

/// The infrastructure failure pattern a log line matches (the engine's list), or None.
#[pyfunction]
fn infra_pattern_of(line: &str) -> Option<&'static str> {
    tao_slurm_engine::retry::infra_pattern_of(line)
}

/// The shortest time between two refreshes the query budget allows, in seconds (every poller's floor).
#[pyfunction]
fn budget_floor_secs(max_queries_per_minute: u32) -> f64 {
    tao_slurm_engine::monitor::budget_floor(max_queries_per_minute).as_secs_f64()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Engine logs (TAO_SLURM_LOG=info|debug) go to stderr with secrets redacted, as the CLI's do.
    if std::env::var_os("TAO_SLURM_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("TAO_SLURM_LOG")
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_writer(|| tao_slurm_engine::redact::RedactingWriter(std::io::stderr()))
            .with_ansi(false)
            .with_target(false)
            .try_init();
    }
    m.add_class::<Engine>()?;
    // The engine's vocabulary, so the Python side never keeps its own copy.
    m.add("TERMINAL_STATUSES", PlatformStatus::TERMINAL.iter().map(|s| s.as_str()).collect::<Vec<_>>())?;
    m.add("STATUSES", PlatformStatus::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>())?;
    m.add(
        "ERROR_KINDS",
        ErrorKind::ALL.iter().map(|k| (k.as_str(), k.python_exception(), k.exit_code())).collect::<Vec<_>>(),
    )?;
    let exiting = wrap_pyfunction!(interpreter_exiting, m)?;
    m.py().import("atexit")?.call_method1("register", (&exiting,))?;
    m.add_function(exiting)?;
    m.add_function(wrap_pyfunction!(gpus_from_count, m)?)?;
    m.add_function(wrap_pyfunction!(budget_floor_secs, m)?)?;
    m.add_function(wrap_pyfunction!(infra_pattern_of, m)?)?;
    m.add_function(wrap_pyfunction!(job_keywords, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
