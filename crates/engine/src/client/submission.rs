//! Submission: a spec checked offline and online, its image made ready, recorded, then submitted as
//! a job, a sweep (one job array) or a pipeline.

use super::submit::{Admit, Hooks, Recorded};
use super::{Client, PipelineSubmitted, StepSubmitted, Submitted};
use crate::engine::known_facts::{self, KnownFacts};
use crate::engine::{cluster, depend, submit};
use crate::error::{Error, Result};
use crate::plan::{self, Plan};
use crate::remote::RemoteError;
use crate::script;
use crate::spec::{JobSpec, SecretValues};
use crate::store::JobSummary;

impl Client {
    /// Validate and resolve a spec offline (what `render` prints).
    pub fn plan(&self, spec: &JobSpec) -> Result<Plan> {
        Ok(plan::resolve(spec, &self.settings)?)
    }

    /// The files a plan stages, the batch script last.
    pub(crate) fn staged_files(&self, spec: &JobSpec, plan: &Plan) -> Vec<script::StagedFile> {
        super::preview::staged_files(&self.settings, spec, plan)
    }

    /// The checks a submit makes with the cluster (it answers, the partitions exist and allow the wall
    /// time; a job without a time gets the default capped at their MaxTime), after every offline check
    /// has passed. Submits nothing. Returns the plan as it would be submitted and its warnings.
    /// The warnings are those a submit would return: the plan's notes, then what the checks changed.
    pub(crate) fn check_online(&self, spec: &JobSpec) -> Result<(Plan, Vec<String>)> {
        let checked = self.check_online_with_image(spec, self.plan(spec)?)?;
        let warnings = super::submit::plan_notes(&checked.plan).chain(checked.warnings).collect();
        Ok((checked.plan, warnings))
    }

    /// Whether this submit converts its image into the squashfs cache.
    pub(super) fn wants_sqsh(&self, spec: &JobSpec, plan: &Plan) -> bool {
        self.settings.use_sqsh && !spec.no_sqsh && !plan.image.is_sqsh_path
    }

    /// The online checks, plus (in the same round trip) whether the image is already in the cache.
    fn check_online_with_image(&self, spec: &JobSpec, mut plan: Plan) -> Result<Checked> {
        // Settings and spec are checked before anything touches the network.
        self.settings.require_remote()?;
        let probe = if self.wants_sqsh(spec, &plan) {
            crate::sqsh::cached_probe_script(&self.settings.sqsh_policy(), &plan.image)
        } else {
            String::new()
        };
        let facts = self.grouped_facts(plan.required_paths.clone(), probe)?;
        if !facts.missing_paths.is_empty() {
            return Err(crate::spec::SpecError::new(
                "inputs",
                submit::missing_inputs_message(&facts.host, &facts.missing_paths),
            )
            .into());
        }
        let image = plan.image.pyxis.clone();
        self.learn_facts(&facts.partitions, facts.cached_sqsh.as_deref().map(|path| (image.as_str(), path)));
        let warnings = plan::fit_partition_limits(spec, &self.settings, &mut plan, &facts.partitions)?;
        Ok(Checked {
            plan,
            cached: facts.cached_sqsh,
            warnings: warnings.into_iter().collect(),
            partitions: facts.partitions,
            checks: String::new(),
        })
    }

    /// The online checks from what the last ones found, with no round trip (see
    /// `engine::known_facts`): the plan fitted to the partitions as they were, the image's squashfs
    /// file as the cache held it, and the checks that can differ from job to job (input paths, the
    /// image's file) left to the submission itself. None when nothing fresh is known, the image's file
    /// is not known (or is one the cache may convert again), or the known partitions do not fit (the
    /// checks then say why with facts of now).
    fn check_known(&self, spec: &JobSpec, mut plan: Plan) -> Option<Checked> {
        let known = self.known_facts()?;
        let policy = self.settings.sqsh_policy();
        let sqsh = if self.wants_sqsh(spec, &plan) {
            let reconverts = crate::sqsh::is_latest(&plan.image)
                && (policy.force_reconvert_latest || policy.latest_max_age_hours > 0);
            if reconverts {
                return None;
            }
            // Only the file this cache would hold: a cache directory changed since (another
            // setting, another results base) is probed and converted into, never passed over.
            let path = crate::sqsh::cache_path(&policy, &plan.image);
            Some(known.sqsh.get(&plan.image.pyxis).filter(|known| **known == path)?.clone())
        } else {
            None
        };
        let warnings = plan::fit_partition_limits(spec, &self.settings, &mut plan, &known.partitions).ok()?;
        let checks = crate::ops::cluster::submission_checks_script(&plan.required_paths, sqsh.as_deref());
        Some(Checked {
            plan,
            cached: sqsh,
            warnings: warnings.into_iter().collect(),
            partitions: known.partitions,
            checks,
        })
    }

    /// What this identity's last checks found, while fresh: this process's, else the last command's.
    fn known_facts(&self) -> Option<KnownFacts> {
        let (now, ttl) = (crate::clock::now(), self.settings.checks_ttl_secs);
        if ttl == 0 {
            return None;
        }
        let mut known = self.queues.known.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = known.as_ref().filter(|k| k.fresh(now, ttl)) {
            return Some(k.clone());
        }
        let loaded = known_facts::load(&self.settings.control_dir, &self.facts_identity(), now, ttl)?;
        *known = Some(loaded.clone());
        Some(loaded)
    }

    /// Keep what checks just found: the partitions, and where the image's squashfs file is (image as
    /// given, its file).
    fn learn_facts(&self, partitions: &[crate::slurm::PartitionInfo], image: Option<(&str, &str)>) {
        if self.settings.checks_ttl_secs == 0 {
            return;
        }
        let now = crate::clock::now();
        let mut known = self.queues.known.lock().unwrap_or_else(|e| e.into_inner());
        let mut facts = known.take().filter(|k| k.fresh(now, self.settings.checks_ttl_secs)).unwrap_or_default();
        facts.at = now;
        facts.partitions = partitions.to_vec();
        if let Some((image, path)) = image {
            facts.sqsh.insert(image.to_string(), path.to_string());
        }
        known_facts::save(&self.settings.control_dir, &self.facts_identity(), &facts);
        *known = Some(facts);
    }

    /// Drop what the checks found (a submission found it out of date, or sbatch refused a job).
    fn forget_facts(&self) {
        *self.queues.known.lock().unwrap_or_else(|e| e.into_inner()) = None;
        known_facts::forget(&self.settings.control_dir, &self.facts_identity());
    }

    fn facts_identity(&self) -> String {
        crate::engine::group_commit::cluster_identity(&self.settings)
    }

    /// The online checks of one submit, in one round trip with those of the submits that arrive at
    /// the same time (group commit; `TAO_SLURM_SUBMIT_BATCH=1`: alone).
    fn grouped_facts(&self, paths: Vec<String>, probe: String) -> Result<crate::ops::cluster::SubmitFacts> {
        let remote = self.remote()?;
        let max = self.settings.submit_batch as usize;
        if max <= 1 {
            return cluster::submit_facts(remote, &paths, &probe);
        }
        let wait = std::time::Duration::from_millis(self.settings.submit_batch_wait_ms.into());
        self.queues
            .checks
            .run(submit::CheckRequest { paths, probe }, max, wait, |batch| submit::facts_batch(remote, batch))
    }

    /// Record a new job, in one transaction with the records of the jobs created at the same time
    /// (group commit, as many as a batch of submissions; `TAO_SLURM_SUBMIT_BATCH=1`: alone).
    fn record_grouped(&self, job: crate::store::NewJob) -> Result<()> {
        let max = self.settings.submit_batch as usize;
        if max <= 1 {
            return Ok(self
                .store
                .in_transaction(|| self.store.insert_member(&job.spec_json, &job.plan, &job.member, job.now))?);
        }
        self.queues.records.run(job, max, std::time::Duration::ZERO, |batch| {
            self.store.record_jobs(batch).into_iter().map(|r| r.map_err(Error::from)).collect()
        })
    }

    /// Submit one recorded attempt, in one round trip with the submits that arrive at the same time
    /// (group commit); its outcome recorded as a lone submit's is.
    fn submit_grouped(&self, request: submit::SubmitRequest) -> Result<Submitted> {
        // This process's monitor leaves it alone meanwhile (however long the queue).
        let _in_flight = crate::engine::in_flight::claim(&request.ticket.slurm_job_name);
        let remote = self.remote()?;
        let max = self.settings.submit_batch as usize;
        if max <= 1 {
            return submit::submit_request(remote, &self.store, request);
        }
        let wait = std::time::Duration::from_millis(self.settings.submit_batch_wait_ms.into());
        self.queues.submits.run(request, max, wait, |batch| submit::submit_batch(remote, &self.store, batch))
    }

    /// Convert a registry image into the shared squashfs cache, or find it there (`image import`).
    pub fn prepare_image(&self, image: &str, force: bool) -> Result<crate::engine::image::Prepared> {
        self.settings.require_remote()?;
        let image = crate::spec::ImageRef::parse(image).map_err(|m| crate::spec::SpecError::new("image", m))?;
        if image.is_sqsh_path {
            return Err(crate::spec::SpecError::new("image", "is already a .sqsh file").into());
        }
        crate::engine::image::prepare(self.remote()?, &self.settings.sqsh_policy(), &image, force, true)
    }

    /// The online checks, the image made ready (the squashfs cache), and the secret values completed
    /// by the forwarded credentials: what every submission needs before it records anything.
    fn ready(&self, spec: &JobSpec, plan: Plan, secrets: &SecretValues) -> Result<Ready> {
        let checked = self.check_online_with_image(spec, plan)?;
        self.ready_checked(spec, checked, secrets)
    }

    /// [`Client::ready`] of a plan already checked (online, or from known facts).
    fn ready_checked(&self, spec: &JobSpec, checked: Checked, secrets: &SecretValues) -> Result<Ready> {
        let Checked { mut plan, cached, mut warnings, partitions, checks } = checked;
        if let Some(path) = cached {
            // Already in the cache (learned in the checks' round trip): no conversion round trip.
            plan.image.pyxis = path;
            plan.image.is_sqsh_path = true;
        } else if self.wants_sqsh(spec, &plan) {
            // Converted once into the shared cache; every node then reads the file instead of pulling.
            match crate::engine::image::prepare(self.remote()?, &self.settings.sqsh_policy(), &plan.image, false, true)
            {
                Ok(prepared) => {
                    self.learn_facts(&partitions, Some((plan.image.pyxis.as_str(), prepared.sqsh_path.as_str())));
                    plan.image.pyxis = prepared.sqsh_path;
                    plan.image.is_sqsh_path = true;
                }
                Err(e) if spec.allow_registry_pull || self.settings.allow_registry_pull => {
                    warnings.push(format!(
                        "warning: {e}\nwarning: submitting with the registry image: every node pulls it at job start"
                    ));
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
        Ok(Ready { plan, secrets, warnings, partitions, checks })
    }

    /// The jobs `after` names (`JOB[:ok|:notok|:any]`, ids or prefixes), as full ids with the kind.
    pub(super) fn resolve_after(&self, after: &[String]) -> Result<Vec<(String, crate::spec::DependKind)>> {
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
            out.extend(parents.into_iter().map(|p| (p.facts.job_id, kind)));
        }
        Ok(out)
    }

    /// Validate, record, stage and submit a job. `secrets` holds the values of `spec.secret_env`.
    /// A spec with a `[sweep]` or `[[steps]]` section is refused here: see [`Client::create_sweep`] and
    /// [`Client::create_pipeline`].
    pub fn create_job(&self, spec: &JobSpec, secrets: &SecretValues) -> Result<Submitted> {
        let (spec, _) = self.send_workdir(spec)?;
        self.create_job_planned(&spec, self.plan(&spec)?, secrets)
    }

    /// [`Client::create_job`] of a spec the caller already resolved with [`Client::plan`] (to show
    /// its warnings first): the plan is not resolved a second time.
    pub fn create_job_planned(&self, spec: &JobSpec, plan: Plan, secrets: &SecretValues) -> Result<Submitted> {
        self.create_job_hooked(spec, plan, secrets, Hooks { admit: &|_| Ok(()), recorded: None })
    }

    /// [`Client::create_job_planned`] with a door's hooks: the plan first passed to its `admit`, and
    /// the door told once the job is recorded. A door told has answered already, so the job is kept
    /// whatever follows: a refusal ends it Error with its own message ([`Client::keep_refused`]),
    /// where a door that waits gets the error and no job remains.
    pub(super) fn create_job_hooked(
        &self,
        spec: &JobSpec,
        plan: Plan,
        secrets: &SecretValues,
        hooks: Hooks<'_>,
    ) -> Result<Submitted> {
        let Some(recorded) = hooks.recorded else {
            return self.create_job_admitted(spec, plan, secrets, hooks.admit, None);
        };
        let told = std::sync::atomic::AtomicBool::new(false);
        // Told once: a submission whose known facts were stale records the job a second time.
        let tell = |id: &str, warnings: &[String]| {
            if !told.swap(true, std::sync::atomic::Ordering::SeqCst) {
                recorded(id, warnings)
            }
        };
        let result = self.create_job_admitted(spec, plan.clone(), secrets, hooks.admit, Some(&tell));
        if let Err(e) = &result {
            if told.load(std::sync::atomic::Ordering::SeqCst) {
                self.keep_refused(spec, &plan, e)?;
            }
        }
        result
    }

    /// A job the door answered for that its submission then refused (or never sent): recorded again
    /// if the refusal had forgotten it, then ended as [`submit::keep_refused`] says.
    fn keep_refused(&self, spec: &JobSpec, plan: &Plan, e: &Error) -> Result<()> {
        let id = &plan.layout.job_id;
        let job = match self.store.get(id) {
            Err(crate::store::StoreError::NotFound(_)) => {
                let member = crate::store::Member { webhooks: webhooks_of(spec)?, ..Default::default() };
                let spec_json = serde_json::to_string(spec).expect("spec serialises");
                let now = crate::clock::now();
                self.store.in_transaction(|| self.store.insert_member(&spec_json, plan, &member, now))?;
                self.store.get(id)?
            }
            found => found?,
        };
        submit::keep_refused(&self.store, &job, e, crate::clock::now())
    }

    /// [`Client::create_job_planned`], the plan first passed to the door's `admit`, and `recorded`
    /// told once the job is in the store.
    fn create_job_admitted(
        &self,
        spec: &JobSpec,
        plan: Plan,
        secrets: &SecretValues,
        admit: Admit<'_>,
        recorded: Option<Recorded<'_>>,
    ) -> Result<Submitted> {
        let _span = super::job_span(&plan.layout.job_id).entered();
        if spec.sweep.is_some() {
            return Err(crate::spec::SpecError::new("sweep", "submit a sweep with create_sweep").into());
        }
        if !spec.steps.is_empty() {
            return Err(crate::spec::SpecError::new("steps", "submit a pipeline with create_pipeline").into());
        }
        if spec.workdir.is_some() && spec.workdir_archive.is_none() {
            return Err(crate::spec::SpecError::new(
                "workdir",
                "send it first (Client::send_workdir), or submit with create_job or submit",
            )
            .into());
        }
        let after = self.resolve_after(&spec.after)?;
        admit(&plan)?;
        // With what the last checks found, one round trip: the submission checks the job's own
        // inputs and image file itself. If it finds the cluster changed, the checks run again first.
        if let Some(checked) = self.check_known(spec, plan.clone()) {
            let ready = self.ready_checked(spec, checked, secrets)?;
            match self.record_and_submit(spec, &after, ready, recorded) {
                Err(Error::Spec(e)) if e.field == "image" && e.message.starts_with(submit::STALE_FACTS) => {
                    self.forget_facts();
                }
                other => return other,
            }
        }
        let ready = self.ready(spec, plan, secrets)?;
        self.record_and_submit(spec, &after, ready, recorded)
    }

    /// Record a job whose plan is ready and submit it (with the submits that arrive at the same
    /// time); a submission whose outcome is unknown is looked up by the job's unique name.
    fn record_and_submit(
        &self,
        spec: &JobSpec,
        after: &[(String, crate::spec::DependKind)],
        ready: Ready,
        recorded: Option<Recorded<'_>>,
    ) -> Result<Submitted> {
        let Ready { plan, secrets, warnings, checks, .. } = ready;
        let secrets = &secrets;
        let files = self.staged_files(spec, &plan);
        let member = crate::store::Member {
            after: after.iter().map(|(id, kind)| (id.clone(), kind.as_str().to_string())).collect(),
            webhooks: webhooks_of(spec)?,
            ..Default::default()
        };
        self.record_grouped(crate::store::NewJob {
            spec_json: serde_json::to_string(spec).expect("spec serialises"),
            plan: plan.clone(),
            member,
            now: crate::clock::now(),
        })?;
        // A job recorded with no dependencies has no gate (not asked of the store: a query less per create).
        let gate = if after.is_empty() {
            None
        } else {
            depend::gate_or_refuse(&self.store, &plan.layout.job_id, crate::clock::now())?
        };
        if let Some(told) = recorded {
            let shown: Vec<String> = super::submit::plan_notes(&plan).chain(warnings.iter().cloned()).collect();
            told(&plan.layout.job_id, &shown);
        }
        let ticket = crate::ops::submit::AttemptTicket::first(&plan);
        let result = self.submit_grouped(submit::SubmitRequest {
            plan: plan.clone(),
            files,
            secrets: secrets.clone(),
            ticket,
            gate,
            checks,
        });
        if let Err(Error::Spec(_)) = &result {
            // The submission's own checks refused it before anything was staged: the job never
            // reached the cluster, and is forgotten as a refusal of the online checks leaves none.
            self.store.forget_unsent(&plan.layout.job_id)?;
            return result;
        }
        if result.is_err() {
            // A failed submission may have written the secrets file before it stopped.
            crate::engine::secrets::sweep_or_warn(self.remote()?, &self.store);
        }
        if let Err(Error::RemoteCommand(message)) = &result {
            // sbatch refused it for its partition or its time limit: the partitions may have changed
            // since the checks the plan was fitted with.
            let m = message.to_lowercase();
            if m.contains("partition") || m.contains("time limit") {
                self.forget_facts();
            }
        }
        match result {
            Err(Error::Remote(
                RemoteError::Lost { host, message } | RemoteError::TimedOut { host, detail: message, .. },
            )) => {
                // The outcome is unknown: look the job up by its unique name (never resubmit blindly).
                let job = self.store.get(&plan.layout.job_id)?;
                let _ = self.refresh_and_advance(std::slice::from_ref(&job.summary));
                let job = self.store.get(&plan.layout.job_id)?;
                match (job.summary.facts.slurm_job_id, job.summary.facts.login_host) {
                    (Some(slurm_job_id), Some(login_host)) => Ok(Submitted {
                        job_id: job.summary.facts.job_id,
                        slurm_job_id,
                        login_host,
                        job_dir: plan.layout.base_dir.clone(),
                        warnings,
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
            // Its outcome is unknown too: the job stays Pending, and a refresh finds it by name.
            Err(Error::Remote(e @ RemoteError::OutputTooLarge { .. })) => Err(e.into()),
            Err(Error::Remote(e)) => {
                // Nothing was sent: the job never reached the cluster.
                submit::record_not_submitted(&self.store, &[&plan.layout.job_id], &e, crate::clock::now())?;
                Err(e.into())
            }
            Ok(submitted) => Ok(Submitted { warnings, ..submitted }),
            Err(e) => Err(e),
        }
    }

    /// Validate, record, stage and submit a sweep (`spec.sweep`): every variant a job of its own, all
    /// of them one Slurm job array, staged and submitted in one round trip (after the checks' one).
    pub fn create_sweep(&self, spec: &JobSpec, secrets: &SecretValues) -> Result<crate::engine::sweep::SweepSubmitted> {
        self.create_sweep_admitted(spec, secrets, &|_| Ok(()))
    }

    /// [`Client::create_sweep`], every variant's plan first passed to the door's `admit`.
    pub(super) fn create_sweep_admitted(
        &self,
        spec: &JobSpec,
        secrets: &SecretValues,
        admit: Admit<'_>,
    ) -> Result<crate::engine::sweep::SweepSubmitted> {
        if !spec.after.is_empty() {
            return Err(crate::spec::SpecError::new("after", "a sweep cannot run after other jobs (yet)").into());
        }
        let sweep_id = uuid::Uuid::new_v4().to_string();
        let count = spec.sweep.as_ref().map(|s| s.variants()).transpose()?.map(|v| v.len()).unwrap_or(0);
        let ids: Vec<String> = (0..count).map(|_| uuid::Uuid::new_v4().to_string()).collect();
        // Every variant is validated offline before anything reaches the cluster.
        let mut sweep = crate::ops::sweep::plan_sweep(spec, &self.settings, &sweep_id, &ids)?;
        for (_, plan) in &sweep.variants {
            admit(plan)?;
        }
        let first_spec = spec.for_variant(&sweep.variants[0].0);
        let Ready { plan: ready, secrets, mut warnings, partitions, .. } =
            self.ready(&first_spec, sweep.variants[0].1.clone(), secrets)?;
        let base = spec.without_sweep();
        let specs: Vec<JobSpec> = sweep.variants.iter().map(|(v, _)| base.for_variant(v)).collect();
        for ((_, plan), variant) in sweep.variants.iter_mut().zip(&specs) {
            plan.image = ready.image.clone();
            // Each variant's own wall time fitted (the first one's warning is already in the list).
            let fitted = plan::fit_partition_limits(variant, &self.settings, plan, &partitions)?;
            warnings.extend(fitted.filter(|w| !warnings.contains(w)));
        }
        let files: Vec<Vec<script::StagedFile>> =
            sweep.variants.iter().zip(&specs).map(|((_, plan), s)| self.staged_files(s, plan)).collect();
        let spec_jsons: Vec<String> =
            specs.iter().map(|s| serde_json::to_string(s).expect("spec serialises")).collect();
        let webhooks = webhooks_of(spec)?;
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
                        webhooks: webhooks.clone(),
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
            crate::clock::now(),
        )?;
        let result = crate::engine::sweep::submit_sweep(self.remote()?, &self.store, &sweep, &files, &secrets);
        if let Err(Error::Remote(e)) = &result {
            if !matches!(
                e,
                RemoteError::Lost { .. } | RemoteError::TimedOut { .. } | RemoteError::OutputTooLarge { .. }
            ) {
                // Nothing was sent: the sweep never reached the cluster.
                let ids: Vec<&str> = sweep.variants.iter().map(|(_, p)| p.layout.job_id.as_str()).collect();
                submit::record_not_submitted(&self.store, &ids, e, crate::clock::now())?;
            }
        }
        if result.is_err() {
            crate::engine::secrets::sweep_or_warn(self.remote()?, &self.store);
        }
        result.map(|submitted| crate::engine::sweep::SweepSubmitted { warnings, ..submitted })
    }

    /// Validate, record and submit a pipeline (`spec.steps`): each step a job of its own, submitted
    /// in order with a Slurm dependency on the steps it runs after (kept across their retries).
    /// Each step sees the results directory of every earlier step as `TAO_AFTER_<STEP>_RESULTS_DIR`.
    pub fn create_pipeline(&self, spec: &JobSpec, secrets: &SecretValues) -> Result<PipelineSubmitted> {
        self.create_pipeline_admitted(spec, secrets, &|_| Ok(()))
    }

    /// [`Client::create_pipeline`], every step's plan first passed to the door's `admit`.
    pub(super) fn create_pipeline_admitted(
        &self,
        spec: &JobSpec,
        secrets: &SecretValues,
        admit: Admit<'_>,
    ) -> Result<PipelineSubmitted> {
        let steps = spec.pipeline()?;
        let webhooks = webhooks_of(spec)?;
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
            admit(&plan)?;
            plans.push(plan);
        }
        let mut ready_secrets = Vec::new();
        let mut warnings = Vec::new();
        for (step, plan) in steps.iter().zip(&mut plans) {
            let ready = self.ready(&step.spec, plan.clone(), secrets)?;
            // The step's plan as fitted: its image, its wall time capped when it asked for none.
            *plan = ready.plan;
            ready_secrets.push(ready.secrets);
            warnings.extend(ready.warnings.into_iter().map(|w| format!("step {}: {w}", step.name)));
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
                    crate::store::Member {
                        sweep_id: Some(pipeline_id.clone()),
                        after,
                        webhooks: webhooks.clone(),
                        ..Default::default()
                    },
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
            crate::clock::now(),
        )?;
        let mut submitted = Vec::new();
        for ((step, plan), secrets) in steps.iter().zip(&plans).zip(&ready_secrets) {
            let files = self.staged_files(&step.spec, plan);
            let gate = depend::gate_or_refuse(&self.store, &plan.layout.job_id, crate::clock::now())?;
            let ticket = crate::ops::submit::AttemptTicket::first(plan);
            let s = submit::submit_gated(self.remote()?, &self.store, plan, &files, secrets, ticket, gate.as_ref())?;
            submitted.push(StepSubmitted { name: step.name.clone(), job_id: s.job_id, slurm_job_id: s.slurm_job_id });
        }
        Ok(PipelineSubmitted { pipeline_id, steps: submitted, warnings })
    }
}

/// What the online checks found: the plan fitted to the partitions, the cached image, the warnings.
struct Checked {
    plan: Plan,
    cached: Option<String>,
    warnings: Vec<String>,
    partitions: Vec<crate::slurm::PartitionInfo>,
    /// The checks the submission makes itself (when made from known facts), or empty.
    checks: String,
}

/// A plan ready to submit, the secret values completed, and what the caller is to be warned of.
struct Ready {
    plan: Plan,
    secrets: SecretValues,
    warnings: Vec<String>,
    partitions: Vec<crate::slurm::PartitionInfo>,
    checks: String,
}

/// A spec's own webhooks (`--notify`), checked (only http and https URLs).
fn webhooks_of(spec: &JobSpec) -> Result<Vec<String>> {
    crate::notify::parse_webhooks(spec.notify.iter().map(String::as_str))
        .map_err(|m| crate::spec::SpecError::new("notify", m))?;
    Ok(spec.notify.iter().map(|u| u.trim().to_string()).filter(|u| !u.is_empty()).collect())
}
