//! `init`: what it asks the cluster (accounts, Pyxis) in one script and how it reads the answer; the
//! env file it writes (the settings' own names, merged into an existing file's other lines); the
//! ssh_config aliases it offers. Pure: `client::init` does the I/O.

use crate::protocol::{sections, SECTION};

/// The settings `init` writes, in the file's order. Never a secret.
pub const INIT_KEYS: &[&str] = &[
    "SLURM_HOSTNAME",
    "SLURM_USER",
    "SSH_KEY_PATH",
    "SSH_CONFIG",
    "SSH_KNOWN_HOSTS",
    "SLURM_PARTITION",
    "SLURM_ACCOUNT",
    "SLURM_BASE_RESULTS_DIR",
];

/// What the settings already say for each of [`INIT_KEYS`] (flags, then the environment, then the
/// env file; the TAO SDK's names, `SSH_HOST` and `SSH_USER`, standing for ours where ours are set
/// nowhere): `init`'s defaults, for its questions and for `--yes`. The packaged default partitions are
/// not a setting: only a `SLURM_PARTITION` that is set counts.
pub fn already_set(sources: &crate::config::SettingSources) -> Vec<(&'static str, String)> {
    let sources = crate::config::aliases::apply(sources);
    INIT_KEYS.iter().filter_map(|name| sources.get(name).map(|v| (*name, v.trim().to_string()))).collect()
}

/// One round trip: the user's Slurm accounts and whether `srun` takes `--container-image` (Pyxis).
pub fn probe_script() -> String {
    format!(
        "echo '{SECTION}accounts'\ntimeout 20 sacctmgr -n -P show assoc where user=\"$(id -un)\" format=Account 2>&1\n\
         echo '{SECTION}pyxis'\ntimeout 20 srun --help 2>/dev/null | grep -c -e '--container-image'\nexit 0\n"
    )
}

/// (accounts, Pyxis present) from [`probe_script`]'s output; accounts deduplicated, in order; None
/// when srun did not answer.
pub fn read_probe(stdout: &str) -> (Vec<String>, Option<bool>) {
    let secs = sections(stdout);
    let body = |name: &str| secs.iter().find(|(n, _, _)| n == name).map(|(_, _, b)| b.clone()).unwrap_or_default();
    let mut accounts: Vec<String> = Vec::new();
    for line in body("accounts").lines() {
        let a = line.trim();
        let plausible = !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if plausible && !accounts.iter().any(|x| x == a) {
            accounts.push(a.to_string());
        }
    }
    let pyxis = body("pyxis").lines().last().and_then(|l| l.trim().parse::<u32>().ok()).map(|c| c > 0);
    (accounts, pyxis)
}

/// A value as one env-file line can hold it (dotenv syntax): bare when plain, else single-quoted;
/// refused (naming the setting) when it has a control character or a quote.
pub fn env_value(name: &str, value: &str) -> Result<String, String> {
    if value.chars().any(|c| c.is_control() || c == '\'' || c == '"' || c == '\\') {
        return Err(format!("{name}: {value:?} has a control character, a quote or a backslash"));
    }
    if value.chars().all(|c| c.is_ascii_alphanumeric() || "._/@:,+-~%".contains(c)) {
        Ok(value.to_string())
    } else {
        Ok(format!("'{value}'"))
    }
}

/// The env file's text: `existing` with each line of a setting in `values` replaced (and a line of
/// an [`INIT_KEYS`] setting not in `values` dropped), every other line kept as it was (a secret
/// stays); new settings appended.
pub fn render_env_file(existing: Option<&str>, values: &[(&str, String)]) -> Result<String, String> {
    let mut out = String::new();
    let mut written: Vec<&str> = Vec::new();
    let line_of = |name: &str, value: &str| env_value(name, value).map(|v| format!("{name}={v}\n"));
    for line in existing.unwrap_or("").lines() {
        let key = line.trim_start().trim_start_matches("export ").split('=').next().unwrap_or("").trim();
        match values.iter().find(|(n, _)| *n == key) {
            Some((n, v)) if !written.contains(n) => {
                out.push_str(&line_of(n, v)?);
                written.push(n);
            }
            Some(_) => {}
            None if INIT_KEYS.contains(&key) => {}
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    if existing.is_none() {
        out.push_str("# written by tao-slurm init; every setting: see tao-slurm's docs/configuration.md\n");
    }
    for (n, v) in values.iter().filter(|(n, _)| !written.contains(n)) {
        out.push_str(&line_of(n, v)?);
    }
    Ok(out)
}

/// The host aliases of an ssh_config text (`Host` lines; patterns with `*`, `?` or `!` left out).
pub fn ssh_config_aliases(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        let rest: Vec<&str> = if let Some(v) = first.strip_prefix("Host=").or_else(|| first.strip_prefix("host=")) {
            std::iter::once(v).chain(words).collect()
        } else if first.eq_ignore_ascii_case("host") {
            words.collect()
        } else {
            continue;
        };
        for alias in rest {
            if !alias.contains(['*', '?', '!']) && !out.iter().any(|a| a == alias) {
                out.push(alias.to_string());
            }
        }
    }
    out
}

/// The fix for a private key others can read: ssh refuses it.
pub fn key_mode_fix(path: &str, mode: u32) -> Option<String> {
    (mode & 0o077 != 0).then(|| {
        format!("{path} has mode {:o}: ssh refuses a private key others can read; run `chmod 600 {path}`", mode & 0o777)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_takes_what_the_environment_and_the_env_file_already_say() {
        let map = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let sources = crate::config::SettingSources {
            flags: Default::default(),
            // The TAO SDK's names as its skill has an agent export them, and one of its aliases.
            env: map(&[
                ("SSH_HOST", "login.example.org"),
                ("SLURM_USER", "ada"),
                ("SSH_KEY_PATH", "/home/ada/.ssh/id_ed25519"),
                ("SLURM_BASE_RESULTS_DIR", "/lustre/ada"),
                ("SLURM_ACCOUNT", " "),
                ("NGC_KEY", "not-an-init-setting"),
            ]),
            file: map(&[("SLURM_PARTITION", "gpu"), ("SLURM_USER", "from-the-file")]),
            uid: Some(1000),
        };
        assert_eq!(
            already_set(&sources),
            vec![
                ("SLURM_HOSTNAME", "login.example.org".to_string()),
                ("SLURM_USER", "ada".to_string()),
                ("SSH_KEY_PATH", "/home/ada/.ssh/id_ed25519".to_string()),
                ("SLURM_PARTITION", "gpu".to_string()),
                ("SLURM_BASE_RESULTS_DIR", "/lustre/ada".to_string()),
            ],
            "the environment over the file, our names for the TAO SDK's, blank values unset"
        );
        let none = crate::config::SettingSources {
            flags: Default::default(),
            env: Default::default(),
            file: Default::default(),
            uid: None,
        };
        assert!(already_set(&none).is_empty(), "the packaged default partitions are no answer");
    }

    #[test]
    fn the_probe_reads_accounts_and_pyxis() {
        let out = format!("{SECTION}accounts\ndefault\nteam-a\ndefault\nsacctmgr: error x y\n{SECTION}pyxis\n2\n");
        assert_eq!(read_probe(&out), (vec!["default".to_string(), "team-a".to_string()], Some(true)));
        assert_eq!(read_probe(&format!("{SECTION}accounts\n{SECTION}pyxis\n0\n")).1, Some(false));
        assert_eq!(read_probe("").1, None);
    }

    #[test]
    fn the_env_file_keeps_other_lines_and_replaces_ours() {
        let old = "NGC_KEY=secret\nSLURM_USER=old\nSLURM_ACCOUNT=gone\n# note\n";
        let text = render_env_file(
            Some(old),
            &[("SLURM_HOSTNAME", "h:2222".into()), ("SLURM_USER", "me".into()), ("SSH_KEY_PATH", "/a b/k".into())],
        )
        .unwrap();
        assert_eq!(text, "NGC_KEY=secret\nSLURM_USER=me\n# note\nSLURM_HOSTNAME=h:2222\nSSH_KEY_PATH='/a b/k'\n");
        assert!(render_env_file(None, &[("SLURM_USER", "a\nB=c".into())]).unwrap_err().starts_with("SLURM_USER"));
        assert!(render_env_file(None, &[("SLURM_USER", "me".into())]).unwrap().ends_with("SLURM_USER=me\n"));
    }

    #[test]
    fn aliases_leave_patterns_out() {
        let text = "Host a b\n  HostName x\nHost *\nhost=c\nMatch all\nHost !d e?\n";
        assert_eq!(ssh_config_aliases(text), vec!["a", "b", "c"]);
    }

    #[test]
    fn a_key_others_can_read_is_named_with_its_fix() {
        assert_eq!(key_mode_fix("/k", 0o100600), None);
        assert!(key_mode_fix("/k", 0o100644).unwrap().ends_with("run `chmod 600 /k`"));
    }
}
