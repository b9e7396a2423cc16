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
//! ssh_aliases = ["login1"]           # aliases of the service's ssh_config its own workspaces may name
//! login_hosts = ["login1.example.org", "10.0.0.5:2222"]   # else any host or host:port
//! max_workspaces = 4                 # its own workspaces (else [orgs] max_workspaces, else 8)
//!
//! [orgs]
//! max_workspaces = 8                 # every org's cap unless its own table says otherwise
//! ```
//!
//! An org's own workspace logs in with the org's key only (no ssh_config file, no agent: see
//! `Settings::ssh_key_only`); an ssh_config alias the operator granted it (`ssh_aliases`) stands for
//! its host name and port only, nothing else of the alias's entry.

use std::collections::BTreeMap;
use std::path::PathBuf;
use tao_slurm_core::policy::Policy;
use tao_slurm_engine::profiles::SERVICE_KEYS;

/// The operator's rules for one org.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OrgRules {
    pub policy: Policy,
    /// Secret name in a job -> the service's environment variable that holds its value.
    pub secret_env: BTreeMap<String, String>,
    /// The key the org's own workspaces log in with (else the service's key for the org).
    pub ssh_key: Option<PathBuf>,
    /// Aliases of the service's ssh_config the org's own workspaces may name (as their host name and
    /// port only); any other name is a host name.
    pub ssh_aliases: Vec<String>,
    /// The hosts (`host` or `host:port`, as written) the org's own workspaces may name besides its
    /// aliases; None: any.
    pub login_hosts: Option<Vec<String>>,
    /// Most workspaces of its own the org may have (None: the file's `[orgs] max_workspaces`, else
    /// [`DEFAULT_MAX_WORKSPACES`]).
    pub max_workspaces: Option<u32>,
}

/// Workspaces an org may have of its own unless the operator says otherwise.
pub const DEFAULT_MAX_WORKSPACES: u32 = 8;

/// The operator's rules for one shared workspace (a profile or `default`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SharedRules {
    /// The orgs that may use it; no one else sees it.
    pub orgs: Vec<String>,
    pub policy: Policy,
    /// Whether its jobs get the credentials of the service's environment (NGC_KEY, HF_TOKEN, ...).
    pub forward_credentials: bool,
    /// `identity = "person"`: each person's jobs run as their own Unix user, logged in with a
    /// certificate the service signs (`certificates`); `people` maps a person to that user (a person
    /// it does not name is their own user name).
    pub per_person: bool,
    pub people: BTreeMap<String, String>,
}

/// `[sign_in]`: people sign in through this OpenID Connect provider (`service::sign_in`).
#[derive(Debug, Clone, PartialEq)]
pub struct SignInRules {
    /// The provider's issuer URL (its `/.well-known/openid-configuration` is read from there).
    pub issuer: String,
    pub client_id: String,
    /// The service's address as browsers reach it (the redirect URI is `<public_url>/auth/callback`);
    /// None: the address it listens on.
    pub public_url: Option<String>,
    /// The claim that names the person (and is their Unix user unless a workspace maps them).
    pub username_claim: String,
    /// The claim that lists the person's groups.
    pub groups_claim: String,
    /// Org -> the provider's group whose members belong to it, and the group of its admins.
    pub orgs: BTreeMap<String, String>,
    pub admins: BTreeMap<String, String>,
    /// Seconds a signed-in person's token lasts: leaving a group takes effect within it.
    pub token_secs: u64,
    /// `[sign_in.people]`: the provider's subject (`sub`) -> the person's name, which wins over the
    /// username claim (for a provider whose people may edit that claim).
    pub people: BTreeMap<String, String>,
}

/// A signed-in person's token lasts this long unless the operator says (`[sign_in] token_lifetime`).
pub const DEFAULT_SIGN_IN_TOKEN_SECS: u64 = 3600;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Operator {
    pub sign_in: Option<SignInRules>,
    pub orgs: BTreeMap<String, OrgRules>,
    /// `[orgs] max_workspaces`: every org's cap unless its own table sets one.
    pub max_workspaces: Option<u32>,
    /// By workspace id (profile name or `default`).
    pub shared: BTreeMap<String, SharedRules>,
}

impl Operator {
    /// An org's rules (an org the file does not name: no policy of its own, no secrets from the
    /// service's environment, the service's key).
    pub fn org(&self, org: &str) -> OrgRules {
        self.orgs.get(org).cloned().unwrap_or_default()
    }

    /// Most workspaces of its own `org` may have.
    pub fn max_workspaces(&self, org: &str) -> u32 {
        self.org(org).max_workspaces.or(self.max_workspaces).unwrap_or(DEFAULT_MAX_WORKSPACES)
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

/// A workspace cap: a whole number from 0 to 1000.
fn cap(where_: &str, v: &toml::Value) -> Result<u32, String> {
    v.as_integer()
        .filter(|n| (0..=1000).contains(n))
        .map(|n| n as u32)
        .ok_or_else(|| format!("{where_} must be a whole number from 0 to 1000"))
}

fn shared_rules(name: &str, mut t: toml::Table, only_service_keys: bool) -> Result<SharedRules, String> {
    let mut rules = SharedRules::default();
    if let Some(v) = t.remove("orgs") {
        rules.orgs = strings(&format!("[{name}] orgs"), v)?;
        for o in &rules.orgs {
            tao_slurm_engine::client::records::check_org(o).map_err(|m| format!("[{name}] orgs: {m}"))?;
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
    if let Some(v) = t.remove("identity") {
        rules.per_person = match v.as_str() {
            Some("person") => true,
            Some("shared") => false,
            _ => {
                return Err(format!(
                    "[{name}] identity must be \"shared\" (one Unix identity for every org it is granted to) or \"person\" (each person their own Unix user, by SSH certificate)"
                ))
            }
        };
    }
    if let Some(v) = t.remove("people") {
        let toml::Value::Table(m) = v else {
            return Err(format!("[{name}] people must be a table of \"person\" = \"unix user\" ([{name}.people])"));
        };
        for (person, user) in m {
            let user = user.as_str().ok_or_else(|| format!("[{name}.people] {person:?} must be a Unix user name"))?;
            super::certificates::check_unix_user(user).map_err(|m| format!("[{name}.people] {person:?}: {m}"))?;
            rules.people.insert(person, user.to_string());
        }
        if !rules.per_person {
            return Err(format!("[{name}] people maps persons to Unix users only with identity = \"person\""));
        }
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

fn sign_in_rules(mut t: toml::Table) -> Result<SignInRules, String> {
    let mut text = |key: &str, default: Option<&str>| -> Result<String, String> {
        match t.remove(key) {
            Some(toml::Value::String(s)) if !s.trim().is_empty() => Ok(s),
            Some(_) => Err(format!("[sign_in] {key} must be a string")),
            None => default.map(str::to_string).ok_or_else(|| format!("[sign_in] needs {key}")),
        }
    };
    let issuer = text("issuer", None)?;
    let client_id = text("client_id", None)?;
    let username_claim = text("username_claim", Some("preferred_username"))?;
    let groups_claim = text("groups_claim", Some("groups"))?;
    let lifetime = text("token_lifetime", Some("1h"))?;
    let public_url = match t.remove("public_url") {
        None => None,
        Some(toml::Value::String(u)) => Some(u.trim_end_matches('/').to_string()),
        Some(_) => return Err("[sign_in] public_url must be a URL".into()),
    };
    for url in std::iter::once(&issuer).chain(public_url.as_ref()) {
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(format!("[sign_in] {url:?} is not an http(s) URL"));
        }
    }
    let token_secs = humantime::parse_duration(&lifetime)
        .map_err(|e| format!("[sign_in] token_lifetime {lifetime:?} is not a duration like 1h ({e})"))?
        .as_secs();
    if !(10..=7 * 86_400).contains(&token_secs) {
        return Err(format!("[sign_in] token_lifetime {lifetime:?}: from 10s to 7 days"));
    }
    let mut groups = |key: &str| -> Result<BTreeMap<String, String>, String> {
        let Some(v) = t.remove(key) else { return Ok(BTreeMap::new()) };
        let toml::Value::Table(m) = v else {
            return Err(format!("[sign_in.{key}] must be a table of org = \"group\""));
        };
        m.into_iter()
            .map(|(org, g)| {
                tao_slurm_engine::client::records::check_org(&org).map_err(|m| format!("[sign_in.{key}]: {m}"))?;
                let g = g.as_str().ok_or_else(|| format!("[sign_in.{key}] {org} must be a group name"))?;
                Ok((org, g.to_string()))
            })
            .collect()
    };
    let (orgs, admins) = (groups("orgs")?, groups("admins")?);
    let people = match t.remove("people") {
        None => BTreeMap::new(),
        Some(toml::Value::Table(m)) => m
            .into_iter()
            .map(|(subject, name)| {
                let name = name.as_str().ok_or_else(|| format!("[sign_in.people] {subject:?} must name a person"))?;
                tao_slurm_engine::client::records::check_person(name)
                    .map_err(|m| format!("[sign_in.people] {subject:?}: {m}"))?;
                Ok((subject, name.to_string()))
            })
            .collect::<Result<_, String>>()?,
        Some(_) => return Err("[sign_in.people] must be a table of \"subject\" = \"person\"".into()),
    };
    if orgs.is_empty() {
        return Err("[sign_in.orgs] must map at least one org to the provider's group of its members".into());
    }
    if let Some(k) = t.keys().next() {
        return Err(format!("[sign_in] {k} is not a key of [sign_in]"));
    }
    Ok(SignInRules { issuer, client_id, public_url, username_claim, groups_claim, orgs, admins, token_secs, people })
}

/// The operator's part of the profiles file's text. Pure.
pub fn parse(text: &str) -> Result<Operator, String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| e.message().to_string())?;
    let mut op = Operator::default();
    for (name, value) in table {
        let toml::Value::Table(t) = value else { continue };
        if name == "sign_in" {
            op.sign_in = Some(sign_in_rules(t)?);
            continue;
        }
        if name == "orgs" {
            for (org, v) in t {
                if org == "max_workspaces" {
                    op.max_workspaces = Some(cap("[orgs] max_workspaces", &v)?);
                    continue;
                }
                tao_slurm_engine::client::records::check_org(&org).map_err(|m| format!("[orgs.{org}]: {m}"))?;
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
                if let Some(v) = o.remove("ssh_aliases") {
                    rules.ssh_aliases = strings(&format!("[orgs.{org}] ssh_aliases"), v)?;
                }
                if let Some(v) = o.remove("login_hosts") {
                    rules.login_hosts = Some(strings(&format!("[orgs.{org}] login_hosts"), v)?);
                }
                if let Some(v) = o.remove("max_workspaces") {
                    rules.max_workspaces = Some(cap(&format!("[orgs.{org}] max_workspaces"), &v)?);
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
ssh_aliases = ["login1"]
max_workspaces = 2
[orgs.team-b]
login_hosts = ["h1", "h2:2222"]
[orgs]
max_workspaces = 5
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
        assert_eq!(a.ssh_aliases, vec!["login1"]);
        assert!(op.org("team-b").ssh_aliases.is_empty(), "no alias unless granted");
        assert_eq!(op.org("team-b").login_hosts, Some(vec!["h1".to_string(), "h2:2222".to_string()]));
        assert_eq!((op.max_workspaces("team-a"), op.max_workspaces("team-b")), (2, 5));
        assert_eq!(parse("").unwrap().max_workspaces("team-z"), DEFAULT_MAX_WORKSPACES);
        assert!(!l1.per_person && l1.people.is_empty(), "one shared identity unless said");
        assert!(op.sign_in.is_none());
        let s = parse(
            "[sign_in]\nissuer = \"https://idp.example.org\"\nclient_id = \"tao\"\ntoken_lifetime = \"30min\"\n\
             [sign_in.orgs]\nteam-a = \"tao-team-a\"\n[sign_in.admins]\nteam-a = \"tao-admins\"\n",
        )
        .unwrap()
        .sign_in
        .unwrap();
        assert_eq!(
            (s.username_claim.as_str(), s.groups_claim.as_str(), s.token_secs),
            ("preferred_username", "groups", 1800)
        );
        assert_eq!((s.orgs["team-a"].as_str(), s.admins["team-a"].as_str()), ("tao-team-a", "tao-admins"));
        let people = parse("[l]\nidentity = \"person\"\n[l.people]\n\"ada@example.org\" = \"ada\"\n").unwrap();
        let l = people.shared("l");
        assert!(l.per_person);
        assert_eq!(l.people["ada@example.org"], "ada");
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
            ("[orgs]\nmax_workspaces = -1\n", "[orgs] max_workspaces"),
            ("[orgs.team-a]\nmax_workspaces = \"8\"\n", "[orgs.team-a] max_workspaces"),
            ("[orgs.team-a]\nssh_aliases = \"login1\"\n", "ssh_aliases"),
            ("[l]\nidentity = \"people\"\n", "[l] identity must be"),
            ("[l]\nidentity = \"person\"\n[l.people]\nada = \"Ada Lovelace\"\n", "[l.people] \"ada\""),
            ("[l]\n[l.people]\nada = \"ada\"\n", "only with identity = \"person\""),
            ("[sign_in]\nclient_id = \"x\"\n", "[sign_in] needs issuer"),
            ("[sign_in]\nissuer = \"ftp://x\"\nclient_id = \"x\"\n[sign_in.orgs]\na = \"g\"\n", "not an http(s) URL"),
            ("[sign_in]\nissuer = \"https://x\"\nclient_id = \"x\"\n", "[sign_in.orgs]"),
            (
                "[sign_in]\nissuer = \"https://x\"\nclient_id = \"x\"\nsecret = \"s\"\n[sign_in.orgs]\na = \"g\"\n",
                "secret is not a key",
            ),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
