//! Job files on the submitting machine: the TOML job file and the Cosmos-RL config it names (read
//! relative to the job file). The core parses their text; reading them is the engine's.

use crate::spec::{CosmosRlSpec, JobSpec, SpecError};
use std::path::Path;

/// Read a job file (TOML, the same field names as [`JobSpec`]), and the Cosmos-RL config it names.
pub fn read_job_file(path: &Path) -> Result<JobSpec, SpecError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SpecError::new("spec", format!("cannot read {}: {e}", path.display())))?;
    let mut spec =
        JobSpec::from_toml(&text).map_err(|e| SpecError::new("spec", format!("{}: {}", path.display(), e.message)))?;
    if let Some(cosmos) = &mut spec.cosmos_rl {
        read_cosmos_config(cosmos, path.parent().unwrap_or(Path::new(".")))?;
    }
    Ok(spec)
}

/// Read the file a Cosmos-RL section names (relative paths against `relative_to`) into its
/// `config_text`.
pub fn read_cosmos_config(section: &mut CosmosRlSpec, relative_to: &Path) -> Result<(), SpecError> {
    let Some(path) = section.config_file()? else { return Ok(()) };
    let full = relative_to.join(path);
    let text = std::fs::read_to_string(&full).map_err(|e| {
        SpecError::new("cosmos_rl.config", format!("cannot read the Cosmos-RL config {}: {e}", full.display()))
    })?;
    section.config_text = Some(text);
    Ok(())
}

/// Read a specs file (`resume --spec`): a JSON object of spec keys, as TAO's resume body's `specs`.
pub fn read_specs_file(path: &Path) -> Result<serde_json::Value, SpecError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SpecError::new("spec", format!("cannot read {}: {e}", path.display())))?;
    let specs: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| SpecError::new("spec", format!("{} is not JSON: {e}", path.display())))?;
    if !specs.is_object() {
        return Err(SpecError::new("spec", format!("{} must hold a JSON object of spec keys", path.display())));
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::CosmosRlSpec;

    #[test]
    fn a_job_file_section_with_its_config_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rl.toml"), "[policy.parallelism]\ntp_size = 8\n").unwrap();
        let job = dir.path().join("job.toml");
        std::fs::write(
            &job,
            "image = \"x/y:1\"\ncommand = [\"python\", \"launch.py\"]\n[cosmos_rl]\nconfig = \"rl.toml\"\n[cosmos_rl.commands]\ncontroller = [\"ctl\", \"--port\", \"8082\"]\n",
        )
        .unwrap();
        let spec = read_job_file(&job).unwrap();
        let section = spec.cosmos_rl.unwrap();
        assert_eq!(section.config_text.as_deref(), Some("[policy.parallelism]\ntp_size = 8\n"));
        assert_eq!(section.commands.controller, vec!["ctl", "--port", "8082"]);
        // Inline, and typos named.
        let inline = crate::spec::JobSpec::from_toml(
            "[cosmos_rl]\nconfig_text = '''\n[train.train_policy]\ntype = \"sft\"\n'''\n",
        )
        .unwrap();
        assert!(inline.cosmos_rl.unwrap().config_text.unwrap().contains("sft"));
        for typo in ["[cosmos_rl]\nconfg = \"x\"\n", "[cosmos_rl.commands]\ntrainer = [\"x\"]\n"] {
            let err = crate::spec::JobSpec::from_toml(typo).unwrap_err();
            assert!(err.message.contains("unknown field"), "{typo}: {err}");
        }
    }

    #[test]
    fn config_is_read_relative_to_the_job_file_and_never_twice() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rl.toml"), "[policy]\n").unwrap();
        let mut s = CosmosRlSpec { config: Some("rl.toml".into()), ..CosmosRlSpec::default() };
        read_cosmos_config(&mut s, dir.path()).unwrap();
        assert_eq!(s.config_text.as_deref(), Some("[policy]\n"));
        let err = read_cosmos_config(&mut s, dir.path()).unwrap_err();
        assert!(err.message.contains("not both"), "{err}");
        let mut missing = CosmosRlSpec { config: Some("nope.toml".into()), ..CosmosRlSpec::default() };
        assert_eq!(read_cosmos_config(&mut missing, dir.path()).unwrap_err().field, "cosmos_rl.config");
    }
}
