//! The script that installs enroot credentials for nvcr.io on the cluster, and the check of the key.
//! The key travels only inside the script on ssh's standard input (printf is a bash builtin: no argv
//! holds it) and lands only in the remote file. The engine's `credentials` runs it.

use crate::exit_codes::{CANNOT_CREATE_DIRS, CANNOT_STAGE, CANNOT_WRITE_SECRETS};
use crate::script::shell::quote;
use crate::spec::Secret;

/// The machines whose lines we own in the credentials file.
pub const NGC_MACHINES: &[&str] = &["nvcr.io", "authn.nvidia.com"];

/// Replace our two machine lines, keep every other line, mode 600, under umask 077.
pub fn enroot_credentials_script(key: &Secret) -> String {
    let mut s = String::from("set -u\numask 077\n");
    s.push_str("dir=\"${ENROOT_CONFIG_PATH:-$HOME/.config/enroot}\"\nf=\"$dir/.credentials\"\n");
    s.push_str(&format!(
        "mkdir -p \"$dir\" || exit {CANNOT_CREATE_DIRS}\ntmp=\"$(mktemp \"$f.XXXXXX\")\" || exit {CANNOT_STAGE}\n"
    ));
    let ours = NGC_MACHINES.iter().map(|m| m.replace('.', "\\.")).collect::<Vec<_>>().join("|");
    s.push_str(&format!("if [ -f \"$f\" ]; then grep -v -E '^machine ({ours}) ' \"$f\" > \"$tmp\"; fi\n"));
    for machine in NGC_MACHINES {
        s.push_str(&format!(
            "printf 'machine {machine} login $oauthtoken password %s\\n' {} >> \"$tmp\" || exit {CANNOT_WRITE_SECRETS}\n",
            quote(key.expose())
        ));
    }
    s.push_str(&format!(
        "chmod 600 \"$tmp\" && mv -f \"$tmp\" \"$f\" || {{ rm -f \"$tmp\"; exit {CANNOT_WRITE_SECRETS}; }}\necho \"$f\"\n"
    ));
    s
}

/// Why `key` cannot be installed, if it cannot (empty, or several lines that would break the file).
pub fn check_ngc_key(key: &Secret) -> Result<(), String> {
    if key.expose().trim().is_empty() || key.expose().contains(['\n', '\r']) {
        return Err("NGC_KEY is empty or spans several lines; set it to your NGC API key".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_only_its_own_lines() {
        let home = std::env::temp_dir().join(format!("tao-slurm-credentials-{}", std::process::id()));
        let dir = home.join(".config/enroot");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(".credentials"),
            "machine other.io login u password p\nmachine nvcr.io login $oauthtoken password OLD\n",
        )
        .unwrap();
        let key = Secret::new("k'ey$(x)");
        for _ in 0..2 {
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(enroot_credentials_script(&key))
                .env("HOME", &home)
                .env_remove("ENROOT_CONFIG_PATH")
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            assert!(!String::from_utf8_lossy(&out.stdout).contains("k'ey"));
        }
        let text = std::fs::read_to_string(dir.join(".credentials")).unwrap();
        assert_eq!(
            text,
            "machine other.io login u password p\nmachine nvcr.io login $oauthtoken password k'ey$(x)\nmachine authn.nvidia.com login $oauthtoken password k'ey$(x)\n"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(dir.join(".credentials")).unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::remove_dir_all(&home).unwrap();
        assert!(check_ngc_key(&Secret::new(" ")).is_err() && check_ngc_key(&Secret::new("a\nb")).is_err());
        assert!(check_ngc_key(&key).is_ok());
    }
}
