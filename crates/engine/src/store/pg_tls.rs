//! How a store reaches PostgreSQL: in plain text, or, when its URL says `sslmode=require`, over TLS
//! (rustls) with the server's certificate checked against `TAO_SLURM_DATABASE_CA_FILE` or the
//! system's roots, and its name against the URL's host. A certificate that does not check out is an
//! error, never a connection (libpq's `require` would take it; `verify-full` is what this does).

/// Why TLS to the server could not be set up (the CA file, or rustls' configuration).
#[derive(Debug)]
pub struct TlsError(pub String);
use postgres::config::SslMode;
use std::path::Path;

/// The way to the server that a URL's `sslmode` asks for.
#[derive(Clone)]
pub enum Way {
    Plain,
    Tls(tokio_postgres_rustls::MakeRustlsConnect),
}

impl Way {
    /// `require`: TLS, checked; `disable` and the default (`prefer`): plain, as before TLS was
    /// supported (rust-postgres's `prefer` would fall back to plain text on a server without TLS,
    /// which buys nothing against a hostile network).
    pub fn for_config(config: &postgres::Config, ca_file: Option<&Path>) -> Result<Way, TlsError> {
        match config.get_ssl_mode() {
            SslMode::Require => Ok(Way::Tls(tokio_postgres_rustls::MakeRustlsConnect::new(client_config(ca_file)?))),
            _ => Ok(Way::Plain),
        }
    }

    pub fn connect(&self, config: &postgres::Config) -> Result<postgres::Client, postgres::Error> {
        match self {
            Way::Plain => config.connect(postgres::NoTls),
            Way::Tls(tls) => config.connect(tls.clone()),
        }
    }
}

/// rustls' settings: the CA file's certificates, or the system's roots.
fn client_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, TlsError> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            // It decides which server is trusted with the jobs' state: trusted as the files that decide
            // what runs (ours or root's, not writable by group or others).
            crate::private::check_trusted_file(path, crate::private::Trust::OursOrRoots)
                .map_err(|e| TlsError(format!("TAO_SLURM_DATABASE_CA_FILE: {e}")))?;
            let bad = |what: String| TlsError(format!("TAO_SLURM_DATABASE_CA_FILE {}{what}", path.display()));
            let certs = rustls_pki_types::CertificateDer::pem_file_iter(path).map_err(|e| bad(format!(": {e}")))?;
            for cert in certs {
                let cert = cert.map_err(|e| bad(format!(": {e}")))?;
                roots.add(cert).map_err(|e| bad(format!(": a certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(bad(" holds no PEM certificate".into()));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(TlsError(
                    "sslmode=require, and the system has no CA certificates: set TAO_SLURM_DATABASE_CA_FILE to the database's CA"
                        .into(),
                ));
            }
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_ca_file_others_can_write_is_refused_by_its_setting() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not a certificate").unwrap();
        for (mode, trusted) in [(0o644, true), (0o600, true), (0o664, false), (0o666, false)] {
            std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(mode)).unwrap();
            let Err(e) = client_config(Some(&ca)) else { panic!("{mode:o}: no PEM certificate either way") };
            let e = e.0;
            assert!(e.contains("TAO_SLURM_DATABASE_CA_FILE"), "{e}");
            // A trusted file is read (and found to hold no certificate); another is never read.
            assert_eq!(e.contains("group or others can write it"), !trusted, "{mode:o}: {e}");
            assert_eq!(e.contains("no PEM certificate"), trusted, "{mode:o}: {e}");
        }
    }
}
