use clap::Args;
use tao_slurm_engine::error::Error;

#[derive(Args, Debug)]
pub struct SchemaCmd {
    /// The command whose JSON output to describe (as listed with no argument), e.g. `preflight`
    pub command: Option<String>,
}

impl SchemaCmd {
    /// Offline: the JSON schema of a command's `--json` output, or of every command's.
    pub fn run(self) -> Result<i32, Error> {
        let all = super::output::schemas_document();
        match self.command {
            None => super::output::emit_json(&all),
            Some(name) => match all.get(&name) {
                Some(schema) => super::output::emit_json(schema),
                None => {
                    let names: Vec<&String> = all.as_object().map(|m| m.keys().collect()).unwrap_or_default();
                    let names: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
                    return Err(tao_slurm_engine::spec::SpecError::new(
                        "command",
                        format!("{name:?} has no JSON schema; commands: {}", names.join(", ")),
                    )
                    .into());
                }
            },
        }
        Ok(0)
    }
}
