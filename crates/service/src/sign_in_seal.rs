//! What the sign-in hands a browser to keep instead of keeping it itself: a value sealed with a key
//! of the service's (XChaCha20-Poly1305, the key in the service database so every replica opens
//! what another sealed), for one purpose, until a time. A flood of sign-in starts then costs the
//! service no memory, and a sign-in started on one replica finishes on another.

use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The sealing key's name in the service database.
pub const KEY_NAME: &str = "sign-in-seal";

/// What a person's refresh token is sealed for: their grant at `issuer` as `subject` in `org` (a
/// sealed token moved to another row does not open there).
pub fn grant_purpose(issuer: &str, subject: &str, org: &str) -> String {
    format!("grant\n{issuer}\n{subject}\n{org}")
}

pub struct Seal {
    cipher: XChaCha20Poly1305,
}

#[derive(Serialize, Deserialize)]
struct Envelope<T> {
    /// Unix seconds after which it is refused.
    until: i64,
    value: T,
}

impl Seal {
    pub fn new(key: &[u8]) -> Result<Seal, String> {
        if key.len() != 32 {
            return Err(format!("the sign-in's key is {} bytes, not 32", key.len()));
        }
        Ok(Seal { cipher: XChaCha20Poly1305::new(Key::from_slice(key)) })
    }

    /// `value` sealed for `purpose` until `until`, as text fit for a cookie or a form field (hex).
    pub fn seal<T: Serialize>(&self, purpose: &str, value: T, until: i64) -> Result<String, String> {
        let plain = serde_json::to_vec(&Envelope { until, value }).map_err(|e| e.to_string())?;
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = self
            .cipher
            .encrypt(&nonce, Payload { msg: &plain, aad: purpose.as_bytes() })
            .map_err(|_| "cannot seal".to_string())?;
        Ok(nonce.iter().chain(sealed.iter()).map(|b| format!("{b:02x}")).collect())
    }

    /// What [`Seal::seal`] sealed for `purpose`, while `now` is before its time; None for anything
    /// else (forged, altered, for another purpose, expired).
    pub fn open<T: DeserializeOwned>(&self, purpose: &str, text: &str, now: i64) -> Option<T> {
        if text.len() > 16 * 1024 || !text.len().is_multiple_of(2) || text.len() < 2 * (24 + 16) {
            return None;
        }
        let bytes: Vec<u8> = (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
            .collect::<Option<_>>()?;
        let (nonce, sealed) = bytes.split_at(24);
        let plain =
            self.cipher.decrypt(XNonce::from_slice(nonce), Payload { msg: sealed, aad: purpose.as_bytes() }).ok()?;
        let env: Envelope<T> = serde_json::from_slice(&plain).ok()?;
        (now < env.until).then_some(env.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_for_its_purpose_its_key_and_its_time() {
        let seal = Seal::new(&[7u8; 32]).unwrap();
        let text = seal.seal("state", ("ada", 3), 100).unwrap();
        assert_eq!(seal.open::<(String, i32)>("state", &text, 99), Some(("ada".to_string(), 3)));
        assert_eq!(seal.open::<(String, i32)>("state", &text, 100), None, "expired");
        assert_eq!(seal.open::<(String, i32)>("confirm", &text, 99), None, "another purpose");
        assert_eq!(Seal::new(&[8u8; 32]).unwrap().open::<(String, i32)>("state", &text, 99), None, "another key");
        let mut altered = text.clone().into_bytes();
        let last = altered.len() - 1;
        altered[last] = if altered[last] == b'0' { b'1' } else { b'0' };
        assert_eq!(seal.open::<(String, i32)>("state", std::str::from_utf8(&altered).unwrap(), 99), None);
        for junk in ["", "zz", "{\"until\":999,\"value\":[\"eve\",1]}", &"a".repeat(100)] {
            assert_eq!(seal.open::<(String, i32)>("state", junk, 99), None, "{junk}");
        }
        assert_ne!(seal.seal("state", 1, 100).unwrap(), seal.seal("state", 1, 100).unwrap(), "a nonce each time");
        assert!(Seal::new(&[0u8; 16]).is_err());
    }
}
