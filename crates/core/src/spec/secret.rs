//! Secret values: a type whose Debug and Display print `***`, so a secret cannot reach a log or an
//! error message by accident.

use super::{check_env_name, SpecError};
use std::collections::BTreeMap;
use std::fmt;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A secret. The engine registers the values it is handed so that no log line can carry them
    /// (see [`crate::redact`]).
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }
    /// The value itself; call only where it is written to its one destination.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Values for a spec's `secret_env` names.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SecretValues(pub BTreeMap<String, Secret>);

impl SecretValues {
    /// Look every name up: first in `file` (a secrets env file), then in the submitting environment.
    /// A missing name or a value that cannot be carried safely is an error that names it.
    pub fn resolve(
        names: &[String],
        file: &BTreeMap<String, String>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<SecretValues, SpecError> {
        let mut values = BTreeMap::new();
        for name in names {
            check_env_name("secret_env", name)?;
            let value = file.get(name).cloned().or_else(|| env(name)).ok_or_else(|| {
                SpecError::new(
                    "secret_env",
                    format!(
                        "{name} has no value: export it in the submitting environment or put it in --secret-env-file"
                    ),
                )
            })?;
            if value.contains('\0') {
                return Err(SpecError::new("secret_env", format!("the value of {name} contains a NUL byte")));
            }
            values.insert(name.clone(), Secret::new(value));
        }
        Ok(SecretValues(values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s} {s:?}"), "*** ***");
        let v = SecretValues([("K".to_string(), s)].into());
        assert!(!format!("{v:?}").contains("hunter2"));
    }

    #[test]
    fn resolution_order_and_errors() {
        let file: BTreeMap<String, String> = [("A".to_string(), "from-file".to_string())].into();
        let env = |n: &str| (n == "A" || n == "B").then(|| format!("env-{n}"));
        let v = SecretValues::resolve(&["A".into(), "B".into()], &file, &env).unwrap();
        assert_eq!(v.0["A"].expose(), "from-file");
        assert_eq!(v.0["B"].expose(), "env-B");
        let err = SecretValues::resolve(&["C".into()], &file, &env).unwrap_err();
        assert!(err.message.contains("C has no value"), "{err}");
        assert!(SecretValues::resolve(&["1X".into()], &file, &env).is_err());
    }
}
