//! The library API: what the CLI does, callable from Rust. A `Client` owns the settings, the local
//! state and (opened on first use) the transport.

use crate::config::Settings;
use crate::engine::cycle::Cycle;
use crate::engine::retry::RetryPolicy;
use crate::engine::{cancel, cluster, logs, submit};
use crate::error::{Error, Result};
use crate::plan::{self, Plan};
use crate::remote::RemoteError;
use crate::remote::{self, Remote};
use crate::script;
use crate::spec::{JobSpec, SecretValues};
use crate::status::PlatformStatus;
use crate::store::{ChangeToken, JobRecord, JobSummary, Store};
use serde::Serialize;
use std::sync::OnceLock;

pub use crate::engine::logs::JobLogs;
pub use crate::engine::submit::Submitted;

/// A job as `status --json` shows it. Field names follow the contract's `slurm_metadata`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct JobView {
    pub job_id: String,
    pub name: Option<String>,
    pub status: PlatformStatus,
    pub message: String,
    pub slurm_job_id: Option<String>,
    pub slurm_state: Option<String>,
    pub exit_code: Option<i32>,
    pub node_list: Option<String>,
    pub login_host: Option<String>,
    pub job_dir: String,
    pub results_dir: String,
    pub image: String,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub partition: String,
    pub created_at: i64,
    pub updated_at: i64,
    /// Seconds since submission (to the last refresh, for finished jobs).
    pub elapsed_secs: i64,
    /// The container's last status.json line (message, epoch, KPIs), when it wrote one.
    pub progress: Option<serde_json::Value>,
    pub progress_message: Option<String>,
    /// The current attempt (1 + retries).
    pub attempt: u32,
    /// Resubmissions so far.
    pub retries: u32,
    /// Nodes the current attempt excludes.
    pub excluded_nodes: String,
    /// When a scheduled retry is due (Unix seconds).
    pub next_retry_at: Option<i64>,
    /// The cluster profile the job was submitted to (None: the settings without a profile).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The sweep or pipeline the job belongs to, and a sweep variant's index in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep_index: Option<u32>,
    /// Every attempt, first to last (filled by `job_status`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<crate::store::AttemptRecord>>,
}

impl From<&JobRecord> for JobView {
    fn from(j: &JobRecord) -> JobView {
        JobView::from(&j.summary)
    }
}

impl From<&JobSummary> for JobView {
    fn from(j: &JobSummary) -> JobView {
        JobView {
            job_id: j.job_id.clone(),
            name: j.name.clone(),
            status: j.status,
            message: j.message.clone(),
            slurm_job_id: j.slurm_job_id.clone(),
            slurm_state: j.slurm_state.clone(),
            exit_code: j.exit_code,
            node_list: j.node_list.clone(),
            login_host: j.login_host.clone(),
            job_dir: j.layout.base_dir.clone(),
            results_dir: j.layout.results_dir(),
            image: j.image.clone(),
            nodes: j.nodes,
            gpus_per_node: j.gpus_per_node,
            partition: j.partition.clone(),
            created_at: j.created_at,
            updated_at: j.updated_at,
            elapsed_secs: if j.status.is_terminal() {
                j.updated_at - j.created_at
            } else {
                crate::store::now_secs() - j.created_at
            },
            progress: j.progress.as_deref().and_then(|p| serde_json::from_str(p).ok()),
            progress_message: j
                .progress
                .as_deref()
                .and_then(|p| serde_json::from_str::<crate::status::StatusLine>(p).ok())
                .and_then(|l| l.message),
            attempt: j.attempt,
            retries: j.attempt.saturating_sub(1),
            excluded_nodes: j.excluded_nodes.clone(),
            next_retry_at: j.next_retry_at,
            cluster: j.cluster.clone(),
            sweep_id: j.sweep_id.clone(),
            sweep_index: j.sweep_index,
            attempts: None,
        }
    }
}

/// A submitted pipeline: its id and each step's job.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PipelineSubmitted {
    pub pipeline_id: String,
    pub steps: Vec<StepSubmitted>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct StepSubmitted {
    pub name: String,
    pub job_id: String,
    pub slurm_job_id: String,
}

/// A sweep or pipeline with its members' statuses counted.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct GroupView {
    #[serde(flatten)]
    pub group: crate::store::GroupRecord,
    pub jobs: usize,
    pub statuses: std::collections::BTreeMap<String, usize>,
}

/// The files a plan stages, with the user and login hosts the settings name in the metadata file.
/// Offline: `render` uses it without a client.
pub fn staged_files_for(settings: &Settings, plan: &Plan, spec_json: &serde_json::Value) -> Vec<script::StagedFile> {
    let hosts: Vec<String> = settings.login_hosts.iter().map(|h| h.label()).collect();
    script::staged_files(plan, spec_json, settings.slurm_user.as_deref().unwrap_or(""), &hosts)
}

/// A cluster profile's name in messages.
fn cluster_label(cluster: Option<&str>) -> String {
    match cluster {
        Some(c) => format!("cluster {c}"),
        None => "the cluster of the settings without a profile".to_string(),
    }
}

/// What `check-path` found for one URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathCheck {
    Exists(String),
    Missing(String),
    /// An auxiliary input (s3, hf, ngc): fetched inside the job, not checked here.
    NotChecked(String),
    /// Not an acceptable URI; the reason.
    Refused(String),
}

/// What one [`Client::follow_logs_poll`] found.
#[derive(Debug, Clone)]
pub struct FollowPoll {
    /// The job after the poll's refresh.
    pub job: JobView,
    pub chunks: Vec<logs::Chunk>,
    /// The job had ended before this poll and every byte of its logs has been read.
    pub finished: bool,
    /// Nothing more is waiting to be read now.
    pub caught_up: bool,
}

/// Callbacks for [`Client::wait_for`]; each has an empty default.
pub trait JobCallbacks {
    /// The job (attempt) started running.
    fn on_running(&mut self, _job: &JobView) {}
    /// The job ended Complete.
    fn on_complete(&mut self, _job: &JobView) {}
    /// The job ended Error (after any retries).
    fn on_error(&mut self, _job: &JobView) {}
    /// An infrastructure failure was retried: `job.attempt` is the new attempt.
    fn on_retry(&mut self, _job: &JobView) {}
}

/// The library API, mirroring the reference SDK: `create_job`, `job_status`, `job_logs`, `cancel_job`,
/// `list_jobs`, and `wait_for` with callbacks. See `examples/sdk.rs`.
pub struct Client {
    settings: Settings,
    store: Store,
    remote: OnceLock<Box<dyn Remote>>,
    /// The active jobs as this client last loaded and refreshed them, valid while nobody (this client
    /// included) has changed the state file since: a long-lived client (the monitor, a service)
    /// refreshing thousands of jobs does not read them all again each time.
    active: std::sync::Mutex<Option<(ChangeToken, Vec<JobSummary>)>>,
    /// Refreshes only observe and record statuses (`mcp --read-only`): see [`Cycle::observe_only`].
    observe_only: bool,
}

impl Client {
    pub fn new(settings: Settings) -> Result<Client> {
        let mut store = Store::open(&settings.state_path)?;
        store.set_cluster(settings.cluster.clone());
        Ok(Client { settings, store, remote: OnceLock::new(), active: std::sync::Mutex::new(None), observe_only: false })
    }

    /// This client's refreshes observe and record statuses only: no scancel, release, resubmission,
    /// dependency action or secret removal (what `mcp --read-only` runs with).
    pub fn observing_only(mut self) -> Client {
        self.observe_only = true;
        self
    }

    /// A client over a transport the caller made (tests drive the client over a fake remote).
    pub fn with_remote(settings: Settings, remote: Box<dyn Remote>) -> Result<Client> {
        let client = Client::new(settings)?;
        let _ = client.remote.set(remote);
        Ok(client)
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// What the transport has cost so far (zero if no remote command ran).
    pub fn transport_stats(&self) -> crate::remote::TransportStats {
        self.remote.get().map(|r| r.stats()).unwrap_or_default()
    }

    fn policy(&self) -> RetryPolicy {
        RetryPolicy { max_retries: self.settings.max_retries, backoff_base_secs: self.settings.retry_backoff_secs }
    }

    /// The staged files of a recorded job, regenerated from its stored spec and plan (they are the
    /// same every time), for retries and resumed submissions.
    fn files_of(&self, job: &JobRecord) -> Vec<script::StagedFile> {
        let spec_json: serde_json::Value = serde_json::from_str(&job.spec_json).unwrap_or(serde_json::Value::Null);
        staged_files_for(&self.settings, &job.plan, &spec_json)
    }

    /// The refresh cycle over this client's transport and state.
    fn cycle<'a>(&'a self, files_for: &'a dyn Fn(&JobRecord) -> Vec<script::StagedFile>) -> Result<Cycle<'a>> {
        Ok(Cycle { remote: self.remote()?, store: &self.store, policy: self.policy(), files_for, observe_only: self.observe_only })
    }

    /// One refresh cycle over `jobs` (see [`Cycle`]); returns the ids of the jobs whose records changed.
    fn refresh_and_advance(&self, jobs: &[JobSummary]) -> Result<Vec<String>> {
        if jobs.is_empty() && self.store.secrets_to_remove()?.is_empty() {
            return Ok(Vec::new());
        }
        self.on_this_cluster(jobs)?;
        self.cycle(&|j| self.files_of(j))?.run(jobs)
    }

    /// Refuse remote work on jobs of another cluster profile: its login hosts are not this client's.
    fn on_this_cluster<'a>(&self, jobs: impl IntoIterator<Item = &'a JobSummary>) -> Result<()> {
        match jobs.into_iter().find(|j| j.cluster != self.settings.cluster) {
            None => Ok(()),
            Some(j) => Err(crate::spec::SpecError::new(
                "cluster",
                format!(
                    "job {} was submitted to {}, not to {}: use --cluster {}",
                    j.job_id,
                    cluster_label(j.cluster.as_deref()),
                    cluster_label(self.settings.cluster.as_deref()),
                    j.cluster.as_deref().unwrap_or("\"\" (none)")
                ),
            )
            .into()),
        }
    }

    fn remote(&self) -> Result<&dyn Remote> {
        if let Some(r) = self.remote.get() {
            return Ok(r.as_ref());
        }
        let r = remote::connect(&self.settings)?;
        Ok(self.remote.get_or_init(|| r).as_ref())
    }

    /// Validate and resolve a spec offline (what `render` prints).
    pub fn plan(&self, spec: &JobSpec) -> Result<Plan> {
        Ok(plan::resolve(spec, &self.settings)?)
    }

    /// The files a plan stages, the batch script last.
    pub fn staged_files(&self, spec: &JobSpec, plan: &Plan) -> Vec<script::StagedFile> {
        staged_files_for(&self.settings, plan, &serde_json::to_value(spec).expect("a spec always serialises"))
    }

    /// The checks a submit makes with the cluster (it answers, the partitions exist and allow the wall
    /// time), after every offline check has passed. Submits nothing.
    pub fn check_online(&self, spec: &JobSpec) -> Result<Plan> {
        Ok(self.check_online_with_image(spec)?.0)
    }

    /// Whether this submit converts its image into the squashfs cache.
    fn wants_sqsh(&self, spec: &JobSpec, plan: &Plan) -> bool {
        self.settings.use_sqsh && !spec.no_sqsh && !plan.image.is_sqsh_path
    }

    /// The online checks, plus (in the same round trip) whether the image is already in the cache.
    fn check_online_with_image(&self, spec: &JobSpec) -> Result<(Plan, Option<String>)> {
        // Settings and spec are checked before anything touches the network.
        self.settings.require_remote()?;
        let plan = self.plan(spec)?;
        let probe = if self.wants_sqsh(spec, &plan) {
            crate::sqsh::cached_probe_script(&self.settings.sqsh_policy(), &plan.image)
        } else {
            String::new()
        };
        let facts = cluster::submit_facts(self.remote()?, &plan.required_paths, &probe)?;
        if !facts.missing_paths.is_empty() {
            return Err(crate::spec::SpecError::new(
                "inputs",
                format!(
                    "these paths do not exist on the cluster (checked with test -e on {}); nothing was staged or submitted:\n  {}",
                    facts.host,
                    facts.missing_paths.join("\n  ")
                ),
            )
            .into());
        }
        plan::check_partition_limits(&plan, &facts.partitions)?;
        Ok((plan, facts.cached_sqsh))
    }

    /// Convert a registry image into the shared squashfs cache, or find it there (`image import`).
    pub fn prepare_image(&self, image: &str, force: bool) -> Result<crate::engine::image::Prepared> {
        let image = crate::spec::ImageRef::parse(image).map_err(|m| crate::spec::SpecError::new("image", m))?;
        if image.is_sqsh_path {
            return Err(crate::spec::SpecError::new("image", "is already a .sqsh file").into());
        }
        crate::engine::image::prepare(self.remote()?, &self.settings.sqsh_policy(), &image, force, true)
    }

    /// The online checks, the image made ready (the squashfs cache), and the secret values completed
    /// by the forwarded credentials: what every submission needs before it records anything.
    fn ready(&self, spec: &JobSpec, secrets: &SecretValues) -> Result<(Plan, SecretValues)> {
        let (mut plan, cached) = self.check_online_with_image(spec)?;
        if let Some(path) = cached {
            // Already in the cache (learned in the checks' round trip): no conversion round trip.
            plan.image.pyxis = path;
            plan.image.is_sqsh_path = true;
        } else if self.wants_sqsh(spec, &plan) {
            // Converted once into the shared cache; every node then reads the file instead of pulling.
            match crate::engine::image::prepare(self.remote()?, &self.settings.sqsh_policy(), &plan.image, false, true)
            {
                Ok(prepared) => {
                    plan.image.pyxis = prepared.sqsh_path;
                    plan.image.is_sqsh_path = true;
                }
                Err(e) if spec.allow_registry_pull || self.settings.allow_registry_pull => {
                    eprintln!(
                        "warning: {e}\nwarning: submitting with the registry image: every node pulls it at job start"
                    );
                }
                Err(e) => return Err(e),
            }
        }
        // Credentials forwarded by the settings (the TAO SDK's HF_TOKEN, NGC_KEY, ...) fill the names
        // of the plan that the caller gave no value for.
        let mut secrets = secrets.clone();
        for (name, value) in &self.settings.forwarded_secrets {
            if plan.secret_names.contains(name) {
                secrets.0.entry(name.clone()).or_insert_with(|| value.clone());
            }
        }
        if let Some(missing) = plan.secret_names.iter().find(|n| !secrets.0.contains_key(*n)) {
            return Err(crate::spec::SpecError::new("secret_env", format!("{missing} has no value")).into());
        }
        Ok((plan, secrets))
    }

    /// The jobs `after` names (`JOB[:ok|:notok|:any]`, ids or prefixes), as full ids with the kind.
    fn resolve_after(&self, after: &[String]) -> Result<Vec<(String, crate::spec::DependKind)>> {
        let mut out = Vec::new();
        for word in after {
            let (id, kind) = crate::spec::parse_after("after", word)?;
            // A job, or a sweep or pipeline: after every one of its jobs.
            let parents: Vec<JobSummary> = match self.store.summary(&id) {
                Ok(job) => vec![job],
                Err(crate::store::StoreError::NotFound(_)) => match self.store.group(&id)? {
                    Some((_, members)) => {
                        self.store.summaries(&members.iter().map(String::as_str).collect::<Vec<_>>())?
                    }
                    None => {
                        return Err(crate::spec::SpecError::new(
                            "after",
                            format!("no job, sweep or pipeline {id} in the local state"),
                        )
                        .into())
                    }
                },
                Err(e) => return Err(e.into()),
            };
            self.on_this_cluster(&parents)?;
            out.extend(parents.into_iter().map(|p| (p.job_id, kind)));
        }
        Ok(out)
    }

    /// Validate, record, stage and submit a job. `secrets` holds the values of `spec.secret_env`.
    /// A spec with a `[sweep]` or `[[steps]]` section is refused here: see [`Client::create_sweep`] and
    /// [`Client::create_pipeline`].
    pub fn create_job(&self, spec: &JobSpec, secrets: &SecretValues) -> Result<Submitted> {
        if spec.sweep.is_some() {
            return Err(crate::spec::SpecError::new("sweep", "submit a sweep with create_sweep").into());
        }
        if !spec.steps.is_empty() {
            return Err(crate::spec::SpecError::new("steps", "submit a pipeline with create_pipeline").into());
        }
        let after = self.resolve_after(&spec.after)?;
        let (plan, secrets) = self.ready(spec, secrets)?;
        let secrets = &secrets;
        let files = self.staged_files(spec, &plan);
        let member = crate::store::Member {
            after: after.iter().map(|(id, kind)| (id.clone(), kind.as_str().to_string())).collect(),
            ..Default::default()
        };
        self.store.in_transaction(|| {
            self.store.insert_member(&serde_json::to_string(spec).expect("spec serialises"), &plan, &member)
        })?;
        let mut ticket = submit::AttemptTicket::first(&plan);
        let gate = self.gate_for_submission(&plan.layout.job_id)?;
        if let Some(g) = &gate {
            (ticket.dependency, ticket.hold) = g.sbatch();
        }
        let result = self.submit_gated(&plan, &files, secrets, &ticket, gate.as_ref());
        if result.is_err() {
            // A failed submission may have written the secrets file before it stopped.
            crate::engine::secrets::sweep_or_warn(self.remote()?, &self.store);
        }
        match result {
            Err(Error::Remote(
                RemoteError::Lost { host, message } | RemoteError::TimedOut { host, detail: message, .. },
            )) => {
                // The outcome is unknown: look the job up by its unique name (never resubmit blindly).
                let job = self.store.get(&plan.layout.job_id)?;
                let _ = self.refresh_and_advance(std::slice::from_ref(&job.summary));
                let job = self.store.get(&plan.layout.job_id)?;
                match (job.summary.slurm_job_id, job.summary.login_host) {
                    (Some(slurm_job_id), Some(login_host)) => Ok(Submitted {
                        job_id: job.summary.job_id,
                        slurm_job_id,
                        login_host,
                        job_dir: plan.layout.base_dir.clone(),
                    }),
                    _ => Err(Error::Remote(RemoteError::Lost {
                        host,
                        message: format!(
                            "{message}; job {} was not found by name yet: `tao-slurm status {}` keeps looking and never resubmits",
                            plan.layout.job_id, plan.layout.job_id
                        ),
                    })),
                }
            }
            Err(Error::Remote(e)) => {
                // Nothing was sent: the job never reached the cluster.
                self.store.update_status(
                    &plan.layout.job_id,
                    &crate::store::StatusUpdate::bare(PlatformStatus::Error, format!("not submitted: {e}")),
                )?;
                Err(e.into())
            }
            other => other,
        }
    }

    /// The gate a recorded job is submitted with now; a job whose dependency can never be met is
    /// recorded Canceled and refused.
    fn gate_for_submission(&self, job_id: &str) -> Result<Option<crate::engine::depend::Gate>> {
        let gate = crate::engine::depend::gate_of(&self.store, job_id)?;
        if let Some(crate::engine::depend::Gate::Never(message)) = &gate {
            self.store
                .update_status(job_id, &crate::store::StatusUpdate::bare(PlatformStatus::Canceled, message.clone()))?;
            return Err(crate::spec::SpecError::new("after", format!("job {job_id} can never run: {message}")).into());
        }
        Ok(gate)
    }

    /// Submit a recorded job's first attempt under its gate, and record the gate it was given.
    fn submit_gated(
        &self,
        plan: &Plan,
        files: &[script::StagedFile],
        secrets: &SecretValues,
        ticket: &submit::AttemptTicket,
        gate: Option<&crate::engine::depend::Gate>,
    ) -> Result<Submitted> {
        let result = submit::submit(self.remote()?, &self.store, plan, files, secrets, ticket);
        if let (Ok(_), Some(g)) = (&result, gate) {
            self.store.set_gate(&plan.layout.job_id, &g.stored())?;
        }
        result
    }

    /// Validate, record, stage and submit a sweep (`spec.sweep`): every variant a job of its own, all
    /// of them one Slurm job array, staged and submitted in one round trip (after the checks' one).
    pub fn create_sweep(&self, spec: &JobSpec, secrets: &SecretValues) -> Result<crate::engine::sweep::SweepSubmitted> {
        if !spec.after.is_empty() {
            return Err(crate::spec::SpecError::new("after", "a sweep cannot run after other jobs (yet)").into());
        }
        let sweep_id = uuid::Uuid::new_v4().to_string();
        let count = spec.sweep.as_ref().map(|s| s.variants()).transpose()?.map(|v| v.len()).unwrap_or(0);
        let ids: Vec<String> = (0..count).map(|_| uuid::Uuid::new_v4().to_string()).collect();
        // Every variant is validated offline before anything reaches the cluster.
        let mut sweep = crate::engine::sweep::plan_sweep(spec, &self.settings, &sweep_id, &ids)?;
        let first_spec = spec.for_variant(&sweep.variants[0].0);
        let (ready, secrets) = self.ready(&first_spec, secrets)?;
        let specs: Vec<JobSpec> = sweep.variants.iter().map(|(v, _)| spec.for_variant(v)).collect();
        for (_, plan) in &mut sweep.variants {
            plan.image = ready.image.clone();
        }
        let files: Vec<Vec<script::StagedFile>> =
            sweep.variants.iter().zip(&specs).map(|((_, plan), s)| self.staged_files(s, plan)).collect();
        let spec_jsons: Vec<String> =
            specs.iter().map(|s| serde_json::to_string(s).expect("spec serialises")).collect();
        let members: Vec<(String, &Plan, crate::store::Member)> = sweep
            .variants
            .iter()
            .zip(spec_jsons)
            .map(|((v, plan), json)| {
                (
                    json,
                    plan,
                    crate::store::Member {
                        attempt_name: Some(sweep.array_name.clone()),
                        sweep_id: Some(sweep_id.clone()),
                        sweep_index: Some(v.index),
                        ..Default::default()
                    },
                )
            })
            .collect();
        self.store.insert_group(
            &crate::store::Group {
                sweep_id: sweep_id.clone(),
                kind: "sweep".into(),
                name: spec.name.clone(),
                array_name: Some(sweep.array_name.clone()),
                max_concurrent: sweep.max_concurrent,
            },
            &members,
        )?;
        let result = crate::engine::sweep::submit_sweep(self.remote()?, &self.store, &sweep, &files, &secrets);
        if let Err(Error::Remote(e)) = &result {
            if !matches!(e, RemoteError::Lost { .. } | RemoteError::TimedOut { .. }) {
                // Nothing was sent: the sweep never reached the cluster.
                for (_, plan) in &sweep.variants {
                    self.store.update_status(
                        &plan.layout.job_id,
                        &crate::store::StatusUpdate::bare(PlatformStatus::Error, format!("not submitted: {e}")),
                    )?;
                }
            }
        }
        if result.is_err() {
            crate::engine::secrets::sweep_or_warn(self.remote()?, &self.store);
        }
        result
    }

    /// Validate, record and submit a pipeline (`spec.steps`): each step a job of its own, submitted
    /// in order with a Slurm dependency on the steps it runs after (kept across their retries).
    /// Each step sees the results directory of every earlier step as `TAO_AFTER_<STEP>_RESULTS_DIR`.
    pub fn create_pipeline(&self, spec: &JobSpec, secrets: &SecretValues) -> Result<PipelineSubmitted> {
        let steps = spec.pipeline()?;
        let external = self.resolve_after(&spec.after)?;
        let pipeline_id = uuid::Uuid::new_v4().to_string();
        let ids: Vec<String> = steps.iter().map(|_| uuid::Uuid::new_v4().to_string()).collect();
        // Offline first: every step's plan.
        let mut plans = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            let mut plan = plan::resolve_with_id(&step.spec, &self.settings, &ids[i])?;
            for (j, earlier) in steps[..i].iter().enumerate() {
                let dir = plan::Layout::new(&plan.layout.base_dir, &ids[j]).results_dir();
                plan.env.push((crate::spec::step_results_var(&earlier.name), dir));
            }
            plans.push(plan);
        }
        let mut ready_secrets = Vec::new();
        for (step, plan) in steps.iter().zip(&mut plans) {
            let (ready, secrets) = self.ready(&step.spec, secrets)?;
            plan.image = ready.image;
            ready_secrets.push(secrets);
        }
        let members: Vec<(String, &Plan, crate::store::Member)> = steps
            .iter()
            .zip(&plans)
            .map(|(step, plan)| {
                let mut after: Vec<(String, String)> =
                    step.after.iter().map(|(j, kind)| (ids[*j].clone(), kind.as_str().to_string())).collect();
                if step.after.is_empty() {
                    after.extend(external.iter().map(|(id, kind)| (id.clone(), kind.as_str().to_string())));
                }
                (
                    serde_json::to_string(&step.spec).expect("spec serialises"),
                    plan,
                    crate::store::Member { sweep_id: Some(pipeline_id.clone()), after, ..Default::default() },
                )
            })
            .collect();
        self.store.insert_group(
            &crate::store::Group {
                sweep_id: pipeline_id.clone(),
                kind: "pipeline".into(),
                name: spec.name.clone(),
                array_name: None,
                max_concurrent: None,
            },
            &members,
        )?;
        let mut submitted = Vec::new();
        for ((step, plan), secrets) in steps.iter().zip(&plans).zip(&ready_secrets) {
            let files = self.staged_files(&step.spec, plan);
            let mut ticket = submit::AttemptTicket::first(plan);
            let gate = self.gate_for_submission(&plan.layout.job_id)?;
            if let Some(g) = &gate {
                (ticket.dependency, ticket.hold) = g.sbatch();
            }
            let s = self.submit_gated(plan, &files, secrets, &ticket, gate.as_ref())?;
            submitted.push(StepSubmitted { name: step.name.clone(), job_id: s.job_id, slurm_job_id: s.slurm_job_id });
        }
        Ok(PipelineSubmitted { pipeline_id, steps: submitted })
    }

    /// The ids given, with every sweep or pipeline id (or prefix) replaced by its members' job ids.
    /// A job id wins over a group id it also prefixes.
    pub fn expand_ids(&self, ids: &[String]) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for id in ids {
            match self.store.summary(id) {
                Ok(job) => out.push(job.job_id),
                Err(crate::store::StoreError::NotFound(_)) => match self.store.group(id)? {
                    Some((_, members)) => out.extend(members),
                    None => return Err(crate::store::StoreError::NotFound(id.clone()).into()),
                },
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    /// The jobs `ids` name, a sweep or pipeline id standing for its jobs (in index order). One lookup
    /// per job id, as before groups existed: a group is looked for only when no job matches.
    fn summaries_of(&self, ids: &[String]) -> Result<Vec<JobSummary>> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match self.store.summary(id) {
                Ok(job) => out.push(job),
                Err(crate::store::StoreError::NotFound(_)) => match self.store.group(id)? {
                    Some((_, members)) => {
                        let mut jobs = self.store.summaries(&members.iter().map(String::as_str).collect::<Vec<_>>())?;
                        let order: std::collections::HashMap<&str, usize> =
                            members.iter().enumerate().map(|(i, m)| (m.as_str(), i)).collect();
                        jobs.sort_by_key(|j| order.get(j.job_id.as_str()).copied());
                        out.extend(jobs);
                    }
                    None => return Err(crate::store::StoreError::NotFound(id.clone()).into()),
                },
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    /// Whether `id` names a sweep or pipeline (and not a job).
    pub fn is_group(&self, id: &str) -> Result<bool> {
        if self.store.summary(id).is_ok() {
            return Ok(false);
        }
        Ok(self.store.group(id)?.is_some())
    }

    /// Every sweep and pipeline, newest first, with its members' statuses counted.
    pub fn groups(&self) -> Result<Vec<GroupView>> {
        let mut out = Vec::new();
        for g in self.store.groups()? {
            let members = self.store.group(&g.sweep_id)?.map(|(_, m)| m).unwrap_or_default();
            let ids: Vec<&str> = members.iter().map(String::as_str).collect();
            let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
            for j in self.store.summaries(&ids)? {
                *counts.entry(j.status.to_string()).or_default() += 1;
            }
            out.push(GroupView { group: g, jobs: members.len(), statuses: counts });
        }
        Ok(out)
    }

    /// A job's status, refreshed from the cluster unless it is already terminal.
    pub fn job_status(&self, id: &str) -> Result<JobView> {
        let job = self.store.summary(id)?;
        if job.status.is_terminal() {
            let mut view = JobView::from(&job);
            view.attempts = Some(self.store.attempts(&job.job_id)?);
            return Ok(view);
        }
        self.refresh_and_advance(std::slice::from_ref(&job))?;
        let mut view = JobView::from(&self.store.summary(&job.job_id)?);
        view.attempts = Some(self.store.attempts(&job.job_id)?);
        Ok(view)
    }

    /// Check input URIs the way a submit does: parse each, then `test -e` every shared path in one
    /// round trip. Returns, per URI, the path and whether it exists (None: not a shared path).
    pub fn check_paths(&self, uris: &[String]) -> Result<Vec<(String, PathCheck)>> {
        let parsed: Vec<_> = uris.iter().map(|u| (u.clone(), crate::spec::parse_input("path", u))).collect();
        let shared: Vec<String> = parsed
            .iter()
            .filter_map(|(_, p)| match p {
                Ok(crate::spec::InputLocation::Shared { path }) => Some(path.clone()),
                _ => None,
            })
            .collect();
        let missing = if shared.is_empty() { Vec::new() } else { cluster::missing_paths(self.remote()?, &shared)?.0 };
        Ok(parsed
            .into_iter()
            .map(|(uri, p)| {
                let result = match p {
                    Ok(crate::spec::InputLocation::Shared { path }) if missing.contains(&path) => {
                        PathCheck::Missing(path)
                    }
                    Ok(crate::spec::InputLocation::Shared { path }) => PathCheck::Exists(path),
                    Ok(crate::spec::InputLocation::Remote { uri, .. }) => PathCheck::NotChecked(uri),
                    Err(e) => PathCheck::Refused(e.message),
                };
                (uri, result)
            })
            .collect())
    }

    /// A job's attempts, first to last.
    pub fn attempts(&self, id: &str) -> Result<Vec<crate::store::AttemptRecord>> {
        let job = self.store.get(id)?;
        Ok(self.store.attempts(&job.job_id)?)
    }

    /// Refresh every given job (all active ones when `ids` is empty) in one round trip.
    pub fn refresh(&self, ids: &[String]) -> Result<Vec<JobView>> {
        if ids.is_empty() {
            return self.refresh_active(|jobs| jobs.iter().map(JobView::from).collect());
        }
        Ok(self.refresh_summaries(ids)?.iter().map(JobView::from).collect())
    }

    /// [`Client::refresh`], returning the jobs' summaries (the monitor follows thousands this way).
    pub fn refresh_summaries(&self, ids: &[String]) -> Result<Vec<JobSummary>> {
        if ids.is_empty() {
            return self.refresh_active(<[JobSummary]>::to_vec);
        }
        // A sweep or pipeline id stands for its jobs.
        let mut jobs = self.summaries_of(ids)?;
        let touched = if jobs.iter().all(|j| !j.status.is_terminal()) {
            self.refresh_and_advance(&jobs)?
        } else {
            let active: Vec<JobSummary> = jobs.iter().filter(|j| !j.status.is_terminal()).cloned().collect();
            self.refresh_and_advance(&active)?
        };
        self.reread(&mut jobs, &touched)?;
        Ok(jobs)
    }

    /// Replace the jobs a refresh changed by their stored summaries: only these are read again
    /// (usually none of thousands).
    fn reread(&self, jobs: &mut [JobSummary], touched: &[String]) -> Result<()> {
        if touched.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = touched.iter().map(String::as_str).collect();
        let fresh: std::collections::HashMap<String, JobSummary> =
            self.store.summaries(&ids)?.into_iter().map(|j| (j.job_id.clone(), j)).collect();
        // (An id given twice is replaced at both places.)
        for job in jobs {
            if let Some(f) = fresh.get(&job.job_id) {
                *job = f.clone();
            }
        }
        Ok(())
    }

    /// Refresh every active job and hand the result (those that just ended included) to `f`. The
    /// jobs come from the cache when the state file has not changed since it was filled.
    fn refresh_active<R>(&self, f: impl FnOnce(&[JobSummary]) -> R) -> Result<R> {
        let mut cache = self.active.lock().unwrap_or_else(|e| e.into_inner());
        let before = self.store.change_token()?;
        let mut jobs = match cache.take() {
            Some((token, jobs)) if token == before => jobs,
            // Only this cluster's jobs: the others are another client's to refresh.
            _ => self.store.list_summaries(true)?.into_iter().filter(|j| j.cluster == self.settings.cluster).collect(),
        };
        let touched = self.refresh_and_advance(&jobs)?;
        self.reread(&mut jobs, &touched)?;
        let result = f(&jobs);
        // Kept only if no other connection committed meanwhile (its change could be missing here);
        // this client's own writes are in `jobs` already.
        let after = self.store.change_token()?;
        if after.others == before.others {
            jobs.retain(|j| !j.status.is_terminal());
            *cache = Some((after, jobs));
        }
        Ok(result)
    }

    pub fn list(&self, active_only: bool) -> Result<Vec<JobView>> {
        Ok(self.store.list_summaries(active_only)?.iter().map(JobView::from).collect())
    }

    /// The logs of the current attempt, or of attempt `attempt` (1-based) when given.
    pub fn job_logs(&self, id: &str, tail_lines: Option<u32>, attempt: Option<u32>) -> Result<JobLogs> {
        let job = self.job_at_attempt(id, attempt)?;
        logs::read_logs(self.remote()?, &job, tail_lines)
    }

    /// The logs of a Cosmos-RL role: every task (one per node), or only `task`, of the current
    /// attempt or of attempt `attempt`.
    pub fn job_role_logs(
        &self,
        id: &str,
        role: crate::cosmos::Role,
        task: Option<u32>,
        tail_lines: Option<u32>,
        attempt: Option<u32>,
    ) -> Result<logs::RoleLogs> {
        let job = self.job_at_attempt(id, attempt)?;
        // Checked before connecting: a wrong role or task needs no round trip to be refused.
        logs::role_tasks(&job, role, task)?;
        logs::read_role_logs(self.remote()?, &job, role, task, tail_lines)
    }

    /// The job as seen from its current attempt, or from attempt `attempt` (1-based).
    fn job_at_attempt(&self, id: &str, attempt: Option<u32>) -> Result<JobRecord> {
        let job = self.store.get(id)?;
        self.on_this_cluster([&job.summary])?;
        let Some(n) = attempt else { return Ok(job) };
        let attempts = self.store.attempts(&job.job_id)?;
        let a = attempts.iter().find(|a| a.number == n).ok_or_else(|| {
            crate::spec::SpecError::new("attempt", format!("job {} has attempts 1 to {}", job.job_id, attempts.len()))
        })?;
        Ok(logs::as_attempt(&job, a))
    }

    /// Follow a job's logs until it is terminal and every byte has been read, calling `on_chunk` with
    /// each new piece. One round trip per poll (status refresh included); never re-reads a byte.
    pub fn follow_logs(
        &self,
        id: &str,
        streams: &[logs::Stream],
        interval: std::time::Duration,
        on_chunk: &mut dyn FnMut(&logs::Chunk),
    ) -> Result<JobView> {
        let main = |job: &JobRecord| logs::log_paths(job).map(|(_, out, err)| (out, err));
        self.follow_files(id, &main, streams, interval, on_chunk)
    }

    /// One poll of [`Client::follow_logs`] for callers that drive the loop themselves (the Python
    /// package's iterator): one round trip that refreshes the job and reads what its main.out and
    /// main.err gained since `cursor`. `finished` once the job was terminal before the poll and every
    /// byte has been read; `caught_up` when nothing more is waiting (poll again after a pause).
    pub fn follow_logs_poll(
        &self,
        id: &str,
        streams: &[logs::Stream],
        cursor: &mut logs::FollowCursor,
    ) -> Result<FollowPoll> {
        let job = self.store.get(id)?;
        let was_terminal = job.status.is_terminal();
        let chunks = if job.slurm_job_id.is_none() {
            // Not on Slurm yet (or outcome unknown): only a refresh, which may find or submit it.
            self.refresh_and_advance(std::slice::from_ref(&job.summary))?;
            Vec::new()
        } else {
            let (_, out, err) = logs::log_paths(&job)?;
            let files_for = |j: &JobRecord| self.files_of(j);
            logs::follow_files_once(&self.cycle(&files_for)?, &job, (&out, &err), streams, cursor)?
        };
        let caught_up = chunks.iter().all(|c| c.len < logs::MAX_CHUNK_BYTES);
        let job = JobView::from(&self.store.summary(&job.job_id)?);
        Ok(FollowPoll { job, chunks, finished: was_terminal && caught_up, caught_up })
    }

    /// [`Client::follow_logs`] for one task of a Cosmos-RL role.
    pub fn follow_role_logs(
        &self,
        id: &str,
        role: crate::cosmos::Role,
        task: u32,
        streams: &[logs::Stream],
        interval: std::time::Duration,
        on_chunk: &mut dyn FnMut(&logs::Chunk),
    ) -> Result<JobView> {
        logs::role_tasks(&self.store.get(id)?, role, Some(task))?;
        let files = |job: &JobRecord| logs::role_log_paths(job, role, task).map(|(_, out, err)| (out, err));
        self.follow_files(id, &files, streams, interval, on_chunk)
    }

    /// Follow the files `paths_of` names for the job's current attempt (they change with a retry).
    fn follow_files(
        &self,
        id: &str,
        paths_of: &dyn Fn(&JobRecord) -> Result<(String, String)>,
        streams: &[logs::Stream],
        interval: std::time::Duration,
        on_chunk: &mut dyn FnMut(&logs::Chunk),
    ) -> Result<JobView> {
        let mut cursor = logs::FollowCursor::default();
        let job = self.store.summary(id)?;
        self.on_this_cluster([&job])?;
        let job_id = job.job_id;
        loop {
            let job = self.store.get(&job_id)?;
            let was_terminal = job.status.is_terminal();
            if job.slurm_job_id.is_none() {
                // Not on Slurm yet (or outcome unknown): refresh until it has an id.
                self.refresh_and_advance(std::slice::from_ref(&job.summary))?;
                if was_terminal {
                    return Ok(JobView::from(&job));
                }
                std::thread::sleep(interval);
                continue;
            }
            let (out, err) = paths_of(&job)?;
            let files_for = |j: &JobRecord| self.files_of(j);
            let chunks = logs::follow_files_once(&self.cycle(&files_for)?, &job, (&out, &err), streams, &mut cursor)?;
            for c in &chunks {
                on_chunk(c);
            }
            let caught_up = chunks.iter().all(|c| c.len < logs::MAX_CHUNK_BYTES);
            if was_terminal && caught_up {
                return Ok(JobView::from(&job));
            }
            if caught_up {
                std::thread::sleep(interval);
            }
        }
    }

    /// Cancel one job (idempotent).
    pub fn cancel_job(&self, id: &str) -> Result<JobView> {
        Ok(self.cancel_jobs(&[id.to_string()])?.remove(0))
    }

    /// Every job in the local state, newest first (no remote call).
    pub fn list_jobs(&self) -> Result<Vec<JobView>> {
        self.list(false)
    }

    /// Follow a job until it is terminal, calling `callbacks` on each transition. Never gives up
    /// because time passed.
    pub fn wait_for(
        &self,
        id: &str,
        interval: std::time::Duration,
        callbacks: &mut dyn JobCallbacks,
    ) -> Result<JobView> {
        let mut seen_running_attempt = 0;
        let mut seen_attempt = 1;
        loop {
            let view = self.job_status(id)?;
            if view.attempt > seen_attempt {
                seen_attempt = view.attempt;
                callbacks.on_retry(&view);
            }
            if view.status == PlatformStatus::Running && seen_running_attempt != view.attempt {
                seen_running_attempt = view.attempt;
                callbacks.on_running(&view);
            }
            match view.status {
                PlatformStatus::Complete => {
                    callbacks.on_complete(&view);
                    return Ok(view);
                }
                PlatformStatus::Error => {
                    callbacks.on_error(&view);
                    return Ok(view);
                }
                PlatformStatus::Canceled => return Ok(view),
                _ => std::thread::sleep(interval),
            }
        }
    }

    /// Cancel jobs (idempotent: a terminal job stays as it is). Returns every job as it now is; a job
    /// whose cancel could not be confirmed keeps its status, and the error names it and the reason.
    pub fn cancel_jobs(&self, ids: &[String]) -> Result<Vec<JobView>> {
        // A sweep or pipeline id stands for its jobs; they are refreshed first, so that only those
        // that have not finished are cancelled (a variant that just completed stays Complete).
        let expanded;
        let ids = if ids.iter().any(|i| self.is_group(i).unwrap_or(false)) {
            expanded = self.expand_ids(ids)?;
            let active: Vec<JobSummary> = self
                .store
                .summaries(&expanded.iter().map(String::as_str).collect::<Vec<_>>())?
                .into_iter()
                .filter(|j| !j.status.is_terminal())
                .collect();
            self.refresh_and_advance(&active)?;
            expanded.as_slice()
        } else {
            ids
        };
        let jobs: Vec<JobRecord> = ids.iter().map(|i| self.store.get(i)).collect::<std::result::Result<_, _>>()?;
        self.on_this_cluster(jobs.iter().filter(|j| !j.status.is_terminal()).map(|j| &j.summary))?;
        if jobs.iter().any(|j| !j.status.is_terminal()) {
            let outcome = cancel::cancel(self.remote()?, &self.store, &jobs)?;
            if !outcome.failed.is_empty() {
                let list: Vec<String> = outcome.failed.iter().map(|(id, why)| format!("{id}: {why}")).collect();
                return Err(Error::RemoteCommand(format!(
                    "not cancelled (left as they were; try again when the controller answers): {}{}",
                    list.join("; "),
                    if outcome.cancelled.is_empty() {
                        String::new()
                    } else {
                        format!("; cancelled: {}", outcome.cancelled.join(", "))
                    }
                )));
            }
        }
        jobs.iter().map(|j| Ok(JobView::from(&self.store.summary(&j.job_id)?))).collect()
    }

    pub fn events(&self, id: &str) -> Result<Vec<(i64, String, String)>> {
        let job = self.store.get(id)?;
        Ok(self.store.events(&job.job_id)?)
    }

    /// The id of the newest event in the state file: pass it to [`Client::events_since`] later to get
    /// only what happened after now.
    pub fn last_event_id(&self) -> Result<i64> {
        Ok(self.store.last_event_id()?)
    }

    /// Events after the cursor `after` (an event id), oldest first, at most `limit`, of the given jobs
    /// (ids or prefixes) or of every job when `ids` is empty. No remote call.
    pub fn events_since(&self, after: i64, ids: &[String], limit: usize) -> Result<Vec<crate::store::EventRecord>> {
        let full: Vec<String> =
            ids.iter().map(|i| Ok(self.store.summary(i)?.job_id)).collect::<Result<Vec<String>>>()?;
        let full: Vec<&str> = full.iter().map(String::as_str).collect();
        Ok(self.store.events_since(after, &full, limit)?)
    }

    /// Jobs as the state file holds them (ids or prefixes), without asking the cluster.
    pub fn stored_jobs(&self, ids: &[String]) -> Result<Vec<JobView>> {
        // A sweep or pipeline id stands for its jobs.
        Ok(self.summaries_of(ids)?.iter().map(JobView::from).collect())
    }

    /// Slurm's start-time estimate and queue position for a job whose current attempt is pending in
    /// Slurm; None when it has no Slurm job yet or Slurm no longer lists it as pending.
    pub fn start_estimate(&self, id: &str) -> Result<Option<crate::engine::inspect::StartEstimate>> {
        let job = self.store.summary(id)?;
        self.on_this_cluster([&job])?;
        match &job.slurm_job_id {
            Some(slurm_job_id) if !job.status.is_terminal() => {
                crate::engine::inspect::start_estimate(self.remote()?, slurm_job_id)
            }
            _ => Ok(None),
        }
    }

    /// Up to `max_bytes` of a job's main.out or main.err from byte `offset` (current attempt, or
    /// attempt `attempt`), cut after the last whole line; the result says where to continue.
    pub fn log_range(
        &self,
        id: &str,
        stream: logs::Stream,
        offset: u64,
        max_bytes: u64,
        attempt: Option<u32>,
    ) -> Result<crate::engine::inspect::LogRange> {
        let mut job = self.store.get(id)?;
        self.on_this_cluster([&job.summary])?;
        if let Some(n) = attempt {
            let attempts = self.store.attempts(&job.job_id)?;
            let a = attempts.iter().find(|a| a.number == n).ok_or_else(|| {
                crate::spec::SpecError::new(
                    "attempt",
                    format!("job {} has attempts 1 to {}", job.job_id, attempts.len()),
                )
            })?;
            job = logs::as_attempt(&job, a);
        }
        let (_, out_path, err_path) = logs::log_paths(&job)?;
        let path = if stream == logs::Stream::Stdout { out_path } else { err_path };
        crate::engine::inspect::log_range(self.remote()?, &path, offset, max_bytes)
    }

    /// Each partition's limits and what its nodes have free now, with the login host that answered
    /// (one round trip; the service's cluster view).
    pub fn partition_usage(&self) -> Result<(Vec<crate::slurm::PartitionUsage>, String)> {
        self.settings.require_remote()?;
        cluster::partition_usage(self.remote()?)
    }

    /// Whether enroot credentials for nvcr.io are installed on the cluster (never the key itself).
    pub fn enroot_credentials_status(&self) -> Result<crate::engine::inspect::CredentialsStatus> {
        self.settings.require_remote()?;
        crate::engine::inspect::credentials_status(self.remote()?)
    }
}
