//! What a submit would do, without doing it: one preview for every door and every kind of request (a
//! job, a sweep, a pipeline). Offline it is what `render` shows; online it also makes a submit's
//! checks with the cluster (the plan fitted to its partition, the inputs found) and finds the secret
//! values as a submit would. Nothing is recorded, staged or submitted.

use super::{Client, Secrets};
use crate::config::Settings;
use crate::error::Result;
use crate::plan::{self, Plan};
use crate::script::StagedFile;
use crate::spec::JobSpec;
use serde::Serialize;

/// How far a preview goes.
pub enum PreviewChecks {
    /// No connection: the spec and the settings only.
    Offline,
    /// A submit's checks with the cluster, and the secret values found where a submit finds them.
    Online(Secrets),
}

/// A request as it would be submitted.
#[derive(Debug, Clone)]
pub struct Preview {
    /// The first job's plan (a sweep's first variant, a pipeline's first step); online, fitted to
    /// its partition as the submit would fit it.
    pub plan: Plan,
    /// The files the submit would stage: the job's (batch script last), a sweep's first variant's and
    /// then the array's script, or every step's of a pipeline.
    pub files: Vec<StagedFile>,
    /// What the submit would warn of: the plan's notes, then what the online checks changed.
    pub warnings: Vec<String>,
    /// A sweep's variants, and its array's range (`0-9%2`).
    pub variants: Vec<PreviewVariant>,
    pub array: Option<String>,
    /// A pipeline's steps, in order.
    pub steps: Vec<PreviewStep>,
}

/// One variant of a sweep, as every door's preview shows it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PreviewVariant {
    pub index: u32,
    /// Its `NAME=value` words and arguments (what `TAO_SWEEP_VALUES` holds).
    pub values: String,
}

/// One step of a pipeline, as every door's preview shows it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PreviewStep {
    pub name: String,
    pub command: String,
}

/// A submit's online checks of one job: its plan fitted to the cluster, and its warnings.
type Check<'a> = &'a dyn Fn(&JobSpec) -> Result<(Plan, Vec<String>)>;

impl Client {
    /// The preview of a job, a sweep or a pipeline: each plan resolved once, the files it stages.
    pub fn preview(&self, spec: &JobSpec, checks: PreviewChecks) -> Result<Preview> {
        match checks {
            PreviewChecks::Offline => preview_offline(&self.settings, spec),
            PreviewChecks::Online(secrets) => {
                // A missing secret value fails here as it would in a submit, before any connection.
                if let Secrets::Lookup { file } = secrets {
                    super::secret_values(&spec.secret_env, file.as_deref())?;
                }
                self.settings.require_remote()?;
                build(&self.settings, spec, Some(&|s: &JobSpec| self.check_online(s)))
            }
        }
    }
}

/// [`Client::preview`] offline, with no client: no state is opened and no connection made (what
/// `render` shows).
pub fn preview_offline(settings: &Settings, spec: &JobSpec) -> Result<Preview> {
    build(settings, spec, None)
}

fn build(settings: &Settings, spec: &JobSpec, check: Option<Check<'_>>) -> Result<Preview> {
    if spec.sweep.is_some() {
        sweep(settings, spec, check)
    } else if !spec.steps.is_empty() {
        pipeline(settings, spec, check)
    } else {
        let (plan, warnings) = match check {
            Some(check) => check(spec)?,
            None => offline(plan::resolve(spec, settings)?),
        };
        let files = staged_files(settings, spec, &plan);
        Ok(Preview { plan, files, warnings, variants: Vec::new(), array: None, steps: Vec::new() })
    }
}

/// A sweep: its variants and its one array script, with its first variant's plan and files (the
/// others differ only in their values); online, that variant is checked.
fn sweep(settings: &Settings, spec: &JobSpec, check: Option<Check<'_>>) -> Result<Preview> {
    let count = spec.sweep.as_ref().map(|s| s.variants()).transpose()?.map_or(0, |v| v.len());
    let ids: Vec<String> = (0..count).map(|i| format!("variant-{i}")).collect();
    let sweep = super::plan_sweep(spec, settings, "preview", &ids)?;
    let (first, first_plan) = &sweep.variants[0];
    let variant_spec = spec.for_variant(first);
    let (plan, warnings) = match check {
        Some(check) => check(&variant_spec)?,
        None => offline(first_plan.clone()),
    };
    let mut files = staged_files(settings, &variant_spec, &plan);
    files.push(StagedFile { path: sweep.array_script_file(), contents: sweep.array_script() });
    let variants =
        sweep.variants.iter().map(|(v, _)| PreviewVariant { index: v.index, values: v.describe() }).collect();
    Ok(Preview { plan, files, warnings, variants, array: Some(sweep.array_range()), steps: Vec::new() })
}

/// A pipeline: its steps in order, every step's files, and the first step's plan (online, that step
/// is checked; the later ones wait on it).
fn pipeline(settings: &Settings, spec: &JobSpec, check: Option<Check<'_>>) -> Result<Preview> {
    let steps = spec.pipeline()?;
    let mut files = Vec::new();
    let mut first: Option<(Plan, Vec<String>)> = None;
    for (i, step) in steps.iter().enumerate() {
        let (plan, warnings) = match check.filter(|_| first.is_none()) {
            Some(check) => check(&step.spec)?,
            None => offline(plan::resolve_with_id(&step.spec, settings, &format!("step-{i}-{}", step.name))?),
        };
        files.extend(staged_files(settings, &step.spec, &plan));
        first.get_or_insert((plan, warnings));
    }
    let (plan, warnings) = first.expect("a pipeline has a step");
    let steps = steps.iter().map(|s| PreviewStep { name: s.name.clone(), command: s.spec.command.join(" ") }).collect();
    Ok(Preview { plan, files, warnings, variants: Vec::new(), array: None, steps })
}

/// An offline plan with its notes (what a submit would warn of before its checks).
fn offline(plan: Plan) -> (Plan, Vec<String>) {
    let warnings = super::submit::plan_notes(&plan).collect();
    (plan, warnings)
}

/// The files a plan stages, the batch script last.
pub(super) fn staged_files(settings: &Settings, spec: &JobSpec, plan: &Plan) -> Vec<StagedFile> {
    crate::ops::submit::staged_files_for(settings, plan, &serde_json::to_value(spec).expect("a spec always serialises"))
}
