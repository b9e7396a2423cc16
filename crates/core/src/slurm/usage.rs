//! What a cluster has free, per partition: `scontrol show partition -o` for the limits and
//! `sinfo -N -O NodeList,Partition,StateCompact,Gres,GresUsed,CPUsState` for each node. Pure.

use super::partition::PartitionInfo;
use serde::{Deserialize, Serialize};

/// The `sinfo` line format [`parse_partition_usage`] reads: one line per node and partition.
pub const SINFO_NODES_ARGS: &str = "-N -h -O NodeList:|,Partition:|,StateCompact:|,Gres:|,GresUsed:|,CPUsState:|";

/// One partition: its limits and what its nodes have in use and free now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PartitionUsage {
    pub name: String,
    pub is_default: bool,
    /// UP, DOWN, DRAIN, INACTIVE.
    pub state: String,
    /// None for UNLIMITED.
    pub max_time_minutes: Option<u64>,
    pub nodes: u32,
    /// Nodes that can take jobs (idle, mixed or allocated; not down, drained or failing).
    pub nodes_usable: u32,
    pub nodes_idle: u32,
    pub gpus_total: u32,
    pub gpus_used: u32,
    /// GPUs not in use on usable nodes.
    pub gpus_free: u32,
    pub cpus_total: u32,
    pub cpus_idle: u32,
}

/// GPUs in a `Gres`/`GresUsed` value: `gpu:8`, `gpu:a100:4(S:0-1)`, `gpu:a100:2(IDX:0-1),gpu:h100:1(IDX:3)`.
fn gpus_in(gres: &str) -> u32 {
    gres.split(',')
        .filter(|g| g.trim_start().starts_with("gpu"))
        .filter_map(|g| g.split('(').next()?.rsplit(':').next()?.trim().parse::<u32>().ok())
        .sum()
}

/// A node state that takes jobs (flags such as `*` not responding or `~` powered off make it unusable).
fn usable(state: &str) -> bool {
    let s = state.trim().to_ascii_lowercase();
    !s.ends_with(['*', '~', '#', '!', '%', '$', '@', '^', '-'])
        && ["idle", "mix", "mixed", "alloc", "allocated", "comp", "completing", "plnd", "planned"].contains(&s.as_str())
}

/// Combine the partitions and the node lines into one row per partition, in the partitions' order.
pub fn parse_partition_usage(partitions: &[PartitionInfo], sinfo: &str) -> Vec<PartitionUsage> {
    let mut rows: Vec<PartitionUsage> = partitions
        .iter()
        .map(|p| PartitionUsage {
            name: p.name.clone(),
            is_default: p.is_default,
            state: p.state.clone(),
            max_time_minutes: p.max_time_minutes,
            nodes: 0,
            nodes_usable: 0,
            nodes_idle: 0,
            gpus_total: 0,
            gpus_used: 0,
            gpus_free: 0,
            cpus_total: 0,
            cpus_idle: 0,
        })
        .collect();
    for line in sinfo.lines() {
        let f: Vec<&str> = line.split('|').map(str::trim).collect();
        if f.len() < 6 || f[0].is_empty() {
            continue;
        }
        let partition = f[1].trim_end_matches('*');
        let Some(row) = rows.iter_mut().find(|r| r.name == partition) else { continue };
        let (total, used) = (gpus_in(f[3]), gpus_in(f[4]));
        // CPUsState: allocated/idle/other/total.
        let cpus: Vec<u32> = f[5].split('/').filter_map(|n| n.parse().ok()).collect();
        row.nodes += 1;
        row.gpus_total += total;
        row.gpus_used += used.min(total);
        if let [_, idle, _, all] = cpus[..] {
            row.cpus_total += all;
            row.cpus_idle += idle;
        }
        if usable(f[2]) {
            row.nodes_usable += 1;
            row.gpus_free += total.saturating_sub(used);
            if f[2].trim().eq_ignore_ascii_case("idle") {
                row.nodes_idle += 1;
            }
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_gpus_per_partition() {
        let parts = crate::slurm::parse_partitions(
            "PartitionName=polar Default=YES MaxTime=04:00:00 State=UP TRES=cpu=8\nPartitionName=long MaxTime=UNLIMITED State=UP\n",
        );
        let sinfo = "node1|polar*|idle|gpu:8|gpu:0|0/128/0/128|\n\
                     node2|polar*|mix|gpu:a100:8(S:0-1)|gpu:a100:3(IDX:0-2)|16/112/0/128|\n\
                     node3|polar*|drain|gpu:8|gpu:0|0/0/128/128|\n\
                     node4|polar*|idle*|gpu:8|gpu:0|0/0/128/128|\n\
                     node1|long|idle|gpu:8|gpu:0|0/128/0/128|\n\
                     node9|other|idle|gpu:8|gpu:0|0/128/0/128|\n";
        let rows = parse_partition_usage(&parts, sinfo);
        assert_eq!(rows.len(), 2);
        let p = &rows[0];
        assert_eq!((p.name.as_str(), p.is_default, p.max_time_minutes), ("polar", true, Some(240)));
        assert_eq!((p.nodes, p.nodes_usable, p.nodes_idle), (4, 2, 1));
        assert_eq!((p.gpus_total, p.gpus_used, p.gpus_free), (32, 3, 13));
        assert_eq!((p.cpus_total, p.cpus_idle), (512, 240));
        assert_eq!((rows[1].max_time_minutes, rows[1].gpus_free), (None, 8));
    }
}
