use super::job_args::JobArgs;
use super::output::RenderReport;
use clap::Args;
use serde_json::json;
use tao_slurm_engine::client::Preview;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;

#[derive(Args, Debug)]
pub struct RenderCmd {
    #[command(flatten)]
    pub job: JobArgs,
    #[arg(long)]
    pub json: bool,
}

impl RenderCmd {
    /// Offline: no state is opened and no transport ever, here.
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let spec = self.job.to_spec()?;
        // Secrets need not be present to render: only their names are shown.
        let preview = tao_slurm_engine::client::preview_offline(&settings, &spec)?;
        emit_preview(&preview, self.json);
        Ok(0)
    }
}

/// Print a preview (render's, submit --dry-run's): the staged files and, masked, the secret
/// environment that sbatch would carry.
pub(crate) fn emit_preview(preview: &Preview, as_json: bool) {
    super::output::emit(super::output::Format::from_json_flag(as_json), &render_report(preview));
}

/// The preview as `render` and `submit --dry-run` show it.
pub(crate) fn render_report(p: &Preview) -> RenderReport {
    let plan = &p.plan;
    RenderReport {
        job_id: plan.layout.job_id.clone(),
        plan: serde_json::to_value(plan).expect("a plan serialises"),
        files: p.files.clone(),
        secret_env: plan.secret_names.iter().map(|n| (n.clone(), "***".to_string())).collect(),
        cosmos_rl: plan.cosmos.as_ref().map(cosmos_json),
        cosmos_table: plan.cosmos.as_ref().map(tao_slurm_engine::cosmos::split_table),
        variants: p.variants.clone(),
        array: p.array.clone(),
        steps: p.steps.clone(),
    }
}

/// A Cosmos-RL job's split for scripts and agents: node counts, each role's replicas and nodes (the
/// launch metadata), and the notes on counts that differ from Cosmos-RL's own defaults.
fn cosmos_json(c: &tao_slurm_engine::cosmos::CosmosPlan) -> serde_json::Value {
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
