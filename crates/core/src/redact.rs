//! Secret values never reach a log: every [`crate::spec::Secret`] registers its value (and the quoted
//! forms in which scripts carry it) here, and the log writer replaces each occurrence by `***`. Trace
//! logs of remote scripts (the submit script carries secret values to the cluster) stay useful
//! without leaking.

use std::io::Write;
use std::sync::RwLock;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Remember `value` (and the forms a script spells it in) as a secret.
pub fn register(value: &str) {
    // A blank value hides nothing and would turn every space of a log into `***`.
    if value.trim().is_empty() {
        return;
    }
    let once = crate::script::shell::quote(value);
    let twice = crate::script::shell::quote(&once);
    let mut list = SECRETS.write().unwrap_or_else(|e| e.into_inner());
    for form in [value.to_string(), once, twice] {
        if !list.contains(&form) {
            list.push(form);
        }
    }
    // Longest first, so that a quoted form is replaced whole before the value inside it.
    list.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// `text` with every registered secret replaced by `***`.
pub fn redact(text: &str) -> std::borrow::Cow<'_, str> {
    let list = SECRETS.read().unwrap_or_else(|e| e.into_inner());
    if !list.iter().any(|s| text.contains(s.as_str())) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = text.to_string();
    for s in list.iter() {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), "***");
        }
    }
    std::borrow::Cow::Owned(out)
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
}
