//! Secret values never reach a log: the engine registers every secret value it is handed (before any
//! script that carries one is built, so before the transport can trace it), and the log writer
//! replaces each occurrence by `***` (the core's [`Redactor`]). Trace logs of remote scripts (the
//! submit script carries secret values to the cluster) stay useful without leaking. One registry per
//! process, as the log it guards is.

use crate::spec::{Secret, SecretValues};
use std::io::Write;
use std::sync::RwLock;
use tao_slurm_core::redact::Redactor;

static SECRETS: RwLock<Redactor> = RwLock::new(Redactor::new());

/// Remember `value` (and the forms a script spells it in) as a secret.
pub fn register(value: &str) {
    SECRETS.write().unwrap_or_else(|e| e.into_inner()).add(value);
}

/// Register each secret of `values`.
pub fn register_all<'a>(values: impl IntoIterator<Item = &'a Secret>) {
    let mut r = SECRETS.write().unwrap_or_else(|e| e.into_inner());
    for v in values {
        r.add(v.expose());
    }
}

/// Register the values of `secrets`.
pub fn register_values(secrets: &SecretValues) {
    register_all(secrets.0.values());
}

/// `text` with every registered secret replaced by `***`.
pub fn redact(text: &str) -> std::borrow::Cow<'_, str> {
    SECRETS.read().unwrap_or_else(|e| e.into_inner()).redact(text)
}

/// A writer that redacts secrets from what passes through it (the log's standard error).
pub struct RedactingWriter<W: Write>(pub W);

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The log formatter hands over whole events; a secret split across two writes is not
        // possible for them.
        let text = String::from_utf8_lossy(buf);
        self.0.write_all(redact(&text).as_bytes())?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_values_and_their_quoted_forms_are_redacted() {
        register("s3cr'et-value");
        let script = format!(
            "printf 'export %s=%s\\n' TOKEN {} >> f; echo s3cr'et-value",
            crate::script::shell::quote(&crate::script::shell::quote("s3cr'et-value"))
        );
        let out = redact(&script);
        assert!(!out.contains("s3cr") && !out.contains("et-value"), "{out}");
        assert!(out.contains("TOKEN") && out.contains("***"));
        let mut sink = RedactingWriter(Vec::new());
        sink.write_all(b"x s3cr'et-value y").unwrap();
        assert_eq!(String::from_utf8(sink.0).unwrap(), "x *** y");
        register(" ");
        assert!(matches!(redact("nothing here"), std::borrow::Cow::Borrowed(_)), "a blank secret is not one");
    }

    #[test]
    fn secrets_handed_to_a_submission_are_hidden_from_its_trace() {
        let values = SecretValues([("TOKEN".to_string(), Secret::new("tok-handed-in-42"))].into());
        assert!(redact("tok-handed-in-42").contains("tok-handed-in-42"), "a value is hidden once handed over");
        register_values(&values);
        assert_eq!(redact("x tok-handed-in-42"), "x ***");
    }
}
