//! Hiding secret values in text: the forms a secret takes in scripts (as is, quoted once for the
//! shell, quoted twice inside a printf argument) and their replacement by `***`. Pure: the registry
//! of the values in use, and the log writer that applies it, are the engine's (`tao_slurm::redact`).

use std::borrow::Cow;

/// The shortest value (blanks around it not counted) that is hidden: a shorter one is in ordinary
/// text everywhere, so hiding it would mask the log rather than the secret. The service refuses org
/// secrets shorter than its own, larger minimum (`service::org_secrets::MIN_SECRET_BYTES`).
pub const MIN_HIDDEN_BYTES: usize = 4;

/// The secret values to hide, in every form a script spells them, longest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redactor {
    forms: Vec<String>,
}

impl Redactor {
    pub const fn new() -> Redactor {
        Redactor { forms: Vec::new() }
    }

    /// Hide `value` (and the forms a script spells it in) from now on.
    pub fn add(&mut self, value: &str) {
        // A blank or very short value hides nothing (it is guessed) and would turn every such
        // character of a log into `***`.
        if value.trim().len() < MIN_HIDDEN_BYTES {
            return;
        }
        let once = crate::script::shell::quote(value);
        let twice = crate::script::shell::quote(&once);
        for form in [value.to_string(), once, twice] {
            if !self.forms.contains(&form) {
                self.forms.push(form);
            }
        }
        // Longest first, so that a quoted form is replaced whole before the value inside it.
        self.forms.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    /// `text` with every secret replaced by `***`.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if !self.forms.iter().any(|s| text.contains(s.as_str())) {
            return Cow::Borrowed(text);
        }
        let mut out = text.to_string();
        for s in &self.forms {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), "***");
            }
        }
        Cow::Owned(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_their_quoted_forms_are_redacted() {
        let mut r = Redactor::new();
        r.add("s3cr'et-value");
        let script = format!(
            "printf 'export %s=%s\\n' TOKEN {} >> f; echo s3cr'et-value",
            crate::script::shell::quote(&crate::script::shell::quote("s3cr'et-value"))
        );
        let out = r.redact(&script);
        assert!(!out.contains("s3cr") && !out.contains("et-value"), "{out}");
        assert!(out.contains("TOKEN") && out.contains("***"));
        r.add(" ");
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)), "a blank secret is not one");
        for short in ["e", " e ", "ab", "abc"] {
            r.add(short);
            assert_eq!(r.redact("the cat sat, abc"), "the cat sat, abc", "{short:?} is not hidden");
        }
        r.add("abcd");
        assert_eq!(r.redact("the cat sat, abcd"), "the cat sat, ***");
    }
}
