//! The parts of a Cosmos-RL config (TOML) that size a job: `policy.parallelism`,
//! `rollout.parallelism` and `train.train_policy.type`. Everything else in the config is the job's
//! business and is passed on untouched. Pure: parsed from a string.
//!
//! Missing sizes count as 1, as NVIDIA's TAO service counts them; where Cosmos-RL itself has another
//! default (`tp_size` 2, `dp_shard_size` -1 for "the rest"), a note says so, because the split would
//! then differ from what Cosmos-RL starts.

use crate::spec::SpecError;
use serde::{Deserialize, Serialize};
use toml::{Table, Value};

/// The largest size any one parallelism value may have (far above any real cluster; it keeps the
/// products below from overflowing).
const MAX_SIZE: i64 = 1 << 16;

/// `policy.parallelism`: one policy replica spans tp × pp × cp × dp_replicate × dp_shard GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyParallelism {
    pub n_init_replicas: u32,
    pub tp_size: u32,
    pub pp_size: u32,
    pub cp_size: u32,
    pub dp_replicate_size: u32,
    /// `-1` in the config (automatic) counts as 1, as in the reference.
    pub dp_shard_size: u32,
}

impl PolicyParallelism {
    pub fn gpus_per_replica(&self) -> u64 {
        [self.tp_size, self.pp_size, self.cp_size, self.dp_replicate_size, self.dp_shard_size]
            .iter()
            .map(|&v| u64::from(v))
            .product()
    }
}

/// `rollout.parallelism`: one rollout replica spans tp × pp GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutParallelism {
    pub n_init_replicas: u32,
    pub tp_size: u32,
    pub pp_size: u32,
}

impl RolloutParallelism {
    pub fn gpus_per_replica(&self) -> u64 {
        u64::from(self.tp_size) * u64::from(self.pp_size)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CosmosConfig {
    pub policy: PolicyParallelism,
    pub rollout: RolloutParallelism,
    /// `train.train_policy.type` (default `grpo`); `sft` trains without rollout workers.
    pub train_policy_type: String,
    /// Where a count differs from what Cosmos-RL itself would assume; shown by `render` and `submit`.
    pub notes: Vec<String>,
}

impl CosmosConfig {
    /// Whether the job has rollout workers (every training type but supervised fine-tuning).
    pub fn has_rollout(&self) -> bool {
        self.train_policy_type != "sft"
    }
}

/// Parse the config text. Errors name the config key and say what is allowed.
pub fn parse_config(text: &str) -> Result<CosmosConfig, SpecError> {
    let root: Table = text.parse().map_err(|e: toml::de::Error| {
        SpecError::new("cosmos_rl.config", format!("is not valid TOML: {}", e.message()))
    })?;
    let mut notes = Vec::new();
    let policy = table_at(&root, &["policy", "parallelism"])?;
    let rollout = table_at(&root, &["rollout", "parallelism"])?;
    let train_policy_type = match lookup(&root, &["train", "train_policy", "type"])? {
        None => "grpo".to_string(),
        Some(Value::String(t)) => t.clone(),
        Some(other) => {
            return Err(SpecError::new(
                "train.train_policy.type",
                format!("must be a string such as \"grpo\" or \"sft\", got {other}"),
            ))
        }
    };
    let mut size = |table: Option<&Table>, section: &str, key: &str, cosmos_default: Option<&str>| {
        read_size(table, section, key, cosmos_default, &mut notes)
    };
    let policy = PolicyParallelism {
        n_init_replicas: size(policy, "policy.parallelism", "n_init_replicas", None)?,
        tp_size: size(policy, "policy.parallelism", "tp_size", Some("2"))?,
        pp_size: size(policy, "policy.parallelism", "pp_size", None)?,
        cp_size: size(policy, "policy.parallelism", "cp_size", None)?,
        dp_replicate_size: size(policy, "policy.parallelism", "dp_replicate_size", None)?,
        dp_shard_size: size(policy, "policy.parallelism", "dp_shard_size", Some("-1 (the GPUs left over)"))?,
    };
    // Without rollout workers (sft) the rollout sizes do not matter: neither checked nor noted.
    let rollout = if train_policy_type == "sft" {
        RolloutParallelism { n_init_replicas: 1, tp_size: 1, pp_size: 1 }
    } else {
        RolloutParallelism {
            n_init_replicas: size(rollout, "rollout.parallelism", "n_init_replicas", None)?,
            tp_size: size(rollout, "rollout.parallelism", "tp_size", Some("2"))?,
            pp_size: size(rollout, "rollout.parallelism", "pp_size", None)?,
        }
    };
    Ok(CosmosConfig { policy, rollout, train_policy_type, notes })
}

/// The value at a dotted path, if every table on the way exists.
fn lookup<'a>(root: &'a Table, path: &[&str]) -> Result<Option<&'a Value>, SpecError> {
    let mut table = root;
    for (i, key) in path.iter().enumerate() {
        let Some(value) = table.get(*key) else { return Ok(None) };
        if i + 1 == path.len() {
            return Ok(Some(value));
        }
        table = value.as_table().ok_or_else(|| {
            SpecError::new(path[..=i].join("."), format!("must be a table ([{}]), got {value}", path[..=i].join(".")))
        })?;
    }
    Ok(None)
}

fn table_at<'a>(root: &'a Table, path: &[&str]) -> Result<Option<&'a Table>, SpecError> {
    match lookup(root, path)? {
        None => Ok(None),
        Some(Value::Table(t)) => Ok(Some(t)),
        Some(other) => Err(SpecError::new(path.join("."), format!("must be a table, got {other}"))),
    }
}

/// One parallelism size: a positive integer, 1 when absent. `dp_shard_size = -1` (Cosmos-RL's
/// "automatic") counts as 1, as the reference counts it.
fn read_size(
    table: Option<&Table>,
    section: &str,
    key: &str,
    cosmos_default: Option<&str>,
    notes: &mut Vec<String>,
) -> Result<u32, SpecError> {
    let field = format!("{section}.{key}");
    let counted_as_one = |why: &str| {
        format!(
            "{field} {why}: counted as 1 as NVIDIA's TAO service does; set it in the config to size the job explicitly"
        )
    };
    let Some(value) = table.and_then(|t| t.get(key)) else {
        if let Some(default) = cosmos_default {
            notes.push(counted_as_one(&format!("is not set (Cosmos-RL's own default is {default})")));
        }
        return Ok(1);
    };
    let Some(n) = value.as_integer() else {
        return Err(SpecError::new(field, format!("must be a positive integer, got {value}")));
    };
    if key == "dp_shard_size" && n == -1 {
        notes.push(counted_as_one("is -1 (automatic)"));
        return Ok(1);
    }
    if !(1..=MAX_SIZE).contains(&n) {
        let allowed = if key == "dp_shard_size" { " (or -1 for automatic)" } else { "" };
        return Err(SpecError::new(
            field,
            format!("must be a positive integer{allowed} of at most {MAX_SIZE}, got {n}"),
        ));
    }
    Ok(n as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_config_is_read() {
        // The parallelism sections of Cosmos-RL's qwen2-5-7b-p-fsdp2-cp2-r-tp2-pp1-grpo example.
        let text = r#"
redis = "12808"
[train]
epoch = 1
[train.train_policy]
type = "grpo"
dataset.name = "JiaxinTsao/math_examples"
[rollout.parallelism]
n_init_replicas = 1
tp_size = 2
pp_size = 1
[policy]
model_name_or_path = "Qwen/Qwen2.5-7B-Instruct"
[policy.parallelism]
n_init_replicas = 1
tp_size = 1
cp_size = 2
dp_shard_size = 2
pp_size = 1
dp_replicate_size = 1
"#;
        let c = parse_config(text).unwrap();
        assert_eq!(c.policy.gpus_per_replica(), 4);
        assert_eq!(c.rollout.gpus_per_replica(), 2);
        assert!(c.has_rollout());
        assert!(c.notes.is_empty(), "{:?}", c.notes);
    }

    #[test]
    fn absent_sizes_count_as_one_with_notes_where_cosmos_differs() {
        let c = parse_config("").unwrap();
        assert_eq!(c.policy.gpus_per_replica(), 1);
        assert_eq!((c.policy.n_init_replicas, c.rollout.n_init_replicas), (1, 1));
        assert_eq!(c.train_policy_type, "grpo");
        let notes = c.notes.join("\n");
        for key in ["policy.parallelism.tp_size", "policy.parallelism.dp_shard_size", "rollout.parallelism.tp_size"] {
            assert!(notes.contains(key), "{notes}");
        }
        let auto = parse_config("[policy.parallelism]\ntp_size = 2\ndp_shard_size = -1\n").unwrap();
        assert_eq!(auto.policy.gpus_per_replica(), 2);
        assert!(auto.notes.iter().any(|n| n.contains("-1 (automatic)")), "{:?}", auto.notes);
        let sft = parse_config("[train.train_policy]\ntype = \"sft\"\n[rollout.parallelism]\ntp_size = 0\n").unwrap();
        assert!(!sft.has_rollout(), "an sft config's rollout sizes are not even checked");
        assert!(sft.notes.iter().all(|n| !n.starts_with("rollout.")), "{:?}", sft.notes);
    }

    #[test]
    fn invalid_values_name_their_key() {
        let cases = [
            ("[policy.parallelism]\ntp_size = 0\n", "policy.parallelism.tp_size"),
            ("[policy.parallelism]\npp_size = -2\n", "policy.parallelism.pp_size"),
            ("[policy.parallelism]\ncp_size = 1.5\n", "policy.parallelism.cp_size"),
            ("[policy.parallelism]\ndp_replicate_size = \"2\"\n", "policy.parallelism.dp_replicate_size"),
            ("[policy.parallelism]\ndp_shard_size = 0\n", "policy.parallelism.dp_shard_size"),
            ("[policy.parallelism]\nn_init_replicas = 0\n", "policy.parallelism.n_init_replicas"),
            ("[policy.parallelism]\ntp_size = 100000\n", "policy.parallelism.tp_size"),
            ("[rollout.parallelism]\ntp_size = -1\n", "rollout.parallelism.tp_size"),
            ("[rollout.parallelism]\nn_init_replicas = true\n", "rollout.parallelism.n_init_replicas"),
            ("policy = 3\n", "policy"),
            ("[policy]\nparallelism = [1]\n", "policy.parallelism"),
            ("[train.train_policy]\ntype = 1\n", "train.train_policy.type"),
            ("[policy\n", "cosmos_rl.config"),
        ];
        for (text, field) in cases {
            let err = parse_config(text).unwrap_err();
            assert_eq!(err.field, field, "{text:?}: {err}");
        }
        let err = parse_config("[policy.parallelism]\ndp_shard_size = -3\n").unwrap_err();
        assert!(err.message.contains("-1 for automatic"), "{err}");
    }
}
