//! Cosmos-RL jobs: a controller, policy workers and rollout workers in one allocation, sized by the
//! job's Cosmos-RL config. Pure: the config arrives as text ([`config`]), the node split is computed
//! from it ([`split`]), and [`resolve`] turns a job's `[cosmos_rl]` section into the plan that
//! `script::cosmos` renders.

pub mod config;
pub mod split;

use crate::layout::{Layout, Resources, DEFAULT_CPUS_PER_TASK};

/// The prefix of this script's own shell variables; a job may not set variables by these names.
pub const SCRIPT_VAR_PREFIX: &str = "tao_";
use crate::slurm::PartitionInfo;
use crate::spec::{CosmosRlSpec, JobSpec, SpecError};
use serde::{Deserialize, Serialize};
use split::NodeSplit;
use std::fmt;

pub use config::{parse_config, CosmosConfig};
pub use split::split_nodes;

/// Where the controller listens, on the first node (as in NVIDIA's service).
pub const CONTROLLER_PORT: u16 = 8082;
/// The first rendezvous port of a role's replicas.
pub const RENDEZVOUS_PORT: u32 = 29345;

/// Variables tao-slurm sets for a Cosmos-RL job; a job may not set them itself.
pub const COSMOS_VARS: &[&str] = &[
    "COSMOS_RL_MULTINODE",
    "COSMOS_RL_CONFIG",
    "NUM_POLICY_NODES",
    "NUM_ROLLOUT_NODES",
    "TOTAL_NODES",
    "NODE_LAUNCH_METADATA_POLICY",
    "NODE_LAUNCH_METADATA_ROLLOUT",
    "CONTROLLER_PORT",
    "CONTROLLER_NODE",
    "COSMOS_CONTROLLER_HOST",
    "POLICY_NODES",
    "ROLLOUT_NODES",
    "COSMOS_NODE_ROLE",
    "LOCAL_NODE_LIST",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Controller,
    Policy,
    Rollout,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Controller, Role::Policy, Role::Rollout];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Controller => "controller",
            Role::Policy => "policy",
            Role::Rollout => "rollout",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == text.trim())
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A resolved Cosmos-RL job, stored with its plan (a retry renders the same script from it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CosmosPlan {
    pub split: NodeSplit,
    /// The config as given; staged next to the job's specs (see [`config_file`]).
    pub config_text: String,
    /// The argv each role runs, in role order (no rollout entry without rollout nodes).
    pub commands: Vec<(Role, Vec<String>)>,
    /// Counts that differ from Cosmos-RL's own defaults (see [`config`]).
    pub notes: Vec<String>,
}

impl CosmosPlan {
    /// The roles that run: the controller and the policy always, the rollout when it has nodes.
    pub fn roles(&self) -> Vec<Role> {
        self.commands.iter().map(|(r, _)| *r).collect()
    }

    /// Tasks of a role (one per node; the controller is one task on the first node).
    pub fn tasks(&self, role: Role) -> u32 {
        match role {
            Role::Controller => 1,
            Role::Policy => self.split.policy_nodes(),
            Role::Rollout => self.split.rollout_nodes(),
        }
    }

    pub fn command(&self, role: Role) -> &[String] {
        self.commands.iter().find(|(r, _)| *r == role).map_or(&[], |(_, c)| c.as_slice())
    }
}

/// Where the config is staged on shared storage: next to the job's specs, and `$COSMOS_RL_CONFIG`
/// in the job.
pub fn config_file(layout: &Layout) -> String {
    format!("{}/specs/{}.cosmos-rl.toml", layout.base_dir, layout.job_id)
}

/// Resolve a job's `[cosmos_rl]` section: parse the config, split the nodes (`--gpus` per node,
/// default a whole node of `max_gpus_per_node`), pick each role's command. `command` is the job's
/// command as it runs (after `--shell`); a role without its own runs it.
pub fn resolve(
    spec: &JobSpec,
    section: &CosmosRlSpec,
    command: &[String],
    max_gpus_per_node: u32,
) -> Result<(Resources, CosmosPlan), SpecError> {
    if spec.total_gpus.is_some() {
        return Err(SpecError::new(
            "total_gpus",
            "a Cosmos-RL job's size comes from its config; drop --total-gpus (--gpus sets the GPUs per node)",
        ));
    }
    let g = spec.gpus.unwrap_or(max_gpus_per_node);
    if g == 0 || g > max_gpus_per_node {
        return Err(SpecError::new(
            "gpus",
            format!("a Cosmos-RL job uses 1 to {max_gpus_per_node} GPUs per node (SLURM_MAX_GPUS_PER_NODE), got {g}"),
        ));
    }
    let text = config_text(section)?;
    let config = parse_config(text)?;
    let split = split_nodes(&config, g)?;
    let total = split.total_nodes();
    if let Some(n) = spec.nodes.filter(|n| *n != total) {
        return Err(SpecError::new(
            "nodes",
            format!(
                "the Cosmos-RL config needs {total} nodes ({} policy + {} rollout) of {g} GPUs, but --nodes {n} was given; drop --nodes",
                split.policy_nodes(),
                split.rollout_nodes()
            ),
        ));
    }
    check_env_names(spec)?;
    let commands = role_commands(section, command, &split)?;
    let cpus_per_task = spec.cpus_per_task.unwrap_or(DEFAULT_CPUS_PER_TASK);
    if cpus_per_task == 0 {
        return Err(SpecError::new("cpus_per_task", "must be at least 1"));
    }
    let resources = Resources { nodes: total, gpus_per_node: g, exclusive: g == max_gpus_per_node, cpus_per_task };
    let notes = config.notes.clone();
    Ok((resources, CosmosPlan { split, config_text: text.to_string(), commands, notes }))
}

/// The section's config text, present and of a sane size.
fn config_text(section: &CosmosRlSpec) -> Result<&str, SpecError> {
    let text = section.config_text.as_deref().ok_or_else(|| {
        SpecError::new(
            "cosmos_rl.config",
            "is required: give the Cosmos-RL config with --cosmos-config FILE, or config = \"FILE\" (or config_text) in [cosmos_rl]",
        )
    })?;
    if text.len() > crate::spec::MAX_CONFIG_BYTES || text.contains('\0') {
        return Err(SpecError::new(
            "cosmos_rl.config",
            format!("must be a text file of at most {} bytes", crate::spec::MAX_CONFIG_BYTES),
        ));
    }
    Ok(text)
}

/// The job's own variables may not take the names the Cosmos-RL script sets.
fn check_env_names(spec: &JobSpec) -> Result<(), SpecError> {
    for name in spec.env.keys().chain(&spec.secret_env) {
        let field = if spec.env.contains_key(name) { "env" } else { "secret_env" };
        if COSMOS_VARS.contains(&name.as_str()) {
            return Err(SpecError::new(field, format!("{name} is set by tao-slurm for Cosmos-RL jobs")));
        }
        if name.starts_with(SCRIPT_VAR_PREFIX) {
            return Err(SpecError::new(
                field,
                format!("{name}: names beginning with tao_ are the Cosmos-RL batch script's own variables"),
            ));
        }
    }
    Ok(())
}

/// Each role's command: its own, or the job's.
fn role_commands(
    section: &CosmosRlSpec,
    command: &[String],
    split: &NodeSplit,
) -> Result<Vec<(Role, Vec<String>)>, SpecError> {
    let mut commands = Vec::new();
    for role in Role::ALL {
        if role == Role::Rollout && split.rollout.is_none() {
            continue;
        }
        let own = section.commands.get(role.as_str()).filter(|c| !c.is_empty());
        let argv = own.map_or(command, |c| c.as_slice());
        if argv.is_empty() {
            return Err(SpecError::new(
                "command",
                format!(
                    "the {role} role has no command: give the job's command after `--`, or cosmos_rl.commands.{role}"
                ),
            ));
        }
        if argv.iter().any(|w| w.contains('\0')) {
            return Err(SpecError::new(format!("cosmos_rl.commands.{role}"), "contains a NUL byte"));
        }
        commands.push((role, argv.to_vec()));
    }
    Ok(commands)
}

/// The partitions' node counts, from their TRES (`node=N`); None where a partition does not say.
fn partition_nodes(p: &PartitionInfo) -> Option<u32> {
    p.tres.split(',').find_map(|t| t.strip_prefix("node=")).and_then(|n| n.parse().ok())
}

/// A Cosmos-RL job's nodes must fit at least one of its partitions (Slurm picks among them).
pub fn check_partition_nodes(
    total: u32,
    wanted: &str,
    split: &NodeSplit,
    partitions: &[PartitionInfo],
) -> Result<(), SpecError> {
    let sizes: Vec<(&str, Option<u32>)> = wanted
        .split(',')
        .map(|name| (name, partitions.iter().find(|p| p.name == name).and_then(partition_nodes)))
        .collect();
    if sizes.iter().any(|(_, n)| n.is_none_or(|n| n >= total)) {
        return Ok(());
    }
    let listed: Vec<String> = sizes.iter().map(|(name, n)| format!("{name} has {}", n.unwrap_or(0))).collect();
    Err(SpecError::new(
        "cosmos_rl.config",
        format!(
            "the job needs {total} nodes ({} policy + {} rollout of {} GPUs), more than its partition has ({}); lower n_init_replicas or the parallelism sizes, or use a larger partition",
            split.policy_nodes(),
            split.rollout_nodes(),
            split.gpus_per_node,
            listed.join(", ")
        ),
    ))
}

/// The split as a table for people: each node of each role and what runs on it.
pub fn split_table(plan: &CosmosPlan) -> String {
    let s = &plan.split;
    let mut out = format!(
        "Cosmos-RL node split, {} GPUs per node: {} policy + {} rollout = {} nodes; the controller runs on policy node 0 (port {CONTROLLER_PORT})\n",
        s.gpus_per_node,
        s.policy_nodes(),
        s.rollout_nodes(),
        s.total_nodes()
    );
    out.push_str("role     node  replica  nnode  rendezvous  port   visible GPUs\n");
    let roles = [(Role::Policy, Some(&s.policy)), (Role::Rollout, s.rollout.as_ref())];
    for (role, split) in roles {
        let Some(split) = split else { continue };
        let mut replica = 0;
        for (i, node) in split.nodes.iter().enumerate() {
            for r in &node.colocation {
                // A replica spanning several nodes is one replica on each of them.
                let index = if r.nnode > 1 { r.rendezvous_node / r.nnode } else { replica };
                let gpus = match (r.visible_gpus.first(), r.visible_gpus.last()) {
                    (Some(a), Some(b)) if a != b => format!("{a}-{b}"),
                    (Some(a), _) => a.to_string(),
                    _ => "-".into(),
                };
                out.push_str(&format!(
                    "{:<8} {:<5} {:<8} {:<6} {:<11} {:<6} {gpus}\n",
                    role.as_str(),
                    i,
                    index,
                    r.nnode,
                    format!("node {}", r.rendezvous_node),
                    r.rendezvous_port
                ));
                if r.nnode == 1 {
                    replica += 1;
                }
            }
        }
    }
    for note in &plan.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::spec;
    use crate::spec::RoleCommands;

    const TWO_AND_TWO: &str = "[policy.parallelism]\ntp_size = 2\ndp_shard_size = 8\n[rollout.parallelism]\ntp_size = 4\nn_init_replicas = 4\n";

    fn section(text: &str) -> CosmosRlSpec {
        CosmosRlSpec { config_text: Some(text.into()), ..CosmosRlSpec::default() }
    }

    #[test]
    fn resolves_resources_and_commands() {
        let cmd = vec!["python".to_string(), "launch.py".to_string()];
        let mut sec = section(TWO_AND_TWO);
        sec.commands = RoleCommands { controller: vec!["ctl".into()], ..RoleCommands::default() };
        let (r, plan) = resolve(&spec(), &sec, &cmd, 8).unwrap();
        assert_eq!((r.nodes, r.gpus_per_node, r.exclusive, r.cpus_per_task), (4, 8, true, 16));
        assert_eq!(plan.roles(), vec![Role::Controller, Role::Policy, Role::Rollout]);
        assert_eq!(plan.command(Role::Controller), ["ctl"]);
        assert_eq!(plan.command(Role::Policy), cmd.as_slice());
        assert_eq!((plan.tasks(Role::Controller), plan.tasks(Role::Policy), plan.tasks(Role::Rollout)), (1, 2, 2));
        // Fewer GPUs per node: more, smaller nodes.
        let (r, _) = resolve(&JobSpec { gpus: Some(4), ..spec() }, &sec, &cmd, 8).unwrap();
        assert_eq!((r.nodes, r.gpus_per_node, r.exclusive), (8, 4, false));
        let (_, sft) = resolve(&spec(), &section("[train.train_policy]\ntype = \"sft\"\n"), &cmd, 8).unwrap();
        assert_eq!(sft.roles(), vec![Role::Controller, Role::Policy]);
        // Every role with its own command: the job needs none.
        let mut own = section(TWO_AND_TWO);
        own.commands =
            RoleCommands { controller: vec!["c".into()], policy: vec!["p".into()], rollout: vec!["r".into()] };
        let plan = crate::plan::resolve_with_id(
            &JobSpec { command: vec![], cosmos_rl: Some(own), ..spec() },
            &crate::plan::tests::settings(),
            "00000000-0000-4000-8000-000000000000",
        )
        .unwrap();
        assert_eq!(plan.cosmos.unwrap().command(Role::Rollout), ["r"]);
    }

    #[test]
    fn invalid_jobs_name_the_field() {
        let cmd = vec!["x".to_string()];
        let sec = section(TWO_AND_TWO);
        let cases: Vec<(JobSpec, CosmosRlSpec, Vec<String>, &str)> = vec![
            (JobSpec { total_gpus: Some(16), ..spec() }, sec.clone(), cmd.clone(), "total_gpus"),
            (JobSpec { gpus: Some(9), ..spec() }, sec.clone(), cmd.clone(), "gpus"),
            (JobSpec { gpus: Some(0), ..spec() }, sec.clone(), cmd.clone(), "gpus"),
            (JobSpec { nodes: Some(3), ..spec() }, sec.clone(), cmd.clone(), "nodes"),
            (spec(), CosmosRlSpec::default(), cmd.clone(), "cosmos_rl.config"),
            (spec(), section("[policy.parallelism]\ntp_size = 0\n"), cmd.clone(), "policy.parallelism.tp_size"),
            (spec(), section("[policy.parallelism]\ntp_size = 3\n"), cmd.clone(), "policy.parallelism"),
            (spec(), sec.clone(), vec![], "command"),
            (JobSpec { cpus_per_task: Some(0), ..spec() }, sec.clone(), cmd.clone(), "cpus_per_task"),
            (
                JobSpec { env: [("POLICY_NODES".to_string(), "x".to_string())].into(), ..spec() },
                sec.clone(),
                cmd.clone(),
                "env",
            ),
            (JobSpec { secret_env: vec!["COSMOS_NODE_ROLE".into()], ..spec() }, sec.clone(), cmd.clone(), "secret_env"),
            (
                JobSpec { env: [("tao_step".to_string(), "x".to_string())].into(), ..spec() },
                sec.clone(),
                cmd.clone(),
                "env",
            ),
        ];
        for (job, sec, cmd, field) in cases {
            let err = resolve(&job, &sec, &cmd, 8).unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
        let err = resolve(&JobSpec { nodes: Some(3), ..spec() }, &sec, &cmd, 8).unwrap_err();
        assert!(err.message.contains("needs 4 nodes (2 policy + 2 rollout)"), "{err}");
    }

    #[test]
    fn the_partition_must_hold_the_nodes() {
        let parts = crate::slurm::parse_partitions(
            "PartitionName=small TRES=cpu=8,node=2,gres/gpu=16\nPartitionName=big TRES=cpu=64,node=16\nPartitionName=odd\n",
        );
        let split = split_nodes(&parse_config(TWO_AND_TWO).unwrap(), 8).unwrap();
        let err = check_partition_nodes(4, "small", &split, &parts).unwrap_err();
        assert_eq!(err.field, "cosmos_rl.config");
        assert!(err.message.contains("needs 4 nodes (2 policy + 2 rollout of 8 GPUs)"), "{err}");
        assert!(err.message.contains("small has 2"), "{err}");
        assert!(check_partition_nodes(4, "small,big", &split, &parts).is_ok(), "Slurm may pick the big one");
        assert!(check_partition_nodes(4, "odd", &split, &parts).is_ok(), "no node count: Slurm decides");
        assert!(check_partition_nodes(2, "small", &split, &parts).is_ok());
    }

    #[test]
    fn the_table_shows_every_replica() {
        let (_, plan) = resolve(&spec(), &section(TWO_AND_TWO), &["x".to_string()], 8).unwrap();
        let table = split_table(&plan);
        assert!(table.starts_with("Cosmos-RL node split, 8 GPUs per node: 2 policy + 2 rollout = 4 nodes"), "{table}");
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(rows.len(), 6, "{table}");
        assert!(rows[0].starts_with("policy   0     0        2      node 0      29345  0-7"), "{table}");
        assert!(rows[5].starts_with("rollout  1     3        1      node 1      29348  4-7"), "{table}");
    }
}
