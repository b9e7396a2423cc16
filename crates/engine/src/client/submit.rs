//! The one submit every door calls: the settings checked, the secret values found, the workdir sent,
//! the spec submitted as a job, a sweep or a pipeline (each plan resolved once and passed to the
//! door's own rule first), the background monitor started when asked for, and everything the door
//! shows returned as data: the warnings, the workdir's upload and the plan as submitted.

use super::{Client, Submission, WorkdirUpload};
use crate::error::Result;
use crate::plan::Plan;
use crate::spec::{JobSpec, SecretValues};
use serde::Serialize;
use std::path::PathBuf;

/// A door's own rule on every plan before anything is recorded or sent (the service's policy); its
/// refusal comes back as the error (`Error::Refused` for a refusal of the door's own kind).
pub type Admit<'a> = &'a dyn Fn(&Plan) -> Result<()>;

/// Told once a single job is in the store, before its submission's round trip: its id and the
/// warnings the door would show. A door that answers then (the service's `Prefer: respond-async`)
/// gets the job kept whatever the submission meets: a refusal ends it Error with its own message
/// instead of leaving nothing (see [`Client::submit`]).
pub type Recorded<'a> = &'a dyn Fn(&str, &[String]);

/// A door's hooks on a single job's way: its rule, and its word once the job is recorded.
#[derive(Clone, Copy)]
pub(super) struct Hooks<'a> {
    pub admit: Admit<'a>,
    pub recorded: Option<Recorded<'a>>,
}

/// Where the values of the spec's `secret_env` come from.
pub enum Secrets {
    /// Given by the door (Python's arguments, the service's org secrets).
    Values(SecretValues),
    /// Looked up as the command line does: the secrets file if named (mode 600, ours), then the
    /// process environment.
    Lookup { file: Option<PathBuf> },
}

/// Whether the submit starts a background monitor (unless one runs) to follow the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorChoice {
    /// When asked (`--monitor`), or when the spec has webhooks: only a monitor sends them.
    Asked(bool),
    /// Never: the door runs its own monitor (the service, Python).
    DoorsOwn,
}

/// What a door asks of [`Client::submit`] besides the spec.
pub struct SubmitOptions<'a> {
    pub secrets: Secrets,
    pub monitor: MonitorChoice,
    pub admit: Option<Admit<'a>>,
    /// Told of the workdir's upload as it goes: (bytes sent, bytes in all).
    pub progress: Option<&'a mut dyn FnMut(u64, u64)>,
    /// Told once a single job is recorded (sweeps and pipelines are not told).
    pub recorded: Option<Recorded<'a>>,
}

impl<'a> SubmitOptions<'a> {
    /// Secrets given, no monitor started, no rule of the door's own, no progress.
    pub fn with_values(secrets: SecretValues) -> SubmitOptions<'a> {
        SubmitOptions {
            secrets: Secrets::Values(secrets),
            monitor: MonitorChoice::DoorsOwn,
            admit: None,
            progress: None,
            recorded: None,
        }
    }
}

/// The plan of a submission as it was submitted (its first job's, for a sweep or a pipeline): what
/// it asked of the cluster.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PlanSummary {
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub partition: String,
    /// The wall time, fitted to the partition when the job asked for none.
    pub time_minutes: u64,
    /// The image as Pyxis gets it (a `.sqsh` path when the cache holds it).
    pub image: String,
    /// The names of the secrets the job gets (never their values).
    pub secret_env: Vec<String>,
    /// Where the job's files live on shared storage.
    pub job_dir: String,
}

impl PlanSummary {
    pub fn of(plan: &Plan) -> PlanSummary {
        PlanSummary {
            nodes: plan.resources.nodes,
            gpus_per_node: plan.resources.gpus_per_node,
            partition: plan.partition.clone(),
            time_minutes: plan.time_minutes,
            image: plan.image.pyxis.clone(),
            secret_env: plan.secret_names.clone(),
            job_dir: plan.layout.base_dir.clone(),
        }
    }
}

/// What [`Client::submit`] did.
#[derive(Debug, Clone)]
pub struct SubmitOutcome {
    pub submission: Submission,
    /// For the door to show, in order: the plan's notes (inputs read from object storage, Cosmos-RL
    /// adjustments), then what the submission changed or fell back to (a capped wall time, a
    /// registry pull).
    pub warnings: Vec<String>,
    /// The workdir sent with it, if the spec had one.
    pub workdir: Option<WorkdirUpload>,
    /// Whether a background monitor was started (None: not asked for, or the door runs its own).
    pub monitor_started: Option<bool>,
    pub plan: PlanSummary,
}

impl Submission {
    /// The id a door names the submission by: the job's, the sweep's or the pipeline's.
    pub fn id(&self) -> &str {
        match self {
            Submission::Job(j) => &j.job_id,
            Submission::Sweep(s) => &s.sweep_id,
            Submission::Pipeline(p) => &p.pipeline_id,
        }
    }

    /// Its first job (a sweep's first variant, a pipeline's first step).
    pub fn first_job(&self) -> &str {
        match self {
            Submission::Job(j) => &j.job_id,
            Submission::Sweep(s) => &s.variants[0].job_id,
            Submission::Pipeline(p) => &p.steps[0].job_id,
        }
    }

    fn warnings(&self) -> &[String] {
        match self {
            Submission::Job(j) => &j.warnings,
            Submission::Sweep(s) => &s.warnings,
            Submission::Pipeline(p) => &p.warnings,
        }
    }
}

/// The notes a plan carries for the person who submits it.
pub(super) fn plan_notes(plan: &Plan) -> impl Iterator<Item = String> + '_ {
    let datasets = plan.inputs.iter().filter_map(|(key, location)| crate::spec::dataset_warning(key, location));
    let cosmos = plan.cosmos.iter().flat_map(|c| &c.notes).map(|n| format!("warning: {n}"));
    datasets.chain(cosmos)
}

impl Client {
    /// Validate, record and submit what the spec describes: a job, a sweep (`[sweep]`) or a pipeline
    /// (`[[steps]]`). Bad settings and missing secret values fail before any connection; the workdir
    /// is sent once for all of them; each plan is resolved once and passed to `admit` before anything
    /// is recorded.
    pub fn submit(&self, spec: &JobSpec, opts: SubmitOptions<'_>) -> Result<SubmitOutcome> {
        let SubmitOptions { secrets, monitor, admit, progress, recorded } = opts;
        self.settings.require_remote()?;
        let secrets = match secrets {
            Secrets::Values(v) => v,
            Secrets::Lookup { file } => super::secret_values(&spec.secret_env, file.as_deref())?,
        };
        let (spec, workdir) = match progress {
            Some(p) => self.send_workdir_with(spec, p)?,
            None => self.send_workdir(spec)?,
        };
        let admit: Admit<'_> = admit.unwrap_or(&|_| Ok(()));
        let submission = if spec.sweep.is_some() {
            Submission::Sweep(self.create_sweep_admitted(&spec, &secrets, admit)?)
        } else if !spec.steps.is_empty() {
            Submission::Pipeline(self.create_pipeline_admitted(&spec, &secrets, admit)?)
        } else {
            Submission::Job(self.create_job_hooked(&spec, self.plan(&spec)?, &secrets, Hooks { admit, recorded })?)
        };
        // The plan as recorded: fitted to the partition, its image as the cache made it.
        let plan = self.recorded_plan(submission.first_job())?;
        let warnings = plan_notes(&plan).chain(submission.warnings().iter().cloned()).collect();
        let monitor_started = match monitor {
            MonitorChoice::Asked(asked) if asked || !spec.notify.is_empty() => {
                Some(super::start_background_monitor(&self.settings)?)
            }
            _ => None,
        };
        Ok(SubmitOutcome { submission, warnings, workdir, monitor_started, plan: PlanSummary::of(&plan) })
    }
}
