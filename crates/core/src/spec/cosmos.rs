//! The `[cosmos_rl]` section of a job: which Cosmos-RL config sizes the job, and the command of each
//! role when it differs from the job's command. The config is carried as text, so resolving a job stays
//! pure; only [`CosmosRlSpec::read_config`] touches the local filesystem (the CLI calls it).

use super::SpecError;
use serde::{Deserialize, Serialize};

/// Largest config accepted: it travels in the submission script and is stored with the job.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CosmosRlSpec {
    /// The Cosmos-RL config (TOML) on this machine. In a job file a relative path is relative to the
    /// job file; `--cosmos-config` is relative to the working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// The config's text: written inline in the job file, or what `config` held when it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_text: Option<String>,
    /// Commands per role (argv); a role without one runs the job's command, which can tell the roles
    /// apart by `COSMOS_NODE_ROLE`.
    #[serde(skip_serializing_if = "RoleCommands::is_empty")]
    pub commands: RoleCommands,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoleCommands {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub controller: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policy: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rollout: Vec<String>,
}

impl RoleCommands {
    pub fn is_empty(&self) -> bool {
        self.controller.is_empty() && self.policy.is_empty() && self.rollout.is_empty()
    }

    pub fn every_role_has_one(&self) -> bool {
        !self.controller.is_empty() && !self.policy.is_empty() && !self.rollout.is_empty()
    }

    /// The command of a role by its name (`controller`, `policy`, `rollout`).
    pub fn get(&self, role: &str) -> Option<&Vec<String>> {
        match role {
            "controller" => Some(&self.controller),
            "policy" => Some(&self.policy),
            "rollout" => Some(&self.rollout),
            _ => None,
        }
    }

    fn get_mut(&mut self, role: &str) -> Option<&mut Vec<String>> {
        match role {
            "controller" => Some(&mut self.controller),
            "policy" => Some(&mut self.policy),
            "rollout" => Some(&mut self.rollout),
            _ => None,
        }
    }

    /// Set a role's command from `ROLE=COMMAND` (the flag form: one shell string, run by `bash -c`).
    pub fn set_from_flag(&mut self, text: &str) -> Result<(), SpecError> {
        let field = "cosmos_command";
        let (role, command) = text.split_once('=').ok_or_else(|| {
            SpecError::new(field, format!("{text:?} is not ROLE=COMMAND (ROLE: controller, policy or rollout)"))
        })?;
        if command.trim().is_empty() {
            return Err(SpecError::new(field, format!("the command for {role} is empty")));
        }
        let slot = self.get_mut(role.trim()).ok_or_else(|| {
            SpecError::new(field, format!("{role:?} is not a role; use controller, policy or rollout"))
        })?;
        *slot = vec!["bash".to_string(), "-c".to_string(), command.to_string()];
        Ok(())
    }
}

impl CosmosRlSpec {
    /// Lay `over` on top of `self` (flags over the job file): a config given in `over` replaces both
    /// forms of the config here, and its role commands replace the same roles' commands.
    pub fn overlay(mut self, over: CosmosRlSpec) -> CosmosRlSpec {
        if over.config.is_some() || over.config_text.is_some() {
            self.config = over.config;
            self.config_text = over.config_text;
        }
        for role in ["controller", "policy", "rollout"] {
            let command = over.commands.get(role).cloned().unwrap_or_default();
            if !command.is_empty() {
                *self.commands.get_mut(role).expect("a known role") = command;
            }
        }
        self
    }

    /// The config file to read into `config_text`, if the section names one. Giving the config both
    /// ways at once is refused: one of them would be silently ignored. (The engine reads the file.)
    pub fn config_file(&self) -> Result<Option<&str>, SpecError> {
        match (&self.config, &self.config_text) {
            (None, _) => Ok(None),
            (Some(_), Some(_)) => Err(SpecError::new(
                "cosmos_rl.config",
                "give the Cosmos-RL config either as a file (config) or inline (config_text), not both",
            )),
            (Some(path), None) => Ok(Some(path)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_replace_the_files_config_and_only_their_roles() {
        let file = CosmosRlSpec {
            config: None,
            config_text: Some("inline".into()),
            commands: RoleCommands { controller: vec!["c".into()], policy: vec!["p".into()], rollout: vec![] },
        };
        let mut flags = CosmosRlSpec { config: Some("x.toml".into()), ..CosmosRlSpec::default() };
        flags.commands.set_from_flag("policy=python train.py --fast").unwrap();
        let merged = file.overlay(flags);
        assert_eq!(merged.config.as_deref(), Some("x.toml"));
        assert_eq!(merged.config_text, None, "the flag's file replaces the inline text");
        assert_eq!(merged.commands.controller, vec!["c"]);
        assert_eq!(merged.commands.policy, vec!["bash", "-c", "python train.py --fast"]);
    }

    #[test]
    fn role_command_flags_name_the_problem() {
        let mut c = RoleCommands::default();
        for bad in ["policy", "trainer=x", "rollout=  "] {
            let err = c.set_from_flag(bad).unwrap_err();
            assert_eq!(err.field, "cosmos_command", "{bad}: {err}");
        }
    }
}
