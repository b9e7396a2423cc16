use super::job_args::JobArgs;
use super::output::{FileRow, RenderReport};
use crate::config::Settings;
use crate::error::Error;
use crate::plan::Plan;
use crate::script::StagedFile;
use clap::Args;
use serde_json::json;

#[derive(Args, Debug)]
pub struct RenderCmd {
    #[command(flatten)]
    pub job: JobArgs,
    #[arg(long)]
    pub json: bool,
}

impl RenderCmd {
    /// Offline: no transport is ever opened here.
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let spec = self.job.to_spec()?;
        if spec.sweep.is_some() {
            // A sweep: its first variant's plan and files, and the array's script (the others differ
            // only in their values).
            let count = spec.sweep.as_ref().map(|s| s.variants()).transpose()?.map(|v| v.len()).unwrap_or(0);
            let ids: Vec<String> = (0..count).map(|i| format!("variant-{i}")).collect();
            let sweep = crate::client::plan_sweep(&spec, &settings, "render", &ids)?;
            let (v, plan) = &sweep.variants[0];
            let spec_json = serde_json::to_value(spec.for_variant(v)).expect("spec serialises");
            let mut files = crate::ops::submit::staged_files_for(&settings, plan, &spec_json);
            files.push(StagedFile { path: sweep.array_script_file(), contents: sweep.array_script() });
            print_plan(&files, plan, self.json);
            return Ok(0);
        }
        if !spec.steps.is_empty() {
            // A pipeline: every step's files (the plan shown is the first step's).
            let steps = spec.pipeline()?;
            let mut files = Vec::new();
            let mut first = None;
            for (i, step) in steps.iter().enumerate() {
                let plan = crate::plan::resolve_with_id(&step.spec, &settings, &format!("step-{i}-{}", step.name))?;
                let spec_json = serde_json::to_value(&step.spec).expect("spec serialises");
                files.extend(crate::ops::submit::staged_files_for(&settings, &plan, &spec_json));
                first.get_or_insert(plan);
            }
            print_plan(&files, first.as_ref().expect("a pipeline has a step"), self.json);
            return Ok(0);
        }
        let plan = crate::plan::resolve(&spec, &settings)?;
        let spec_json = serde_json::to_value(&spec).expect("spec serialises");
        let files = crate::ops::submit::staged_files_for(&settings, &plan, &spec_json);
        // Secrets need not be present to render: only their names are shown.
        print_plan(&files, &plan, self.json);
        Ok(0)
    }
}

/// Print the staged files and, masked, the secret environment that sbatch would carry.
pub(crate) fn print_plan(files: &[StagedFile], plan: &Plan, as_json: bool) {
    super::output::emit(super::output::Format::from_json_flag(as_json), &render_report(files, plan));
}

/// The plan, the staged files and the secret names, as `render` (and `submit --dry-run`) show them.
pub(crate) fn render_report(files: &[StagedFile], plan: &Plan) -> RenderReport {
    RenderReport {
        job_id: plan.layout.job_id.clone(),
        plan: serde_json::to_value(plan).expect("a plan serialises"),
        files: files.iter().map(|f| FileRow { path: f.path.clone(), contents: f.contents.clone() }).collect(),
        secret_env: plan.secret_names.iter().map(|n| (n.clone(), "***".to_string())).collect(),
        cosmos_rl: plan.cosmos.as_ref().map(cosmos_json),
        cosmos_table: plan.cosmos.as_ref().map(crate::cosmos::split_table),
    }
}

/// A Cosmos-RL job's split for scripts and agents: node counts, each role's replicas and nodes (the
/// launch metadata), and the notes on counts that differ from Cosmos-RL's own defaults.
fn cosmos_json(c: &crate::cosmos::CosmosPlan) -> serde_json::Value {
    let s = &c.split;
    json!({
        "gpus_per_node": s.gpus_per_node,
        "policy_nodes": s.policy_nodes(),
        "rollout_nodes": s.rollout_nodes(),
        "total_nodes": s.total_nodes(),
        "policy": s.policy,
        "rollout": s.rollout,
        "roles": c.roles(),
        "notes": c.notes,
    })
}
