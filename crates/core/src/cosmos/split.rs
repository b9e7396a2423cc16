//! Which nodes each Cosmos-RL role gets, and how its replicas sit on them: the launch metadata that
//! Cosmos-RL's Slurm launcher reads (`NODE_LAUNCH_METADATA_POLICY` / `_ROLLOUT`). Pure.
//!
//! A replica that needs at least a node's GPUs gets whole nodes: it rendezvouses on its first node at
//! port 29345 and sees all GPUs. Smaller replicas are packed onto nodes, each on its own contiguous
//! GPUs and port 29345 + replica index. Node indices are relative to the role's own node list.

use super::config::CosmosConfig;
use super::{Role, RENDEZVOUS_PORT};
use crate::spec::SpecError;
use serde::{Deserialize, Serialize};

/// One replica's share of a node (the `ReplicaLaunchMetadata` of Cosmos-RL's launcher).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaLaunch {
    /// Nodes the replica spans.
    pub nnode: u32,
    pub role: Role,
    /// Index, in the role's node list, of the node where the replica rendezvouses.
    pub rendezvous_node: u32,
    pub rendezvous_port: u32,
    pub visible_gpus: Vec<u32>,
}

/// What runs on one node of a role (Cosmos-RL's `NodeLaunchMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeLaunch {
    pub colocation: Vec<ReplicaLaunch>,
}

/// One role's replicas and nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleSplit {
    pub gpus_per_replica: u32,
    pub replicas: u32,
    pub nodes: Vec<NodeLaunch>,
}

/// The whole job: policy nodes first (the controller runs on the first), then rollout nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSplit {
    pub gpus_per_node: u32,
    pub policy: RoleSplit,
    /// None when the job trains without rollout workers (`sft`).
    pub rollout: Option<RoleSplit>,
}

impl NodeSplit {
    pub fn policy_nodes(&self) -> u32 {
        self.policy.nodes.len() as u32
    }
    pub fn rollout_nodes(&self) -> u32 {
        self.rollout.as_ref().map_or(0, |r| r.nodes.len() as u32)
    }
    pub fn total_nodes(&self) -> u32 {
        self.policy_nodes() + self.rollout_nodes()
    }

    /// The launch metadata of a role as Cosmos-RL reads it: a JSON list, one entry per node (an
    /// empty list for a role without nodes).
    pub fn launch_metadata_json(&self, role: Role) -> String {
        let nodes: &[NodeLaunch] = match role {
            Role::Policy => &self.policy.nodes,
            Role::Rollout => self.rollout.as_ref().map_or(&[], |r| &r.nodes),
            Role::Controller => &[],
        };
        serde_json::to_string(nodes).expect("launch metadata serialises")
    }
}

/// Split a job's nodes between its roles, `gpus_per_node` GPUs per node.
pub fn split_nodes(config: &CosmosConfig, gpus_per_node: u32) -> Result<NodeSplit, SpecError> {
    let p = &config.policy;
    let policy = role_split(
        Role::Policy,
        p.gpus_per_replica(),
        p.n_init_replicas,
        gpus_per_node,
        &format!(
            "tp_size {} × pp_size {} × cp_size {} × dp_replicate_size {} × dp_shard_size {}",
            p.tp_size, p.pp_size, p.cp_size, p.dp_replicate_size, p.dp_shard_size
        ),
    )?;
    let rollout = if config.has_rollout() {
        let r = &config.rollout;
        Some(role_split(
            Role::Rollout,
            r.gpus_per_replica(),
            r.n_init_replicas,
            gpus_per_node,
            &format!("tp_size {} × pp_size {}", r.tp_size, r.pp_size),
        )?)
    } else {
        None
    };
    Ok(NodeSplit { gpus_per_node, policy, rollout })
}

/// Nodes of one role. `product` shows how the replica size came about, for the error messages.
fn role_split(role: Role, gpus_per_replica: u64, replicas: u32, g: u32, product: &str) -> Result<RoleSplit, SpecError> {
    let field = format!("{}.parallelism", role.as_str());
    let per_node = u64::from(g);
    let divisors: Vec<String> = (1..=g).filter(|d| g.is_multiple_of(*d)).map(|d| d.to_string()).collect();
    let size_error = |what: String| {
        SpecError::new(
            field.clone(),
            format!(
                "a {role} replica needs {gpus_per_replica} GPUs ({product}); {what}. With {g} GPUs per node a replica must use {} GPUs, or a multiple of {g}",
                divisors.join(", "),
                role = role.as_str()
            ),
        )
    };
    let mut nodes = Vec::new();
    if gpus_per_replica >= per_node {
        if !gpus_per_replica.is_multiple_of(per_node) {
            return Err(size_error(format!("that does not fill nodes of {g} GPUs")));
        }
        let nodes_per_replica = gpus_per_replica / per_node;
        let total = nodes_per_replica * u64::from(replicas);
        check_node_count(role, total, &field)?;
        let nnode = nodes_per_replica as u32;
        for node in 0..total as u32 {
            nodes.push(NodeLaunch {
                colocation: vec![ReplicaLaunch {
                    nnode,
                    role,
                    rendezvous_node: node - node % nnode,
                    rendezvous_port: RENDEZVOUS_PORT,
                    visible_gpus: (0..g).collect(),
                }],
            });
        }
    } else {
        if !per_node.is_multiple_of(gpus_per_replica) {
            return Err(size_error(format!("that does not divide a node's {g} GPUs")));
        }
        let gpr = gpus_per_replica as u32;
        let per_node_replicas = g / gpr;
        check_node_count(role, u64::from(replicas.div_ceil(per_node_replicas)), &field)?;
        for replica in 0..replicas {
            let (node, slot) = (replica / per_node_replicas, replica % per_node_replicas);
            if slot == 0 {
                nodes.push(NodeLaunch { colocation: Vec::new() });
            }
            nodes.last_mut().expect("pushed above").colocation.push(ReplicaLaunch {
                nnode: 1,
                role,
                rendezvous_node: node,
                rendezvous_port: RENDEZVOUS_PORT + replica,
                visible_gpus: (slot * gpr..(slot + 1) * gpr).collect(),
            });
        }
    }
    Ok(RoleSplit { gpus_per_replica: gpus_per_replica as u32, replicas, nodes })
}

/// No cluster partition has this many nodes; it keeps a typo in a config from rendering a script of
/// millions of metadata entries (the partition check gives the real limit at submit).
const MAX_ROLE_NODES: u64 = 4096;

fn check_node_count(role: Role, nodes: u64, field: &str) -> Result<(), SpecError> {
    if nodes > MAX_ROLE_NODES {
        return Err(SpecError::new(
            field,
            format!("the {} role would need {nodes} nodes, more than {MAX_ROLE_NODES}; check n_init_replicas and the parallelism sizes", role.as_str()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cosmos::config::parse_config;
    use proptest::prelude::*;

    fn config(policy: &str, rollout: &str, kind: &str) -> CosmosConfig {
        parse_config(&format!(
            "[train.train_policy]\ntype = \"{kind}\"\n[policy.parallelism]\n{policy}\n[rollout.parallelism]\n{rollout}\n"
        ))
        .unwrap()
    }

    /// (rendezvous node, port, visible GPUs) of each replica, node by node.
    fn layout(split: &RoleSplit) -> Vec<Vec<(u32, u32, Vec<u32>)>> {
        split
            .nodes
            .iter()
            .map(|n| {
                n.colocation.iter().map(|r| (r.rendezvous_node, r.rendezvous_port, r.visible_gpus.clone())).collect()
            })
            .collect()
    }

    #[test]
    fn table_of_splits() {
        let all: Vec<u32> = (0..8).collect();
        // (policy, rollout, type) -> (policy nodes, rollout nodes)
        let cases: &[(&str, &str, &str, u32, u32)] = &[
            // One whole node each.
            ("tp_size = 8", "tp_size = 8", "grpo", 1, 1),
            // 2 × 8 = 16 GPUs: a policy replica spans two nodes; 4 rollout replicas of 4 GPUs pack two per node.
            ("tp_size = 2\ndp_shard_size = 8", "tp_size = 4\nn_init_replicas = 4", "grpo", 2, 2),
            // Two policy replicas of two nodes each.
            ("tp_size = 8\ncp_size = 2\nn_init_replicas = 2", "tp_size = 1", "grpo", 4, 1),
            // Three packed replicas of 4 GPUs: 2 on the first node, 1 on the second.
            ("tp_size = 4\nn_init_replicas = 3", "tp_size = 2\npp_size = 2\nn_init_replicas = 2", "grpo", 2, 1),
            // sft: no rollout nodes whatever the rollout section says.
            ("tp_size = 8\ndp_replicate_size = 2", "tp_size = 8\nn_init_replicas = 9", "sft", 2, 0),
            ("tp_size = 1\npp_size = 1", "tp_size = 1", "dapo", 1, 1),
        ];
        for (policy, rollout, kind, want_p, want_r) in cases {
            let s = split_nodes(&config(policy, rollout, kind), 8).unwrap();
            assert_eq!((s.policy_nodes(), s.rollout_nodes()), (*want_p, *want_r), "{policy} | {rollout} | {kind}");
            assert_eq!(s.total_nodes(), want_p + want_r);
        }

        let s = split_nodes(&config("tp_size = 2\ndp_shard_size = 8", "tp_size = 4\nn_init_replicas = 4", "grpo"), 8)
            .unwrap();
        assert_eq!(layout(&s.policy), vec![vec![(0, 29345, all.clone())], vec![(0, 29345, all.clone())]]);
        assert!(s.policy.nodes.iter().all(|n| n.colocation[0].nnode == 2));
        let r = s.rollout.as_ref().unwrap();
        assert_eq!(
            layout(r),
            vec![
                vec![(0, 29345, vec![0, 1, 2, 3]), (0, 29346, vec![4, 5, 6, 7])],
                vec![(1, 29347, vec![0, 1, 2, 3]), (1, 29348, vec![4, 5, 6, 7])],
            ]
        );

        // Two replicas of two nodes: each rendezvouses on its own first node.
        let s = split_nodes(&config("tp_size = 8\ncp_size = 2\nn_init_replicas = 2", "", "grpo"), 8).unwrap();
        let rendezvous: Vec<u32> = s.policy.nodes.iter().map(|n| n.colocation[0].rendezvous_node).collect();
        assert_eq!(rendezvous, vec![0, 0, 2, 2]);

        let s = split_nodes(&config("tp_size = 4\nn_init_replicas = 3", "", "grpo"), 8).unwrap();
        assert_eq!(
            layout(&s.policy),
            vec![vec![(0, 29345, vec![0, 1, 2, 3]), (0, 29346, vec![4, 5, 6, 7])], vec![(1, 29347, vec![0, 1, 2, 3])]]
        );
        assert!(split_nodes(&config("tp_size = 8", "", "sft"), 8).unwrap().rollout.is_none());
    }

    #[test]
    fn metadata_json_is_what_cosmos_reads() {
        let s = split_nodes(&config("tp_size = 8", "tp_size = 4\nn_init_replicas = 2", "grpo"), 8).unwrap();
        assert_eq!(
            s.launch_metadata_json(Role::Policy),
            r#"[{"colocation":[{"nnode":1,"role":"policy","rendezvous_node":0,"rendezvous_port":29345,"visible_gpus":[0,1,2,3,4,5,6,7]}]}]"#
        );
        assert_eq!(
            s.launch_metadata_json(Role::Rollout),
            r#"[{"colocation":[{"nnode":1,"role":"rollout","rendezvous_node":0,"rendezvous_port":29345,"visible_gpus":[0,1,2,3]},{"nnode":1,"role":"rollout","rendezvous_node":0,"rendezvous_port":29346,"visible_gpus":[4,5,6,7]}]}]"#
        );
        let sft = split_nodes(&config("tp_size = 8", "", "sft"), 8).unwrap();
        assert_eq!(sft.launch_metadata_json(Role::Rollout), "[]");
    }

    #[test]
    fn sizes_that_do_not_fit_nodes_are_refused() {
        let cases: &[(&str, &str, u32, &str)] = &[
            // 12 GPUs neither fill nodes of 8 nor divide them.
            ("tp_size = 4\ncp_size = 3", "", 8, "policy.parallelism"),
            ("tp_size = 3", "", 8, "policy.parallelism"),
            ("tp_size = 8", "tp_size = 3", 8, "rollout.parallelism"),
            ("tp_size = 2", "tp_size = 2\npp_size = 3", 4, "rollout.parallelism"),
            ("tp_size = 8\nn_init_replicas = 5000", "", 8, "policy.parallelism"),
        ];
        for (policy, rollout, g, field) in cases {
            let err = split_nodes(&config(policy, rollout, "grpo"), *g).unwrap_err();
            assert_eq!(err.field, *field, "{policy} | {rollout}: {err}");
        }
        let err = split_nodes(&config("tp_size = 4\ncp_size = 3", "", "grpo"), 8).unwrap_err();
        assert!(
            err.message.contains("needs 12 GPUs (tp_size 4 × pp_size 1 × cp_size 3")
                && err.message.contains("1, 2, 4, 8 GPUs, or a multiple of 8"),
            "{err}"
        );
    }

    proptest! {
        /// Whatever the sizes: every replica's GPUs exist on its nodes, packed replicas never share a
        /// GPU or a port of one node, and the role has exactly the nodes its GPUs need.
        #[test]
        fn every_split_fits_its_nodes(g in proptest::sample::select(vec![1u32, 2, 4, 8, 16]), shift in 0u32..6, factor in 1u32..4, replicas in 1u32..7) {
            let gpr = if shift < 4 { (g >> shift).max(1) } else { g * factor };
            let split = role_split(Role::Policy, u64::from(gpr), replicas, g, "x").unwrap();
            let needed = (u64::from(gpr) * u64::from(replicas)).div_ceil(u64::from(g));
            prop_assert_eq!(split.nodes.len() as u64, needed);
            let mut ports = std::collections::HashSet::new();
            for (i, node) in split.nodes.iter().enumerate() {
                let mut used = std::collections::HashSet::new();
                for r in &node.colocation {
                    prop_assert!(r.visible_gpus.iter().all(|&x| x < g));
                    prop_assert!(r.visible_gpus.windows(2).all(|w| w[1] == w[0] + 1), "contiguous");
                    prop_assert!(r.rendezvous_node as usize <= i);
                    for x in &r.visible_gpus {
                        prop_assert!(used.insert(*x), "GPU {} of node {} given twice", x, i);
                    }
                    if gpr < g {
                        prop_assert!(ports.insert(r.rendezvous_port), "port reused");
                    }
                }
            }
            let placed: u64 = split.nodes.iter().map(|n| n.colocation.len() as u64).sum();
            let per_replica_nodes = u64::from(gpr.div_ceil(g));
            prop_assert_eq!(placed, u64::from(replicas) * per_replica_nodes);
        }
    }
}
