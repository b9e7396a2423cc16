//! The TAO SDK's setting names (what `nvidia-tao-sdk`'s `SlurmSDK` reads) laid onto tao-slurm's own,
//! and the names that look like settings but that nothing reads. Pure: both work on
//! [`SettingSources`] only.
//!
//! Precedence, one rule: **tao-slurm's own name wins whenever it is set** (as a flag, in the
//! environment or in the env file). Otherwise the TAO SDK's name stands for it, in the place it was
//! set, so the usual order (flags > environment > env file) still holds between the two places. The
//! TAO SDK settings that tao-slurm has no name of its own for (`SLURM_CPUS_PER_TASK`,
//! `SLURM_CONTAINER_MOUNTS`, ...) are read under the TAO SDK's name directly, as the contract's
//! `SLURM_USER` or `SLURM_TIME_HOURS` always were.

use crate::config::SettingSources;
use std::collections::HashMap;

/// How a TAO SDK value becomes the value of tao-slurm's setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Translate {
    /// The same text.
    Same,
    /// A boolean that means the opposite (`SLURM_REQUIRE_SQSH=false` allows a registry pull).
    Negate,
    /// Whole gigabytes to a Slurm memory size (`32` to `32G`).
    Gigabytes,
    /// The TAO SDK's state directory to tao-slurm's state file inside it (its own file, never the TAO
    /// SDK's `tao_session_state.db`, whose tables differ).
    StateFileIn,
}

/// One TAO SDK name and the tao-slurm setting it stands for.
#[derive(Debug, Clone, Copy)]
pub struct Alias {
    pub tao: &'static str,
    pub ours: &'static str,
    pub translate: Translate,
}

const fn alias(tao: &'static str, ours: &'static str, translate: Translate) -> Alias {
    Alias { tao, ours, translate }
}

/// The file tao-slurm keeps its state in under `TAO_SDK_STATE_DIR`.
pub const STATE_FILE_IN_TAO_DIR: &str = "tao-slurm-state.db";

pub const ALIASES: &[Alias] = &[
    alias("SSH_USER", "SLURM_USER", Translate::Same),
    alias("SSH_HOST", "SLURM_HOSTNAME", Translate::Same),
    alias("SLURM_USE_SQSH", "TAO_SLURM_USE_SQSH", Translate::Same),
    alias("SLURM_REQUIRE_SQSH", "TAO_SLURM_ALLOW_REGISTRY_PULL", Translate::Negate),
    alias("SLURM_SQSH_CACHE_DIR", "TAO_SLURM_SQSH_CACHE_DIR", Translate::Same),
    alias("SLURM_CONVERSION_PARTITION", "TAO_SLURM_SQSH_PARTITION", Translate::Same),
    alias("SLURM_CONVERSION_TIMEOUT_MINUTES", "TAO_SLURM_SQSH_TIMEOUT_MINUTES", Translate::Same),
    alias("SLURM_CONVERSION_MEMORY_GB", "TAO_SLURM_SQSH_MEMORY", Translate::Gigabytes),
    alias("SLURM_FORCE_RECONVERT_LATEST", "TAO_SLURM_FORCE_RECONVERT_LATEST", Translate::Same),
    alias("TAO_SDK_STATE_DIR", "TAO_SLURM_STATE", Translate::StateFileIn),
];

/// The credentials the TAO SDK forwards to every job's container, and the name the container sees.
/// tao-slurm forwards them too, as secrets (never in the batch script, a staged file or a log).
pub const FORWARDED_CREDENTIALS: &[(&str, &str)] = &[
    ("NGC_KEY", "NGC_KEY"),
    ("HF_TOKEN", "HF_TOKEN"),
    ("ACCESS_KEY", "AWS_ACCESS_KEY_ID"),
    ("SECRET_KEY", "AWS_SECRET_ACCESS_KEY"),
    ("S3_ENDPOINT_URL", "AWS_ENDPOINT_URL"),
];

/// The TAO SDK's `CLOUD_METADATA` for its S3 settings, as its container entrypoint reads it:
/// `{"aws":{BUCKET:{"cloud_region","access_key","secret_key","endpoint_url"}}}` (compact JSON). It
/// holds the keys, so it is forwarded as a secret. None when none of `S3_BUCKET_NAME`, `ACCESS_KEY`,
/// `SECRET_KEY`, `S3_ENDPOINT_URL`, `CLOUD_REGION` is set (the TAO SDK sends an empty bucket then).
pub fn cloud_metadata(get: impl Fn(&str) -> Option<String>) -> Option<String> {
    let names = ["S3_BUCKET_NAME", "CLOUD_REGION", "ACCESS_KEY", "SECRET_KEY", "S3_ENDPOINT_URL"];
    if names.iter().all(|n| get(n).is_none()) {
        return None;
    }
    let value = |n: &str| get(n).map(|v| v.trim().to_string()).unwrap_or_default();
    let mut bucket = serde_json::Map::new();
    bucket.insert(
        value("S3_BUCKET_NAME"),
        serde_json::json!({
            "cloud_region": value("CLOUD_REGION"),
            "access_key": value("ACCESS_KEY"),
            "secret_key": value("SECRET_KEY"),
            "endpoint_url": value("S3_ENDPOINT_URL"),
        }),
    );
    Some(serde_json::json!({ "aws": bucket }).to_string())
}

/// Every `SLURM_`/`TAO_SLURM_` name tao-slurm reads (its own settings, the TAO SDK's it honours, and
/// its diagnostics). A unit test checks that every name `Settings::from_sources` asks for is here.
pub const READ: &[&str] = &[
    "SLURM_USER",
    "SLURM_HOSTNAME",
    "SLURM_PARTITION",
    "SLURM_ACCOUNT",
    "SLURM_BASE_RESULTS_DIR",
    "SLURM_TIME_HOURS",
    "SLURM_TIMEOUT_HOURS",
    "SLURM_USE_REQUEUE",
    "SLURM_MAX_GPUS_PER_NODE",
    "SLURM_CPUS_PER_TASK",
    "SLURM_MAX_CPUS_PER_TASK",
    "SLURM_CONTAINER_MOUNTS",
    "SLURM_USE_TIMEOUT",
    "SLURM_MAIL_USER",
    "SLURM_NUM_GPUS",
    "SLURM_USE_SRUN_LOGS",
    "SLURM_ENROOT_TEMP_PATH",
    "TAO_SLURM_STATE",
    "TAO_SLURM_LOCAL",
    "TAO_SLURM_CONTROL_DIR",
    "TAO_SLURM_CONTROL_PERSIST",
    "TAO_SLURM_REMOTE_TIMEOUT",
    "TAO_SLURM_USE_SQSH",
    "TAO_SLURM_SQSH_CACHE_DIR",
    "TAO_SLURM_SQSH_PARTITION",
    "TAO_SLURM_SQSH_TIMEOUT_MINUTES",
    "TAO_SLURM_SQSH_MEMORY",
    "TAO_SLURM_FORCE_RECONVERT_LATEST",
    "TAO_SLURM_SQSH_LATEST_MAX_AGE_HOURS",
    "TAO_SLURM_ALLOW_REGISTRY_PULL",
    "TAO_SLURM_AUX_MAX_BYTES",
    "TAO_SLURM_AUX_TIMEOUT_MINUTES",
    "TAO_SLURM_RETRY_BACKOFF_SECS",
    "TAO_SLURM_MAX_QUERIES_PER_MINUTE",
    "TAO_SLURM_SUBMIT_BATCH",
    "TAO_SLURM_SUBMIT_BATCH_WAIT_MS",
    "TAO_SLURM_CHECKS_TTL_SECS",
    "TAO_SLURM_NOTIFY",
    "TAO_SLURM_DATABASE_URL",
    "TAO_SLURM_DATABASE_PASSWORD",
    "TAO_SLURM_DATABASE_SCHEMA",
    "TAO_SLURM_DATABASE_CA_FILE",
    "TAO_SLURM_NOTIFY_PENDING_MINUTES",
    "TAO_SLURM_GPU_SAMPLE_SECS",
    "TAO_SLURM_GPU_IDLE_PERCENT",
    "TAO_SLURM_GPU_IDLE_SECS",
    "TAO_SLURM_GPU_HANG_SECS",
    "TAO_SLURM_GPU_IDLE_ACTION",
    "TAO_SLURM_GPU_HANG_ACTION",
    "TAO_SLURM_CHECKPOINT_GRACE",
    "TAO_SLURM_CHECKPOINT_PATTERNS",
    "TAO_SLURM_ON_PREEMPT",
    "TAO_SLURM_MAX_PREEMPTIONS",
    "TAO_SLURM_FORWARD_CREDENTIALS",
    "TAO_SLURM_CLUSTER",
    "TAO_SLURM_CLUSTERS_FILE",
    "TAO_SLURM_SECRETS_KEY_FILE",
    "TAO_SLURM_LOG",
    "TAO_SLURM_FAILPOINT",
];

/// Variables Slurm itself sets or reads in a user's environment (inside an allocation, or to
/// configure its commands): never reported as unknown settings.
const SLURM_OWN_PREFIXES: &[&str] = &[
    "SLURM_JOB",
    "SLURM_STEP",
    "SLURM_NODE",
    "SLURM_TASK",
    "SLURM_CPU",
    "SLURM_GPU",
    "SLURM_MEM",
    "SLURM_NTASKS",
    "SLURM_NNODES",
    "SLURM_NPROCS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_GTIDS",
    "SLURM_SUBMIT",
    "SLURM_CLUSTER",
    "SLURM_CONF",
    "SLURM_TOPOLOGY",
    "SLURM_PRIO",
    "SLURM_LAUNCH",
    "SLURM_SRUN",
    "SLURM_UMASK",
    "SLURM_EXPORT",
    "SLURM_DISTRIBUTION",
    "SLURM_TIME_FORMAT",
    "SLURM_DEBUG",
    "SLURM_HINT",
    "SLURM_HET",
    "SLURM_ARRAY",
    "SLURM_RESTART",
    "SLURM_SHARDS",
    "SLURM_TRES",
    "SLURM_DIST",
    "SLURM_OVERCOMMIT",
    "SLURM_SPANK",
    "SLURM_WORKING",
    "SLURM_THREADS",
    "SLURM_PTY",
    "SLURM_PROFILE",
    "SLURM_ACCTG",
];

/// `sources` with every TAO SDK name laid onto tao-slurm's where tao-slurm's name is set nowhere.
/// Values that cannot be translated (a `SLURM_REQUIRE_SQSH` that is not a boolean) are passed as
/// they are, so the setting's own check names the problem.
pub fn apply(sources: &SettingSources) -> SettingSources {
    let mut out = SettingSources {
        flags: sources.flags.clone(),
        env: sources.env.clone(),
        file: sources.file.clone(),
        uid: sources.uid,
    };
    let set = |m: &HashMap<String, String>, name: &str| m.get(name).is_some_and(|v| !v.trim().is_empty());
    for a in ALIASES {
        if [&sources.flags, &sources.env, &sources.file].into_iter().any(|m| set(m, a.ours)) {
            continue;
        }
        for place in [&mut out.flags, &mut out.env, &mut out.file] {
            if let Some(value) = place.get(a.tao).filter(|v| !v.trim().is_empty()).cloned() {
                place.insert(a.ours.to_string(), translate(a.translate, &value));
            }
        }
    }
    out
}

fn translate(how: Translate, value: &str) -> String {
    let v = value.trim();
    match how {
        Translate::Same => value.to_string(),
        Translate::Negate => match v.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "y" | "on" => "false".to_string(),
            "0" | "false" | "no" | "n" | "off" => "true".to_string(),
            _ => value.to_string(),
        },
        Translate::Gigabytes if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()) => format!("{v}G"),
        Translate::Gigabytes => value.to_string(),
        Translate::StateFileIn => format!("{}/{STATE_FILE_IN_TAO_DIR}", v.trim_end_matches('/')),
    }
}

/// Names set in the environment or the env file that look like tao-slurm's settings (`SLURM_` or
/// `TAO_SLURM_`) but that nothing reads, each with the closest name that is read when one is close
/// (a typo), sorted. Slurm's own variables are left out.
pub fn unrecognised(sources: &SettingSources) -> Vec<(String, Option<&'static str>)> {
    let aliases: Vec<&str> = ALIASES.iter().map(|a| a.tao).collect();
    let mut names: Vec<&String> = sources.env.keys().chain(sources.file.keys()).chain(sources.flags.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|n| n.starts_with("SLURM_") || n.starts_with("TAO_SLURM_"))
        .filter(|n| !READ.contains(&n.as_str()) && !aliases.contains(&n.as_str()))
        .filter(|n| n.starts_with("TAO_SLURM_") || !SLURM_OWN_PREFIXES.iter().any(|p| n.starts_with(p)))
        .map(|n| {
            let closest = READ
                .iter()
                .chain(aliases.iter())
                .map(|k| (edit_distance(n, k), *k))
                .filter(|(d, _)| *d <= 3)
                .min()
                .map(|(_, k)| k);
            (n.clone(), closest)
        })
        .collect()
}

/// Levenshtein distance (names are short).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(env: &[(&str, &str)], file: &[(&str, &str)]) -> SettingSources {
        let map = |p: &[(&str, &str)]| p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        SettingSources { flags: HashMap::new(), env: map(env), file: map(file), uid: Some(1000) }
    }

    #[test]
    fn tao_names_stand_for_ours_translated() {
        let s = apply(&sources(
            &[
                ("SSH_USER", "alice"),
                ("SSH_HOST", "login1,login2"),
                ("SLURM_REQUIRE_SQSH", "false"),
                ("SLURM_CONVERSION_MEMORY_GB", "64"),
                ("TAO_SDK_STATE_DIR", "/home/alice/.tao/"),
            ],
            &[("SLURM_CONVERSION_PARTITION", "cpu2")],
        ));
        assert_eq!(s.env["SLURM_USER"], "alice");
        assert_eq!(s.env["SLURM_HOSTNAME"], "login1,login2");
        assert_eq!(s.env["TAO_SLURM_ALLOW_REGISTRY_PULL"], "true");
        assert_eq!(s.env["TAO_SLURM_SQSH_MEMORY"], "64G");
        assert_eq!(s.env["TAO_SLURM_STATE"], "/home/alice/.tao/tao-slurm-state.db");
        assert_eq!(s.file["TAO_SLURM_SQSH_PARTITION"], "cpu2", "kept in the place it was set");
    }

    #[test]
    fn our_name_wins_wherever_it_is_set() {
        // Ours in the env file beats theirs in the environment: one rule, whatever the places.
        let s = apply(&sources(&[("SSH_USER", "tao"), ("SLURM_REQUIRE_SQSH", "true")], &[("SLURM_USER", "ours")]));
        assert!(!s.env.contains_key("SLURM_USER"));
        assert_eq!(s.file["SLURM_USER"], "ours");
        assert_eq!(s.env["TAO_SLURM_ALLOW_REGISTRY_PULL"], "false");
        // An empty value counts as unset, as everywhere in the settings.
        let s = apply(&sources(&[("SSH_USER", "tao"), ("SLURM_USER", " ")], &[]));
        assert_eq!(s.env["SLURM_USER"], "tao");
    }

    #[test]
    fn unknown_names_that_look_like_ours_are_reported_with_the_closest_name() {
        let got = unrecognised(&sources(
            &[
                ("SLURM_PARTITON", "polar"),
                ("TAO_SLURM_USE_SQHS", "false"),
                ("SLURM_USE_SRUN_LOGS", "1"),
                ("SLURM_USE_SRUN_LOG", "1"),
                ("SLURM_JOB_ID", "12"),
                ("SLURM_CONF", "/etc/slurm/slurm.conf"),
                ("SLURM_USER", "alice"),
                ("SSH_USER", "alice"),
                ("SLURM_USE_SQSH", "true"),
                ("HOME", "/home/alice"),
            ],
            &[("TAO_SLURM_COLOUR", "blue")],
        ));
        assert_eq!(
            got,
            vec![
                ("SLURM_PARTITON".to_string(), Some("SLURM_PARTITION")),
                ("SLURM_USE_SRUN_LOG".to_string(), Some("SLURM_USE_SRUN_LOGS")),
                ("TAO_SLURM_COLOUR".to_string(), None),
                ("TAO_SLURM_USE_SQHS".to_string(), Some("TAO_SLURM_USE_SQSH")),
            ]
        );
    }

    #[test]
    fn cloud_metadata_is_the_tao_sdks_shape() {
        let env =
            [("S3_BUCKET_NAME", "data"), ("ACCESS_KEY", "AK"), ("SECRET_KEY", "SK"), ("CLOUD_REGION", "us-west-2")];
        let get = |n: &str| env.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string());
        let m: serde_json::Value = serde_json::from_str(&cloud_metadata(get).unwrap()).unwrap();
        assert_eq!(
            m,
            serde_json::json!({"aws": {"data": {"cloud_region": "us-west-2", "access_key": "AK", "secret_key": "SK", "endpoint_url": ""}}})
        );
        assert_eq!(cloud_metadata(|_| None), None);
    }

    #[test]
    fn every_name_the_settings_read_is_known() {
        let source = include_str!("mod.rs");
        let re = regex::Regex::new(r#""((?:TAO_SLURM|SLURM)_[A-Z_]+)""#).unwrap();
        for cap in re.captures_iter(source) {
            let name = &cap[1];
            assert!(READ.contains(&name), "{name} is read by config/mod.rs but missing from config::aliases::READ");
        }
        for a in ALIASES {
            assert!(READ.contains(&a.ours), "{} stands for {}, which is not read", a.tao, a.ours);
        }
    }
}
