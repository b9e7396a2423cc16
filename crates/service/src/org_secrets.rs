//! Each org's secrets: values an org stores through the API (write-only: never returned), encrypted at
//! rest in the service database with XChaCha20-Poly1305 under a key file the operator holds, plus the
//! names the operator maps from the service's environment for that org. A job's `secret_env` resolves
//! only from these; any other name gets one neutral refusal, whatever the reason, so a caller learns
//! nothing about the service's environment.

use super::error::ApiError;
use super::operator::OrgRules;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use tao_slurm_engine::client::records::OrgSecrets;
use tao_slurm_engine::spec::SecretValues;

/// The setting that names the key file.
pub const KEY_FILE_SETTING: &str = "TAO_SLURM_SECRETS_KEY_FILE";

/// The at-rest cipher, from the operator's key file.
pub struct SecretBox {
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBox(***)")
    }
}

/// The associated data binds a value to its org and name: a row copied to another org or name does
/// not decrypt.
fn aad(org: &str, name: &str) -> Vec<u8> {
    format!("tao-slurm org secret\0{org}\0{name}").into_bytes()
}

impl SecretBox {
    /// Read the key file: a regular file of ours (not a symlink), mode 600 or narrower, holding 32
    /// bytes (raw, or 64 hex digits).
    pub fn from_key_file(path: &Path) -> Result<SecretBox, String> {
        let fix = format!("make it with: head -c 32 /dev/urandom > {0} && chmod 600 {0}", path.display());
        let meta = std::fs::symlink_metadata(path)
            .map_err(|e| format!("{KEY_FILE_SETTING}: cannot read the key file: {e}; {fix}"))?;
        if !meta.is_file() {
            return Err(format!(
                "{KEY_FILE_SETTING}: {} is not a regular file (a symlink is never followed)",
                path.display()
            ));
        }
        if meta.uid() != tao_slurm_engine::private::current_uid() || meta.permissions().mode() & 0o077 != 0 {
            return Err(format!(
                "{KEY_FILE_SETTING}: {} must be yours and private (chmod 600 {})",
                path.display(),
                path.display()
            ));
        }
        let bytes = std::fs::read(path).map_err(|e| format!("{KEY_FILE_SETTING}: {e}"))?;
        let text = std::str::from_utf8(&bytes).ok().map(str::trim);
        let key: Vec<u8> = match text {
            Some(t) if t.len() == 64 && t.chars().all(|c| c.is_ascii_hexdigit()) => {
                (0..32).map(|i| u8::from_str_radix(&t[2 * i..2 * i + 2], 16).unwrap_or(0)).collect()
            }
            _ if bytes.len() == 32 => bytes,
            _ => return Err(format!("{KEY_FILE_SETTING}: the key must be 32 bytes (or 64 hex digits); {fix}")),
        };
        Ok(SecretBox { cipher: XChaCha20Poly1305::new(Key::from_slice(&key)) })
    }

    /// (nonce, ciphertext) of `value`.
    pub fn seal(&self, org: &str, name: &str, value: &str) -> Result<(Vec<u8>, Vec<u8>), String> {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = self
            .cipher
            .encrypt(&nonce, Payload { msg: value.as_bytes(), aad: &aad(org, name) })
            .map_err(|_| "cannot encrypt the secret".to_string())?;
        Ok((nonce.to_vec(), sealed))
    }

    pub fn open(&self, org: &str, name: &str, nonce: &[u8], sealed: &[u8]) -> Result<String, String> {
        if nonce.len() != 24 {
            return Err(format!("secret {name} of org {org}: a damaged record"));
        }
        let plain = self
            .cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg: sealed, aad: &aad(org, name) })
            .map_err(|_| format!("secret {name} of org {org} does not decrypt with this key file"))?;
        String::from_utf8(plain).map_err(|_| format!("secret {name} of org {org}: not text"))
    }
}

/// Check a secret's name and value as a request gives them (the field at fault named).
pub fn check(name: &str, value: &str) -> Result<(), ApiError> {
    tao_slurm_engine::spec::check_env_name("name", name).map_err(|e| ApiError::field("name", e.message))?;
    if value.trim().len() < MIN_SECRET_BYTES || value.len() > 64 * 1024 || value.contains('\0') {
        return Err(ApiError::field(
            "value",
            format!(
                "a secret is {MIN_SECRET_BYTES} bytes (not counting blanks around it) to 64 KiB of text without NUL bytes: a shorter one is guessed, and hiding it would mask ordinary text in every log"
            ),
        ));
    }
    Ok(())
}

/// The shortest secret value an org may store or be given from the service's environment: the log
/// writer replaces every occurrence of a secret's value, and a value of a byte or two is in every line.
pub const MIN_SECRET_BYTES: usize = 8;

/// The one refusal for a secret name the org cannot use, whatever the reason.
pub fn unavailable(name: &str, org: &str) -> ApiError {
    ApiError::field(
        "secret_env",
        format!(
            "{name} is not one of org {org}'s secrets: store it with PUT /api/v2/orgs/{org}/secrets/{name}, or ask the operator to map it"
        ),
    )
}

/// Every secret value the org has, by name: stored ones, then the operator's mappings from the
/// service's environment (a stored value wins).
pub fn org_values(
    stored: &OrgSecrets,
    sbox: Option<&SecretBox>,
    org: &str,
    rules: &OrgRules,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, String> {
    let mut values = BTreeMap::new();
    for (name, var) in &rules.secret_env {
        match env(var).filter(|v| !v.is_empty()) {
            Some(v) if v.trim().len() < MIN_SECRET_BYTES => tracing::warn!(
                %org, secret = %name, variable = %var,
                "the service's variable is shorter than {MIN_SECRET_BYTES} bytes: not given to the org as a secret"
            ),
            Some(v) => {
                values.insert(name.clone(), v);
            }
            None => {}
        }
    }
    if let Some(sbox) = sbox {
        for (name, nonce, sealed) in stored.list(org)? {
            values.insert(name.clone(), sbox.open(org, &name, &nonce, &sealed)?);
        }
    }
    Ok(values)
}

/// A job's `secret_env` from the org's secrets only.
pub fn resolve(names: &[String], org: &str, values: &BTreeMap<String, String>) -> Result<SecretValues, ApiError> {
    for name in names {
        tao_slurm_engine::spec::check_env_name("secret_env", name)
            .map_err(|e| ApiError::field("secret_env", e.message))?;
        if !values.contains_key(name) {
            return Err(unavailable(name, org));
        }
    }
    let only: BTreeMap<String, String> =
        names.iter().filter_map(|n| values.get(n).map(|v| (n.clone(), v.clone()))).collect();
    SecretValues::resolve(names, &only, &|_| None).map_err(|_| unavailable(names.first().map_or("", |n| n), org))
}

/// `text` with every value of the org's secrets replaced by `***` (defence in depth: a job can still
/// print a value encoded).
pub fn redact(text: String, values: &BTreeMap<String, String>) -> String {
    let mut list: Vec<&str> = values
        .values()
        .map(String::as_str)
        .filter(|v| v.trim().len() >= tao_slurm_core::redact::MIN_HIDDEN_BYTES)
        .collect();
    list.sort_by_key(|v| std::cmp::Reverse(v.len()));
    let mut out = text;
    for v in list {
        if out.contains(v) {
            out = out.replace(v, "***");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_file(dir: &Path, mode: u32) -> std::path::PathBuf {
        let p = dir.join("key");
        std::fs::write(&p, [7u8; 32]).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn the_key_file_must_be_private_and_values_stay_bound_to_org_and_name() {
        let dir = tempfile::tempdir().unwrap();
        let err = SecretBox::from_key_file(&key_file(dir.path(), 0o644)).unwrap_err();
        assert!(err.contains("chmod 600"), "{err}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("key"), &link).unwrap();
        assert!(SecretBox::from_key_file(&link).unwrap_err().contains("symlink"));
        let sbox = SecretBox::from_key_file(&key_file(dir.path(), 0o600)).unwrap();
        let (nonce, sealed) = sbox.seal("team-a", "HF_TOKEN", "hunter2-value").unwrap();
        assert!(!sealed.windows(7).any(|w| w == b"hunter2"), "sealed, not stored as it is");
        assert_eq!(sbox.open("team-a", "HF_TOKEN", &nonce, &sealed).unwrap(), "hunter2-value");
        assert!(sbox.open("team-b", "HF_TOKEN", &nonce, &sealed).is_err(), "another org's row does not open");
        assert!(sbox.open("team-a", "OTHER", &nonce, &sealed).is_err(), "nor under another name");
        let (n2, _) = sbox.seal("team-a", "HF_TOKEN", "hunter2-value").unwrap();
        assert_ne!(nonce, n2, "a fresh nonce each time");
        std::fs::write(dir.path().join("short"), b"abc").unwrap();
        std::fs::set_permissions(dir.path().join("short"), std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(SecretBox::from_key_file(&dir.path().join("short")).unwrap_err().contains("32 bytes"));
    }

    #[test]
    fn one_refusal_whatever_the_reason_and_redaction() {
        let values: BTreeMap<String, String> = [("MINE".to_string(), "s3cr3t-value".to_string())].into();
        assert!(resolve(&["MINE".into()], "team-a", &values).is_ok());
        // TERM is in most environments, NOPE in none: the same words for both.
        let a = resolve(&["TERM".into()], "team-a", &values).unwrap_err().body.error_desc.replace("TERM", "X");
        let b = resolve(&["NOPE".into()], "team-a", &values).unwrap_err().body.error_desc.replace("NOPE", "X");
        assert_eq!(a, b);
        assert!(!a.contains("has no value"));
        assert_eq!(redact("token=s3cr3t-value!".into(), &values), "token=***!");
    }

    #[test]
    fn a_secret_too_short_to_hide_is_refused_and_not_taken_from_the_environment() {
        for short in ["x", "1234567", "  abc  "] {
            let e = check("TOKEN", short).unwrap_err();
            assert_eq!(e.body.field.as_deref(), Some("value"), "{short:?}");
            assert!(e.body.error_desc.contains(&format!("{MIN_SECRET_BYTES} bytes")), "{}", e.body.error_desc);
        }
        assert!(check("TOKEN", "12345678").is_ok());
        let dir = tempfile::tempdir().unwrap();
        let records = tao_slurm_engine::client::ServiceRecords::open(&dir.path().join("s.db")).unwrap();
        let rules = OrgRules {
            secret_env: [("SHORT".to_string(), "V_SHORT".to_string()), ("LONG".to_string(), "V_LONG".to_string())]
                .into(),
            ..Default::default()
        };
        let env = |n: &str| match n {
            "V_SHORT" => Some("e".to_string()),
            "V_LONG" => Some("long-enough-value".to_string()),
            _ => None,
        };
        let values = org_values(&records.secrets(), None, "team-a", &rules, &env).unwrap();
        assert_eq!(values.keys().collect::<Vec<_>>(), vec!["LONG"], "a one-byte value is no secret of the org");
    }
}
