//! Field checks shared by the spec and the plan. Each error names the field and says what is allowed.

use regex::Regex;
use std::fmt;
use std::sync::LazyLock;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub field: String,
    pub message: String,
}

impl SpecError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> SpecError {
        SpecError { field: field.into(), message: message.into() }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.field, self.message)
    }
}

impl std::error::Error for SpecError {}

static SLURM_WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$").unwrap());
static ENV_NAME: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$").unwrap());

/// A Slurm name (partition, account, qos, reservation): letters, digits and `_ . + -`.
pub fn check_slurm_word(field: &str, value: &str) -> Result<(), SpecError> {
    if SLURM_WORD.is_match(value) {
        Ok(())
    } else {
        Err(SpecError::new(
            field,
            format!("{value:?} is not a Slurm name; use letters, digits and _ . + - (at most 128, starting with a letter or digit)"),
        ))
    }
}

/// An environment variable name: a shell identifier.
pub fn check_env_name(field: &str, name: &str) -> Result<(), SpecError> {
    if ENV_NAME.is_match(name) {
        Ok(())
    } else {
        Err(SpecError::new(
            field,
            format!("{name:?} is not a valid variable name; use letters, digits and _ , not starting with a digit"),
        ))
    }
}

/// Variables the shell or the dynamic loader read: set for the batch script, they would change how
/// it (and srun, scontrol) run, not just the container.
const SUBVERTING_NAMES: &[&str] =
    &["PATH", "BASH_ENV", "ENV", "IFS", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "CDPATH", "GLOBIGNORE"];
const SUBVERTING_PREFIXES: &[&str] = &["LD_", "BASH_FUNC_"];
/// How Slurm hands SPANK plugins their options (Pyxis' `--container-*` among them): `_SLURM_SPANK_OPTION_`
/// for a step's options, `SLURM_SPANK_` for options sbatch passes on to the steps of its script, and
/// `SPANK_` for a plugin's job-control variables. In a job's environment they would set container
/// options (mounts, image, workdir) that policy never saw.
const SPANK_PREFIXES: &[&str] = &["_SLURM_SPANK_OPTION_", "SLURM_SPANK_", "SPANK_"];
/// The batch script's own shell variables (besides every `tao_` name, which the Cosmos-RL script uses).
const SCRIPT_LOCALS: &[&str] = &["rc", "counter", "done_requeues", "owned", "said", "size"];

/// A variable name a user may set for a job (`env` or `secret_env`): a valid name that neither
/// subverts the batch script nor collides with one the script sets itself (`owned_by_us`).
pub fn check_user_env_name(field: &str, name: &str, owned_by_us: &dyn Fn(&str) -> bool) -> Result<(), SpecError> {
    check_env_name(field, name)?;
    if SUBVERTING_NAMES.contains(&name) || SUBVERTING_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return Err(SpecError::new(
            field,
            format!(
                "{name} would change how the batch script itself runs (the shell or the loader reads it), not just your command; set it inside the command instead, e.g. --shell -- 'export {name}=...; python train.py'"
            ),
        ));
    }
    let upper = name.to_ascii_uppercase();
    if let Some(prefix) = SPANK_PREFIXES.iter().find(|p| upper.starts_with(*p)) {
        return Err(SpecError::new(
            field,
            format!(
                "{name} is named like Slurm's SPANK plugin options ({prefix}*), through which it would set container options (mounts, image) past the policy; use the job's own fields for those"
            ),
        ));
    }
    if owned_by_us(name) || SCRIPT_LOCALS.contains(&name) || name.starts_with("tao_") {
        return Err(SpecError::new(field, format!("{name} is set by tao-slurm itself and cannot be overridden")));
    }
    Ok(())
}

/// Free text that ends up in the script: no NUL, newline or other control characters (tab allowed).
pub fn check_text(field: &str, value: &str) -> Result<(), SpecError> {
    match value.chars().find(|c| c.is_control() && *c != '\t') {
        Some(c) => Err(SpecError::new(
            field,
            format!("contains the control character {c:?}; newlines, NUL and other control characters are not allowed"),
        )),
        None => Ok(()),
    }
}

/// A value checked against a pattern of allowed characters; `what` says what is allowed.
pub fn check_with(field: &str, value: &str, pattern: &Regex, what: &str) -> Result<(), SpecError> {
    if pattern.is_match(value) {
        Ok(())
    } else {
        Err(SpecError::new(field, format!("{value:?} is not allowed; use {what}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_words() {
        for ok in ["polar", "long", "gpu_a100", "acct-1.x"] {
            assert!(check_slurm_word("partition", ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "a\nb", "$(id)", "-p", "a,b", "x;y"] {
            let err = check_slurm_word("partition", bad).unwrap_err();
            assert_eq!(err.field, "partition");
        }
    }

    #[test]
    fn env_names_and_text() {
        assert!(check_env_name("env", "FOO_1").is_ok());
        let none = |_: &str| false;
        for bad in ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "BASH_ENV", "ENV", "IFS", "rc", "SPANK_CONTAINER_IMAGE"] {
            let err = check_user_env_name("env", bad, &none).unwrap_err();
            assert!(err.to_string().contains(bad) && err.field == "env", "{err}");
        }
        assert!(check_user_env_name("secret_env", "HF_TOKEN", &none).is_ok());
        // Slurm's SPANK option variables (Pyxis reads its --container-* options through them).
        for spank in [
            "_SLURM_SPANK_OPTION_pyxis_container_mounts",
            "SLURM_SPANK__SLURM_SPANK_OPTION_pyxis_container_image",
            "SPANK_PYXIS_CONTAINER_MOUNTS",
            "_slurm_spank_option_pyxis_container_mounts",
        ] {
            for field in ["env", "secret_env"] {
                let err = check_user_env_name(field, spank, &none).unwrap_err();
                assert_eq!(err.field, field);
                assert!(err.to_string().contains(spank) && err.to_string().contains("SPANK"), "{err}");
            }
        }
        assert!(check_user_env_name("env", "MY_SLURM_SPANK_NOTE", &none).is_ok(), "only the prefixes");
        assert!(check_user_env_name("env", "MINE", &|n| n == "MINE").is_err());
        assert!(check_env_name("env", "_X").is_ok());
        for bad in ["1X", "A-B", "", "A B", "A=B", "$X"] {
            assert!(check_env_name("env", bad).is_err(), "{bad}");
        }
        assert!(check_text("env", "a b\tc $(x)").is_ok());
        assert!(check_text("env", "a\nb").is_err());
        assert!(check_text("env", "a\0b").is_err());
    }
}
