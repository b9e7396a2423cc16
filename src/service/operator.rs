//! What the operator decides for the service, in the cluster profiles file (clusters.toml): which orgs
//! may use each shared workspace (a profile, or `[default]` for the settings without one), each
//! workspace's policy and whether its jobs get the operator's credentials, and per org its policy,
//! the names it may take from the service's environment as secrets, and the SSH key its own
//! workspaces log in with.
//!
//! ```toml
//! [login1]
//! slurm_hostname = ["login1.example.org"]
//! orgs = ["team-a", "team-b"]        # they share login1's Unix identity
//! forward_credentials = true         # NGC_KEY, HF_TOKEN... reach these jobs (off unless said)
//! [login1.policy]
//! partitions = ["polar"]
//!
//! [orgs.team-a]
//! partitions = ["polar", "debug"]    # any key of the policy (tao_slurm_core::policy::Policy)
//! max_gpus_per_job = 16
//! secret_env = { HF_TOKEN = "TEAM_A_HF_TOKEN" }   # the job's name = the service's variable
//! ssh_key = "/etc/tao-slurm/team-a.key"           # else the service's own key for the org
//! ```

use crate::profiles::SERVICE_KEYS;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tao_slurm_core::policy::Policy;

/// The operator's rules for one org.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OrgRules {
    pub policy: Policy,
    /// Secret name in a job -> the service's environment variable that holds its value.
    pub secret_env: BTreeMap<String, String>,
    /// The key the org's own workspaces log in with (else the service's key for the org).
    pub ssh_key: Option<PathBuf>,
}

/// The operator's rules for one shared workspace (a profile or `default`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SharedRules {
    /// The orgs that may use it; no one else sees it.
    pub orgs: Vec<String>,
    pub policy: Policy,
    /// Whether its jobs get the credentials of the service's environment (NGC_KEY, HF_TOKEN, ...).
    pub forward_credentials: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Operator {
    pub orgs: BTreeMap<String, OrgRules>,
    /// By workspace id (profile name or `default`).
    pub shared: BTreeMap<String, SharedRules>,
}

impl Operator {
    /// An org's rules (an org the file does not name: no policy of its own, no secrets from the
    /// service's environment, the service's key).
    pub fn org(&self, org: &str) -> OrgRules {
        self.orgs.get(org).cloned().unwrap_or_default()
    }

    /// A shared workspace's rules (one the file does not name is granted to no org).
    pub fn shared(&self, id: &str) -> SharedRules {
        self.shared.get(id).cloned().unwrap_or_default()
    }
}

fn policy_of(where_: &str, table: toml::Table) -> Result<Policy, String> {
    let policy: Policy =
        toml::Value::Table(table).try_into().map_err(|e: toml::de::Error| format!("{where_}: {}", e.message()))?;
    policy.validate().map_err(|m| format!("{where_}: {m}"))?;
    Ok(policy)
}

fn strings(where_: &str, v: toml::Value) -> Result<Vec<String>, String> {
    match v {
        toml::Value::Array(items) => items
            .into_iter()
            .map(|i| match i {
                toml::Value::String(s) => Ok(s),
                other => Err(format!("{where_}: {other} is not a string")),
            })
            .collect(),
        other => Err(format!("{where_}: {other} is not a list of strings")),
    }
}

fn shared_rules(name: &str, mut t: toml::Table, only_service_keys: bool) -> Result<SharedRules, String> {
    let mut rules = SharedRules::default();
    if let Some(v) = t.remove("orgs") {
        rules.orgs = strings(&format!("[{name}] orgs"), v)?;
        for o in &rules.orgs {
            crate::client::service_records::check_org(o).map_err(|m| format!("[{name}] orgs: {m}"))?;
        }
    }
    if let Some(v) = t.remove("policy") {
        let toml::Value::Table(p) = v else { return Err(format!("[{name}] policy must be a table ([{name}.policy])")) };
        rules.policy = policy_of(&format!("[{name}.policy]"), p)?;
    }
    if let Some(v) = t.remove("forward_credentials") {
        rules.forward_credentials =
            v.as_bool().ok_or_else(|| format!("[{name}] forward_credentials must be true or false"))?;
    }
    if only_service_keys {
        if let Some(k) = t.keys().next() {
            return Err(format!(
                "[{name}] {k}: [default] takes only {} (the settings without a profile come from the environment)",
                SERVICE_KEYS.join(", ")
            ));
        }
    }
    Ok(rules)
}

/// The operator's part of the profiles file's text. Pure.
pub fn parse(text: &str) -> Result<Operator, String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| e.message().to_string())?;
    let mut op = Operator::default();
    for (name, value) in table {
        let toml::Value::Table(t) = value else { continue };
        if name == "orgs" {
            for (org, v) in t {
                crate::client::service_records::check_org(&org).map_err(|m| format!("[orgs.{org}]: {m}"))?;
                let toml::Value::Table(mut o) = v else { return Err(format!("[orgs.{org}] must be a table")) };
                let mut rules = OrgRules::default();
                if let Some(v) = o.remove("secret_env") {
                    let toml::Value::Table(m) = v else {
                        return Err(format!("[orgs.{org}] secret_env must be a table of NAME = \"VARIABLE\""));
                    };
                    for (k, v) in m {
                        let var = v.as_str().ok_or_else(|| format!("[orgs.{org}] secret_env.{k} must be a string"))?;
                        rules.secret_env.insert(k, var.to_string());
                    }
                }
                if let Some(v) = o.remove("ssh_key") {
                    let p = v.as_str().ok_or_else(|| format!("[orgs.{org}] ssh_key must be a path"))?;
                    rules.ssh_key = Some(PathBuf::from(p));
                }
                rules.policy = policy_of(&format!("[orgs.{org}]"), o)?;
                op.orgs.insert(org, rules);
            }
        } else {
            let rules = shared_rules(&name, t, name == "default")?;
            op.shared.insert(name, rules);
        }
    }
    Ok(op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_policies_and_org_rules() {
        let op = parse(
            r#"
[default]
orgs = ["team-a"]
[login1]
slurm_hostname = "h"
orgs = ["team-a", "team-b"]
forward_credentials = true
[login1.policy]
partitions = ["polar"]
[login2]
slurm_hostname = "h2"
[orgs.team-a]
max_gpus_per_job = 8
secret_env = { HF_TOKEN = "TEAM_A_HF_TOKEN" }
ssh_key = "/k"
"#,
        )
        .unwrap();
        assert_eq!(op.shared("default").orgs, vec!["team-a"]);
        let l1 = op.shared("login1");
        assert_eq!(l1.orgs, vec!["team-a", "team-b"]);
        assert!(l1.forward_credentials);
        assert_eq!(l1.policy.partitions, Some(vec!["polar".to_string()]));
        let l2 = op.shared("login2");
        assert!(l2.orgs.is_empty() && !l2.forward_credentials, "granted to no one, no credentials, unless said");
        let a = op.org("team-a");
        assert_eq!(a.policy.max_gpus_per_job, Some(8));
        assert_eq!(a.secret_env["HF_TOKEN"], "TEAM_A_HF_TOKEN");
        assert_eq!(a.ssh_key, Some(PathBuf::from("/k")));
        assert_eq!(op.org("team-z"), OrgRules::default());
    }

    #[test]
    fn mistakes_are_refused_with_their_place() {
        for (text, want) in [
            ("[orgs.team-a]\nmax_gpu = 1\n", "[orgs.team-a]"),
            ("[orgs.team-a]\nsbatch_options = [\"dependency\"]\n", "never"),
            ("[orgs.\"a b\"]\n", "org name"),
            ("[l]\norgs = \"team-a\"\n", "list"),
            ("[l.policy]\nmount_roots = [\"rel\"]\n", "mount_roots"),
            ("[default]\nslurm_user = \"x\"\n", "[default] slurm_user"),
            ("[l]\nforward_credentials = \"yes\"\n", "forward_credentials"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
