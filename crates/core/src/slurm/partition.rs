//! `scontrol show partition -o`: one line per partition of `Key=Value` words.

use super::time::parse_slurm_duration_minutes;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionInfo {
    pub name: String,
    /// None for UNLIMITED.
    pub max_time_minutes: Option<u64>,
    pub is_default: bool,
    pub state: String,
    /// The partition's TRES, e.g. `cpu=512,mem=2000G,node=4,billing=512,gres/gpu=32`.
    pub tres: String,
}

pub fn parse_partitions(stdout: &str) -> Vec<PartitionInfo> {
    stdout
        .lines()
        .filter_map(|line| {
            let field =
                |key: &str| line.split_whitespace().find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')));
            let name = field("PartitionName")?.to_string();
            let max = field("MaxTime").unwrap_or("UNLIMITED");
            Some(PartitionInfo {
                name,
                max_time_minutes: parse_slurm_duration_minutes(max),
                is_default: field("Default") == Some("YES"),
                state: field("State").unwrap_or("").to_string(),
                tres: field("TRES").unwrap_or("").to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_scontrol_lines() {
        let out = "PartitionName=polar AllowGroups=ALL Default=YES MaxTime=04:00:00 State=UP TRES=cpu=512,node=4,gres/gpu=32\n\
                   PartitionName=long Default=NO MaxTime=12:00:00 State=UP\n\
                   PartitionName=free MaxTime=UNLIMITED State=UP\n\
                   PartitionName=week MaxTime=7-00:00:00 State=DOWN\n";
        let p = parse_partitions(out);
        assert_eq!(p.len(), 4);
        assert_eq!((p[0].name.as_str(), p[0].max_time_minutes, p[0].is_default), ("polar", Some(240), true));
        assert!(p[0].tres.contains("gres/gpu=32"));
        assert_eq!(p[1].max_time_minutes, Some(720));
        assert_eq!(p[2].max_time_minutes, None);
        assert_eq!(p[3].max_time_minutes, Some(7 * 24 * 60));
        assert_eq!(p[3].state, "DOWN");
    }
}
