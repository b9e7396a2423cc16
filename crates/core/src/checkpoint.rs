//! A job's checkpoints: the one rule for what counts as one (the patterns, TAO's by default), the
//! `find` expression every script uses to look for them (the checkpoint listing, `latest_model`, and
//! the batch script's search for the checkpoint an attempt resumes from), and TAO's resume key.

use crate::spec::SpecError;

/// TAO's checkpoint files (the TAO SDK's `get_checkpoints` extensions and the handler's
/// `latest_model` globs) and its checkpoint directories (`checkpoint-<step>/`, Hugging Face style):
/// a pattern ending in `/` names a directory. Matched without regard to case.
pub const DEFAULT_PATTERNS: &[&str] =
    &["*.pth", "*.pt", "*.ckpt", "*.tlt", "*.hdf5", "*.engine", "*.onnx", "*.trt", "*.safetensors", "checkpoint-*/"];

/// How deep under the results directory checkpoints are looked for (`train/`, `train/weights/`...).
pub const DEPTH: u32 = 4;

/// The environment variable every attempt after the first finds its newest checkpoint in (empty
/// when there is none yet).
pub const RESUME_VAR: &str = "TAO_RESUME_CHECKPOINT";

/// TAO's own resume key (`train.resume_training_checkpoint_path` in nvidia-tao-core's train
/// configs), set in the staged specs of a job with specs when it resumes.
pub const TAO_RESUME_KEY: &[&str] = &["train", "resume_training_checkpoint_path"];

/// The patterns as owned strings (what a plan keeps).
pub fn default_patterns() -> Vec<String> {
    DEFAULT_PATTERNS.iter().map(|p| p.to_string()).collect()
}

/// A pattern is a shell glob of letters, digits, `_.-*?[]` (single-quoted as is in a script),
/// optionally ending in `/` for a directory.
pub fn check_pattern(field: &str, pattern: &str) -> Result<(), SpecError> {
    let body = pattern.strip_suffix('/').unwrap_or(pattern);
    let ok = !body.is_empty()
        && body.len() <= 64
        && body.chars().all(|c| c.is_ascii_alphanumeric() || "_.-*?[]".contains(c));
    if ok {
        Ok(())
    } else {
        Err(SpecError::new(
            field,
            format!("{pattern:?} is not a checkpoint pattern (a glob like *.pth, or checkpoint-*/ for directories)"),
        ))
    }
}

/// Patterns from a comma-separated setting or field, each checked.
pub fn parse_patterns(field: &str, text: &str) -> Result<Vec<String>, SpecError> {
    let patterns: Vec<String> = text.split(',').map(str::trim).filter(|p| !p.is_empty()).map(String::from).collect();
    if patterns.is_empty() {
        return Err(SpecError::new(field, "names no pattern"));
    }
    for p in &patterns {
        check_pattern(field, p)?;
    }
    Ok(patterns)
}

/// The `find` tests (after the starting point) that select checkpoints: files and directories by
/// their patterns, never a name with a newline. Patterns passed [`check_pattern`].
pub fn find_tests(patterns: &[String]) -> String {
    format!("-mindepth 1 -maxdepth {DEPTH} ! -name $'*\\n*' \\( {} \\)", kinds(patterns))
}

/// The `find` expression that is true of a checkpoint (a file or a directory, which it prunes) by
/// its patterns; `-false` when there is none.
pub fn kinds(patterns: &[String]) -> String {
    let names = |dirs: bool| -> Vec<String> {
        patterns
            .iter()
            .filter(|p| p.ends_with('/') == dirs)
            .map(|p| format!("-iname '{}'", p.trim_end_matches('/')))
            .collect()
    };
    let (files, dirs) = (names(false), names(true));
    let mut kinds = Vec::new();
    if !files.is_empty() {
        kinds.push(format!("\\( -type f \\( {} \\) \\)", files.join(" -o ")));
    }
    if !dirs.is_empty() {
        kinds.push(format!("\\( -type d \\( {} \\) -prune \\)", dirs.join(" -o ")));
    }
    if kinds.is_empty() {
        return "-false".to_string();
    }
    kinds.join(" -o ")
}

/// Shell text that sets `var` to the newest checkpoint under the directory in `$dir_var` (an
/// absolute path; empty when there is none).
pub fn newest_shell(dir_var: &str, var: &str, patterns: &[String]) -> String {
    format!("{var}=\"$({})\"", newest_pipeline(&format!("\"${dir_var}/\""), "%p", patterns))
}

/// The pipeline that prints the newest checkpoint under `start` (a shell word), as `find -printf`'s
/// `path` directive gives it (`%p` with `start`, `%P` relative to it).
pub fn newest_pipeline(start: &str, path: &str, patterns: &[String]) -> String {
    format!(
        "find {start} {} -printf '%T@ {path}\\n' 2>/dev/null | sort -n | tail -n 1 | cut -d' ' -f2-",
        find_tests(patterns)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn patterns_are_checked_and_read_from_a_list() {
        assert_eq!(parse_patterns("f", " *.pth, ckpt-*/ ").unwrap(), vec!["*.pth", "ckpt-*/"]);
        for bad in ["*.pth'", "a b", "$(x)", "/", "", "../x"] {
            assert!(parse_patterns("f", bad).is_err(), "{bad:?} passed");
        }
        for p in DEFAULT_PATTERNS {
            check_pattern("f", p).unwrap();
        }
    }

    #[test]
    fn the_newest_checkpoint_file_or_directory_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("train/checkpoint-20")).unwrap();
        std::fs::write(d.join("train/checkpoint-20/model.safetensors"), b"x").unwrap();
        for (name, age) in [("train/e1.PTH", 300), ("train/e2.pth", 200), ("notes.txt", 0)] {
            std::fs::write(d.join(name), b"x").unwrap();
            let when = std::time::SystemTime::now() - std::time::Duration::from_secs(age);
            std::fs::File::options().write(true).open(d.join(name)).unwrap().set_modified(when).unwrap();
        }
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(250);
        std::fs::File::open(d.join("train/checkpoint-20")).unwrap().set_modified(old).unwrap();
        let run = |patterns: &[String]| {
            let script = format!("r={}\n{}\necho \"$c\"", d.display(), newest_shell("r", "c", patterns));
            let out = Command::new("bash").arg("-c").arg(script).output().unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        assert_eq!(run(&default_patterns()), format!("{}/train/e2.pth", d.display()));
        let dirs_only = vec!["checkpoint-*/".to_string()];
        assert_eq!(run(&dirs_only), format!("{}/train/checkpoint-20", d.display()));
        assert_eq!(run(&["*.nothing".to_string()]), "");
    }
}
