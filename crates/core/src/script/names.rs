//! File names as command arguments. A job writes its results directory, so a name found there (by
//! `find`, as the newest checkpoint, in a listing) is hostile input: `--checkpoint-action=exec=...`
//! is a file name a job can make, and `tar` would take it for an option. Every command that gets
//! such names (or names a caller asked for) is built here: the command and its options, then `--`,
//! then the names, each `./`-prefixed (so that no name can start with `-` even for a command that
//! ignores `--`), each checked to stay inside the directory the command runs in (relative, no `..`
//! part, no control character such as a newline).
//!
//! Names known when the script is made go through [`name_word`]; names a script finds at run time
//! go through the shell function [`CHECK_FUNCTION`] (`tao_name_push NAME`), which appends `./NAME`
//! to the bash array [`ARRAY`] only when the name passes the same rule; the array is expanded after
//! the `--` that [`command`] writes.

use crate::script::shell::quote;
use crate::spec::SpecError;

/// Whether `name` is a path inside the directory it is relative to: not empty, not absolute, no
/// `..` part, no control character (a newline would split a listing's line).
pub fn is_inside(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('/')
        && !name.chars().any(char::is_control)
        && !name.split('/').any(|p| p == "..")
}

/// A name asked for by a caller: [`is_inside`], and not starting with `-` (no user means one).
pub fn check(field: &str, name: &str) -> Result<(), SpecError> {
    if is_inside(name) && !name.starts_with('-') {
        return Ok(());
    }
    Err(SpecError::new(
        field,
        format!("{name:?} is not a file of the job's results (a relative path, no '..', not starting with - or /)"),
    ))
}

/// One checked name as a shell word: `./name`, quoted.
pub fn name_word(field: &str, name: &str) -> Result<String, SpecError> {
    check(field, name)?;
    Ok(quote(&format!("./{name}")))
}

/// The bash array of checked names ([`CHECK_FUNCTION`] fills it) as one shell word for [`command`].
pub const ARRAY: &str = "\"${tao_names[@]}\"";

/// The shell function that checks a name found at run time by the rule of [`is_inside`] and, when
/// it passes, appends `./NAME` to the array `tao_names` ([`ARRAY`]): `tao_name_push "$c" || ...`.
/// Returns 1 (and appends nothing) for a name that fails. (Bash 4.2 and later.)
pub const CHECK_FUNCTION: &str = concat!(
    "tao_names=()\n",
    "tao_name_push() { case \"$1\" in ''|/*|..|../*|*/..|*/../*|*[[:cntrl:]]*) return 1 ;; esac; ",
    "tao_names+=(\"./$1\"); }\n",
);

/// A command line: `command` (shell text: the program and its options, each quoted, e.g. by
/// [`crate::script::shell::join`]), `--`, then `names`, shell words that are `./`-prefixed names
/// ([`name_word`]), the expansion of the array only [`CHECK_FUNCTION`] fills ([`ARRAY`]), or paths of
/// tao-slurm's own files. Options cannot follow: everything after `--` is a name.
pub fn command(command: &str, names: &[String]) -> String {
    let mut s = command.to_string();
    s.push_str(" --");
    for n in names {
        s.push(' ');
        s.push_str(n);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::shell::join;
    use proptest::prelude::*;
    use std::process::Command;

    /// The arguments bash passes for `script`, split at NUL.
    fn argv(script: &str) -> Vec<String> {
        let out = Command::new("bash").arg("-c").arg(format!("{CHECK_FUNCTION}{script}")).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        text.split_terminator('\0').map(str::to_string).collect()
    }

    #[test]
    fn names_stay_inside() {
        for ok in ["status.json", "train/model_epoch_002.pth", "a b.txt", "..x", "x..", "a/.../b"] {
            assert!(check("file_lists", ok).is_ok(), "{ok}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "..", "a/..", "-rf", "a\nb", "a\rb"] {
            assert_eq!(check("file_lists", bad).unwrap_err().field, "file_lists", "{bad:?}");
        }
        assert!(is_inside("--checkpoint-action=exec=sh x;.pth"), "found names may start with -: ./ keeps them names");
    }

    #[test]
    fn hostile_names_found_at_run_time_are_names_or_left_out() {
        let cases = [
            ("--checkpoint-action=exec=sh x;.pth", Some("./--checkpoint-action=exec=sh x;.pth")),
            ("--files-from=/etc/passwd", Some("./--files-from=/etc/passwd")),
            ("-C", Some("./-C")),
            ("train/e.pth", Some("./train/e.pth")),
            ("../../etc/passwd", None),
            ("/etc/passwd", None),
            ("a\nb.pth", None),
            ("", None),
        ];
        for (name, want) in cases {
            let got = argv(&format!(
                "tao_name_push {q} || printf 'refused\\0'; printf '%s\\0' {cmd}",
                q = quote(name),
                cmd = command(&join(&["tar", "-cf", "-"]), &[ARRAY.to_string()])
            ));
            let mut expected: Vec<String> = Vec::new();
            if want.is_none() {
                expected.push("refused".into());
            }
            expected.extend(["tar", "-cf", "-", "--"].map(String::from));
            expected.extend(want.map(String::from));
            assert_eq!(got, expected, "{name:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any name: after `--` only `./name` (never an argument starting with `-`), or nothing.
        #[test]
        fn any_name_is_an_argument_after_the_double_dash(name in "[^\u{0}]{0,16}", known in "[^\u{0}]{0,16}") {
            let mut words = vec![ARRAY.to_string()];
            if let Ok(w) = name_word("f", &known) {
                words.push(w);
            }
            let got = argv(&format!(
                "tao_name_push {}; printf '%s\\0' {}",
                quote(&name),
                command(&join(&["du", "-cbs"]), &words)
            ));
            prop_assert_eq!(&got[..3], &["du".to_string(), "-cbs".into(), "--".into()][..]);
            let mut want = Vec::new();
            if is_inside(&name) {
                want.push(format!("./{name}"));
            }
            if check("f", &known).is_ok() {
                want.push(format!("./{known}"));
            }
            prop_assert_eq!(&got[3..], &want[..]);
            for a in &got[3..] {
                prop_assert!(a.starts_with("./"), "{a:?}");
            }
        }
    }
}
