//! Every rule for turning values into POSIX shell text lives here, so that user input can only ever
//! reach a remote shell as an inert, single-quoted word.

use std::fmt;

/// A value that cannot be represented safely in shell text (a NUL byte cannot be passed at all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnquotableValue;

impl fmt::Display for UnquotableValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("value contains a NUL byte, which no shell word can carry")
    }
}

/// Quote one word for a POSIX shell. Words made only of characters that are never special are left bare
/// (it keeps scripts readable); everything else is single-quoted, with `'` written as `'\''`.
///
/// Panics never; a NUL byte is replaced by nothing only in [`quote_lossy`]. Callers that accept user input
/// validate against NUL before reaching here (see [`check_quotable`]).
pub fn quote(word: &str) -> String {
    if !word.is_empty() && word.bytes().all(is_safe_byte) {
        return word.to_string();
    }
    let mut out = String::with_capacity(word.len() + 2);
    out.push('\'');
    for ch in word.chars() {
        if ch == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(ch);
        }
    }
    out.push('\'');
    out
}

/// Refuse what [`quote`] cannot carry.
pub fn check_quotable(word: &str) -> Result<(), UnquotableValue> {
    if word.contains('\0') {
        Err(UnquotableValue)
    } else {
        Ok(())
    }
}

/// Quote every word of an argv and join them with spaces: one command line.
pub fn join<S: AsRef<str>>(argv: &[S]) -> String {
    argv.iter().map(|w| quote(w.as_ref())).collect::<Vec<_>>().join(" ")
}

fn is_safe_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/' | b':' | b'=' | b'@' | b'%' | b'+' | b',')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::process::Command;

    #[test]
    fn table() {
        let cases = [
            ("abc", "abc"),
            ("", "''"),
            ("a b", "'a b'"),
            ("it's", "'it'\\''s'"),
            ("$(rm -rf /)", "'$(rm -rf /)'"),
            ("`x`", "'`x`'"),
            ("a;b", "'a;b'"),
            ("line\nbreak", "'line\nbreak'"),
            ("/lustre/data:/data", "/lustre/data:/data"),
            ("nvcr.io#nvidia/tao:1", "'nvcr.io#nvidia/tao:1'"),
            ("~user", "'~user'"),
            ("*", "'*'"),
        ];
        for (input, want) in cases {
            assert_eq!(quote(input), want, "quote({input:?})");
        }
    }

    #[test]
    fn nul_is_refused() {
        assert!(check_quotable("a\0b").is_err());
        assert!(check_quotable("a b").is_ok());
    }

    proptest! {
        // Whatever the words, bash must read them back exactly as they were.
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn bash_reads_back_every_word(words in proptest::collection::vec("[^\u{0}]{0,12}", 1..4)) {
            let script = format!("printf '%s\\0' {}", join(&words));
            let out = Command::new("bash").arg("-c").arg(&script).output().unwrap();
            prop_assert!(out.status.success());
            let got: Vec<String> = String::from_utf8(out.stdout).unwrap()
                .split('\0').map(str::to_string).collect();
            let mut want = words.clone();
            want.push(String::new());
            prop_assert_eq!(got, want);
        }
    }
}
