//! Cluster profiles: named clusters in one file, so that one user, the CLI (`--cluster NAME`), the
//! library and the service (where each profile is a workspace of `cloud_type` "slurm") can address
//! several clusters. The file sits beside the env file (`~/.config/tao/clusters.toml`, or
//! `TAO_SLURM_CLUSTERS_FILE`), one table per cluster:
//!
//! ```toml
//! [login1]
//! slurm_user = "alice"
//! slurm_hostname = ["login1.example.org", "login2.example.org"]   # or "a,b"
//! base_results_dir = "/lustre/users/alice/tao-slurm"
//! partition = "polar"
//! SSH_KEY_PATH = "/home/alice/.ssh/id_ed25519"   # any other setting, by its environment name
//! ```
//!
//! A profile's values lie between the flags and the environment: flags > profile > environment > env
//! file > defaults. The chosen name is kept as the setting `TAO_SLURM_CLUSTER`, and every job records
//! the cluster it was submitted to.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use tao_slurm_core::config::ConfigError;
pub use tao_slurm_core::config::{check_cluster_name as check_name, CLUSTER_SETTING};

/// The setting that names the profiles file.
pub const FILE_SETTING: &str = "TAO_SLURM_CLUSTERS_FILE";
/// The profiles file's name, beside the env file.
pub const FILE_NAME: &str = "clusters.toml";

/// The TAO service's names for a Slurm workspace's details, and the settings they are.
const TAO_NAMES: &[(&str, &str)] = &[
    ("slurm_user", "SLURM_USER"),
    ("slurm_hostname", "SLURM_HOSTNAME"),
    ("base_results_dir", "SLURM_BASE_RESULTS_DIR"),
    ("partition", "SLURM_PARTITION"),
    ("account", "SLURM_ACCOUNT"),
];

/// Keys of a profile that only the service reads (which orgs may use it, its policy, whether jobs
/// get the operator's credentials): see `service::operator`.
pub const SERVICE_KEYS: &[&str] = &["orgs", "policy", "forward_credentials", "identity", "people"];

/// Tables of the file that are not clusters: `[default]` holds the service's keys for the settings
/// without a profile, `[orgs.NAME]` an org's policy, `[sign_in]` the identity provider
/// (`service::operator`).
pub const NOT_CLUSTERS: &[&str] = &["default", "orgs", "sign_in"];

/// Settings a profile cannot set: they are about the local machine or the choice of profile itself.
const NOT_IN_A_PROFILE: &[&str] = &[CLUSTER_SETTING, FILE_SETTING, "TAO_SLURM_STATE", "TAO_ENV_FILE", "HOME"];

/// One named cluster: its settings by environment name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: String,
    pub settings: BTreeMap<String, String>,
}

/// Where the profiles file is: `TAO_SLURM_CLUSTERS_FILE`, else beside the env file (the explicit one,
/// `TAO_ENV_FILE`, or `~/.config/tao/.env`).
pub fn profiles_path(env_file: Option<&Path>, env: &HashMap<String, String>) -> Option<PathBuf> {
    if let Some(p) = env.get(FILE_SETTING).filter(|p| !p.trim().is_empty()) {
        return Some(PathBuf::from(p));
    }
    let env_file = match env_file {
        Some(p) => p.to_path_buf(),
        None => match env.get("TAO_ENV_FILE").filter(|p| !p.trim().is_empty()) {
            Some(p) => PathBuf::from(p),
            None => PathBuf::from(env.get("HOME").filter(|h| !h.is_empty())?).join(".config/tao/.env"),
        },
    };
    Some(env_file.parent().unwrap_or(Path::new(".")).join(FILE_NAME))
}

fn invalid(message: String) -> ConfigError {
    ConfigError::Invalid { name: "TAO_SLURM_CLUSTERS_FILE", message }
}

/// Read the profiles of a file (none when it does not exist).
pub fn read_profiles(path: &Path) -> Result<Vec<Profile>, ConfigError> {
    // Who can write it decides which hosts, users and keys jobs run with.
    if path.exists() {
        crate::private::check_trusted_file(path, crate::private::Trust::NotWritableByOthers).map_err(invalid)?;
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(invalid(format!("cannot read {}: {e}", path.display()))),
    };
    parse_profiles(&text).map_err(|m| invalid(format!("{}: {m}", path.display())))
}

/// Parse the profiles file's text. Pure.
pub fn parse_profiles(text: &str) -> Result<Vec<Profile>, String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| e.message().to_string())?;
    let mut profiles = Vec::new();
    for (name, value) in table {
        if NOT_CLUSTERS.contains(&name.as_str()) {
            continue;
        }
        check_name(&name)?;
        let toml::Value::Table(entries) = value else {
            return Err(format!("{name} must be a table ([{name}]) of settings"));
        };
        let mut settings = BTreeMap::new();
        for (key, value) in entries {
            if SERVICE_KEYS.contains(&key.as_str()) {
                continue;
            }
            let setting = match TAO_NAMES.iter().find(|(tao, _)| *tao == key) {
                Some((_, s)) => s.to_string(),
                None if key.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                    && key.starts_with(|c: char| c.is_ascii_uppercase()) =>
                {
                    key.clone()
                }
                None => {
                    let known: Vec<&str> = TAO_NAMES.iter().map(|(t, _)| *t).collect();
                    return Err(format!(
                        "[{name}] {key}: unknown key (use {} or a setting's environment name such as SSH_KEY_PATH)",
                        known.join(", ")
                    ));
                }
            };
            if NOT_IN_A_PROFILE.contains(&setting.as_str()) {
                return Err(format!("[{name}] {key}: cannot be set by a cluster profile"));
            }
            let text = match value {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                toml::Value::Array(items) => items
                    .into_iter()
                    .map(|v| match v {
                        toml::Value::String(s) => Ok(s),
                        other => Err(format!("[{name}] {key}: list items must be strings, not {other}")),
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .join(","),
                other => return Err(format!("[{name}] {key}: {other} is not a string, number, boolean or list")),
            };
            settings.insert(setting, text);
        }
        profiles.push(Profile { name, settings });
    }
    Ok(profiles)
}

/// Lay the profile named by `TAO_SLURM_CLUSTER` (flags, then environment, then env file) over the
/// environment and the env file: its values go into `flags` unless a flag already sets them. Called by
/// [`crate::config::gather`].
pub fn apply(
    flags: &mut HashMap<String, String>,
    env: &HashMap<String, String>,
    file: &HashMap<String, String>,
    env_file: Option<&Path>,
) -> Result<(), ConfigError> {
    let name = [&*flags, env, file].into_iter().find_map(|m| m.get(CLUSTER_SETTING).filter(|v| !v.trim().is_empty()));
    let Some(name) = name.map(|n| n.trim().to_string()) else { return Ok(()) };
    check_name(&name).map_err(|message| ConfigError::Invalid { name: "TAO_SLURM_CLUSTER", message })?;
    let path = profiles_path(env_file, env)
        .ok_or_else(|| invalid("there is no HOME to find clusters.toml in; set TAO_SLURM_CLUSTERS_FILE".into()))?;
    let profiles = read_profiles(&path)?;
    let profile = profiles.into_iter().find(|p| p.name == name).ok_or_else(|| ConfigError::Invalid {
        name: "TAO_SLURM_CLUSTER",
        message: format!("no cluster {name:?} in {} (a [{name}] table of settings defines it)", path.display()),
    })?;
    for (k, v) in profile.settings {
        flags.entry(k).or_insert(v);
    }
    flags.insert(CLUSTER_SETTING.to_string(), name);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tao_names_and_settings() {
        let p = parse_profiles(
            r#"
[login1]
slurm_user = "alice"
slurm_hostname = ["a.example.org", "b.example.org:2222"]
base_results_dir = "/lustre/alice"
SLURM_TIME_HOURS = 2
SLURM_USE_REQUEUE = false
[other]
slurm_hostname = "c"
"#,
        )
        .unwrap();
        assert_eq!(p.len(), 2);
        let l = &p.iter().find(|p| p.name == "login1").unwrap().settings;
        assert_eq!(l["SLURM_USER"], "alice");
        assert_eq!(l["SLURM_HOSTNAME"], "a.example.org,b.example.org:2222");
        assert_eq!(l["SLURM_BASE_RESULTS_DIR"], "/lustre/alice");
        assert_eq!(l["SLURM_TIME_HOURS"], "2");
        assert_eq!(l["SLURM_USE_REQUEUE"], "false");
    }

    #[test]
    fn typos_and_bad_names_are_refused() {
        for (text, want) in [
            ("[a]\nslurm_usr = \"x\"\n", "slurm_usr"),
            ("[\"a b\"]\nslurm_user = \"x\"\n", "cluster name"),
            ("[a]\nTAO_SLURM_STATE = \"/x\"\n", "cannot be set"),
            ("a = 1\n", "table"),
            ("[a]\nslurm_hostname = [1]\n", "strings"),
        ] {
            let err = parse_profiles(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn a_profile_lies_between_flags_and_environment() {
        let dir = tempfile::tempdir().unwrap();
        let env_file = dir.path().join(".env");
        std::fs::write(dir.path().join(FILE_NAME), "[c1]\nslurm_user = \"bob\"\nslurm_hostname = \"h1\"\n").unwrap();
        let env: HashMap<String, String> = [("SLURM_USER", "alice"), ("SLURM_HOSTNAME", "h0"), ("HOME", "/nowhere")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut flags: HashMap<String, String> =
            [(CLUSTER_SETTING.to_string(), "c1".to_string()), ("SLURM_HOSTNAME".to_string(), "flag".to_string())]
                .into();
        apply(&mut flags, &env, &HashMap::new(), Some(&env_file)).unwrap();
        assert_eq!(flags["SLURM_USER"], "bob", "the profile beats the environment");
        assert_eq!(flags["SLURM_HOSTNAME"], "flag", "a flag beats the profile");
        let mut flags: HashMap<String, String> = [(CLUSTER_SETTING.to_string(), "nope".to_string())].into();
        let err = apply(&mut flags, &env, &HashMap::new(), Some(&env_file)).unwrap_err().to_string();
        assert!(err.contains("no cluster \"nope\""), "{err}");
        let mut none = HashMap::new();
        apply(&mut none, &env, &HashMap::new(), Some(&env_file)).unwrap();
        assert!(none.is_empty(), "no cluster named, nothing applied");
    }
}
