use super::job_args::JobArgs;
use crate::config::Settings;
use crate::error::Error;
use crate::plan::Plan;
use crate::script::StagedFile;
use crate::spec::SecretValues;
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
        let plan = crate::plan::resolve(&spec, &settings)?;
        let spec_json = serde_json::to_value(&spec).expect("spec serialises");
        let files = crate::client::staged_files_for(&settings, &plan, &spec_json);
        // Secrets need not be present to render: only their names are shown.
        print_plan(&files, &plan, &SecretValues::default(), self.json);
        Ok(0)
    }
}

/// Print the staged files and, masked, the secret environment that sbatch would carry.
pub(crate) fn print_plan(files: &[StagedFile], plan: &Plan, _secrets: &SecretValues, as_json: bool) {
    let masked: serde_json::Map<String, serde_json::Value> =
        plan.secret_names.iter().map(|n| (n.clone(), json!("***"))).collect();
    if as_json {
        let files: Vec<_> = files.iter().map(|f| json!({"path": f.path, "contents": f.contents})).collect();
        let mut out = json!({"job_id": plan.layout.job_id, "plan": plan, "files": files, "secret_env": masked});
        if let Some(c) = &plan.cosmos {
            out["cosmos_rl"] = cosmos_json(c);
        }
        super::print_json(&out);
        return;
    }
    if let Some(c) = &plan.cosmos {
        println!("{}", crate::cosmos::split_table(c));
    }
    for f in files {
        println!("==> {} <==\n{}", f.path, f.contents);
        if !f.contents.ends_with('\n') {
            println!();
        }
    }
    if !masked.is_empty() {
        println!("==> secret environment (values only in the job's mode-600 secrets file on the cluster, removed when it ends) <==");
        for name in masked.keys() {
            println!("{name}=***");
        }
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
