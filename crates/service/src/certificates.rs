//! The service's SSH certificate authority: for a person's Unix user, a key of the service's own and a
//! user certificate for that one principal, valid for minutes, signed with a CA key only the service
//! holds. The login host trusts the CA (`TrustedUserCAKeys`) and the principal
//! (`AuthorizedPrincipalsFile`): nobody copies a key into anyone's `authorized_keys`.
//!
//! ssh picks the certificate up by its name, `<key>-cert.pub` beside the key it is given (`-i`).

use ssh_key::certificate::{Builder, CertType, Certificate};
use ssh_key::rand_core::OsRng;
use ssh_key::{Algorithm, LineEnding, PrivateKey};
use std::path::{Path, PathBuf};

/// How long a certificate is valid unless the operator says (`serve --ssh-cert-lifetime`).
pub const DEFAULT_CERTIFICATE_SECS: u64 = 600;

/// Seconds a certificate is dated back, for clocks of the service and the login host that differ.
const CLOCK_SKEW_SECS: u64 = 60;

/// The CA: its private key, read once at start.
pub struct Authority {
    key: PrivateKey,
    /// One issue at a time: two first requests of a person must not each make a key, one's
    /// certificate then signed for the other's key.
    issuing: std::sync::Mutex<()>,
}

/// A person's key and certificate on disk, and when the certificate stops being valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub key: PathBuf,
    pub certificate: PathBuf,
    /// Unix seconds.
    pub valid_before: u64,
}

/// Users of the system and its daemons (Debian's base users, Slurm's, munge's, the databases'): no
/// person is ever one of them, whatever a provider's claim or a mapping says.
const SYSTEM_USERS: &[&str] = &[
    "root",
    "daemon",
    "bin",
    "sys",
    "sync",
    "games",
    "man",
    "lp",
    "mail",
    "news",
    "uucp",
    "proxy",
    "www-data",
    "backup",
    "list",
    "irc",
    "gnats",
    "nobody",
    "nogroup",
    "_apt",
    "messagebus",
    "sshd",
    "syslog",
    "slurm",
    "slurmdbd",
    "munge",
    "postgres",
    "mysql",
    "ntp",
    "polkitd",
    "tss",
    "uuidd",
    "dnsmasq",
    "avahi",
    "statd",
    "nscd",
    "nslcd",
    "sssd",
    "_chrony",
    "chrony",
    "nvidia-persistenced",
    "enroot",
    "admin",
    "operator",
    "toor",
];

/// Whether `user` can be a Unix user name a certificate is made for: a lower-case letter or `_`,
/// then lower-case letters, digits, `_`, `-` or `.`, at most 32 (what `useradd` takes by default),
/// and none of the system's own users ([`SYSTEM_USERS`], `systemd-*`).
pub fn check_unix_user(user: &str) -> Result<(), String> {
    let ok = (1..=32).contains(&user.len())
        && user.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && user.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.".contains(c));
    if !ok {
        return Err(format!(
            "{user:?} is not a Unix user name (a lower-case letter or _, then lower-case letters, digits, _ - ., at most 32)"
        ));
    }
    if SYSTEM_USERS.contains(&user) || user.starts_with("systemd-") {
        return Err(format!(
            "{user:?} is a user of the system, not a person's: the service signs no certificate for it (the operator maps the person to their own user)"
        ));
    }
    Ok(())
}

fn write_private(path: &Path, text: &[u8]) -> Result<(), String> {
    tao_slurm_engine::private::write_private_file(path, text)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

impl Authority {
    /// The CA's private key from `path` (`TAO_SLURM_SSH_CA_KEY`): refused unless it is ours and no one
    /// else can read it, and an unencrypted OpenSSH key.
    pub fn load(path: &Path) -> Result<Authority, String> {
        tao_slurm_engine::private::check_trusted_file(path, tao_slurm_engine::private::Trust::Private)?;
        let key = PrivateKey::read_openssh_file(path)
            .map_err(|e| format!("{} is not an OpenSSH private key: {e}", path.display()))?;
        if key.is_encrypted() {
            return Err(format!(
                "{} is encrypted: the service signs without a person at hand; give it a key without a passphrase (kept mode 600)",
                path.display()
            ));
        }
        Ok(Authority { key, issuing: Default::default() })
    }

    /// The CA's public key, one `authorized_keys` line: what the login hosts' `TrustedUserCAKeys` holds.
    pub fn public_key(&self) -> Result<String, String> {
        self.key.public_key().to_openssh().map_err(|e| e.to_string())
    }

    /// `user`'s key in `dir` (made once, mode 600) and a new certificate for it, for the principal
    /// `user` only, valid from `now` for `validity_secs`; its key id names `person` (sshd logs it).
    pub fn issue(&self, dir: &Path, user: &str, person: &str, now: u64, validity_secs: u64) -> Result<Issued, String> {
        check_unix_user(user)?;
        let _one = self.issuing.lock().unwrap_or_else(|e| e.into_inner());
        tao_slurm_engine::private::ensure_private_dir(dir)?;
        let key_path = dir.join(format!("{user}_ed25519"));
        let key = match PrivateKey::read_openssh_file(&key_path) {
            Ok(k) => k,
            Err(_) => {
                let k = PrivateKey::random(&mut OsRng, Algorithm::Ed25519).map_err(|e| e.to_string())?;
                let text = k.to_openssh(LineEnding::LF).map_err(|e| e.to_string())?;
                write_private(&key_path, text.as_bytes())?;
                k
            }
        };
        tao_slurm_engine::private::check_trusted_file(&key_path, tao_slurm_engine::private::Trust::Private)?;
        let valid_before = now + validity_secs;
        let certificate = self.sign(&key, user, person, now.saturating_sub(CLOCK_SKEW_SECS), valid_before)?;
        let mut cert_path = key_path.as_os_str().to_owned();
        cert_path.push("-cert.pub");
        let cert_path = PathBuf::from(cert_path);
        let line = certificate.to_openssh().map_err(|e| e.to_string())?;
        write_private(&cert_path, format!("{line}\n").as_bytes())?;
        Ok(Issued { key: key_path, certificate: cert_path, valid_before })
    }

    fn sign(
        &self,
        key: &PrivateKey,
        user: &str,
        person: &str,
        valid_after: u64,
        valid_before: u64,
    ) -> Result<Certificate, String> {
        let mut b = Builder::new_with_random_nonce(&mut OsRng, key.public_key(), valid_after, valid_before)
            .map_err(|e| e.to_string())?;
        let mut serial = [0u8; 8];
        getrandom::fill(&mut serial).map_err(|e| e.to_string())?;
        b.serial(u64::from_be_bytes(serial))
            .and_then(|b| b.key_id(format!("tao-slurm person={person} user={user}")))
            .and_then(|b| b.cert_type(CertType::User))
            .and_then(|b| b.valid_principal(user))
            // TensorBoard's tunnel; no pty, no agent or X11 forwarding, no user rc.
            .and_then(|b| b.extension("permit-port-forwarding", ""))
            .and_then(|b| b.comment(format!("tao-slurm {user}")))
            .map_err(|e| e.to_string())?;
        b.sign(&self.key).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca(dir: &Path) -> Authority {
        let k = PrivateKey::random(&mut OsRng, Algorithm::Ed25519).unwrap();
        let p = dir.join("ca");
        write_private(&p, k.to_openssh(LineEnding::LF).unwrap().as_bytes()).unwrap();
        Authority::load(&p).unwrap()
    }

    #[test]
    fn a_certificate_names_one_user_for_the_time_asked_and_is_signed_by_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let ca = ca(dir.path());
        let people = dir.path().join("people");
        let issued = ca.issue(&people, "ada", "ada@example.org", 1_800_000_000, 600).unwrap();
        let text = std::fs::read_to_string(&issued.certificate).unwrap();
        let cert = Certificate::from_openssh(text.trim()).unwrap();
        assert_eq!(cert.valid_principals(), ["ada"]);
        assert_eq!(cert.cert_type(), CertType::User);
        assert_eq!((cert.valid_after(), cert.valid_before()), (1_800_000_000 - CLOCK_SKEW_SECS, 1_800_000_600));
        assert_eq!(cert.key_id(), "tao-slurm person=ada@example.org user=ada");
        assert_eq!(cert.extensions().keys().collect::<Vec<_>>(), ["permit-port-forwarding"]);
        assert!(cert.critical_options().is_empty());
        let fingerprint = ca.key.public_key().fingerprint(Default::default());
        cert.validate_at(1_800_000_300, [&fingerprint]).unwrap();
        assert!(cert.validate_at(1_800_000_601, [&fingerprint]).is_err(), "expired");
        // The key is kept (mode 600) and reused; each certificate is new.
        use std::os::unix::fs::PermissionsExt;
        for p in [&issued.key, &issued.certificate] {
            assert_eq!(std::fs::metadata(p).unwrap().permissions().mode() & 0o777, 0o600, "{}", p.display());
        }
        let again = ca.issue(&people, "ada", "ada@example.org", 1_800_000_100, 600).unwrap();
        assert_eq!(again.key, issued.key);
        let cert2 = Certificate::from_openssh(std::fs::read_to_string(&again.certificate).unwrap().trim()).unwrap();
        assert_eq!(cert2.public_key(), cert.public_key());
        assert_ne!(cert2.serial(), cert.serial());
    }

    #[test]
    fn a_loose_or_foreign_ca_key_and_a_name_that_is_no_user_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _ = ca(dir.path());
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path().join("ca"), std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = Authority::load(&dir.path().join("ca")).err().unwrap();
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::write(dir.path().join("junk"), "not a key").unwrap();
        std::fs::set_permissions(dir.path().join("junk"), std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Authority::load(&dir.path().join("junk")).err().unwrap().contains("not an OpenSSH private key"));
        for bad in ["", "Ada", "-x", "a b", "root;id", "../etc", "a/b", &"a".repeat(33)] {
            assert!(check_unix_user(bad).is_err(), "{bad:?}");
        }
        for good in ["ada", "_svc", "bo-2", "first.last", "rooted", "slurmuser"] {
            check_unix_user(good).unwrap();
        }
        // The system's own users: no certificate, and no file made for them.
        let fresh = tempfile::tempdir().unwrap();
        let ca = ca(fresh.path());
        for system in ["root", "slurm", "daemon", "munge", "nobody", "systemd-network"] {
            let e = check_unix_user(system).unwrap_err();
            assert!(e.contains("user of the system"), "{system}: {e}");
        }
        let people = fresh.path().join("people");
        assert!(ca.issue(&people, "root", "eve", 1_800_000_000, 600).is_err());
        assert!(!people.join("root_ed25519").exists() && !people.join("root_ed25519-cert.pub").exists());
    }
}
