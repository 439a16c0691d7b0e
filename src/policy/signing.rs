//! The one signer of the gateway's capabilities (download links, tickets): HMAC-SHA256 under a
//! key every gateway of a deployment derives alike, over a label that says what is signed and
//! then each field, NUL-delimited. The label keeps a signature for one kind of capability from
//! ever verifying as another's; no field can hold a NUL (each kind checks its fields first).

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::error::PolicyError;

/// The shortest key that signs (a SHA-256 digest is 32 bytes).
pub(super) const MIN_KEY_BYTES: usize = 16;
/// How long a signature is, in bytes and in unpadded base64url.
pub(super) const SIGNATURE_BYTES: usize = 32;
pub(super) const SIGNATURE_CHARS: usize = 43;

/// The MAC of `fields` under `key` and `label`, ready to finalize or to verify (in constant
/// time: `verify_slice`). A key too short to sign is refused under `key_rule`.
pub(super) fn signer(
    key: &[u8],
    key_rule: &'static str,
    label: &[u8],
    fields: &[&[u8]],
) -> Result<Hmac<Sha256>, PolicyError> {
    if key.len() < MIN_KEY_BYTES {
        return Err(PolicyError::without_echo(
            key_rule,
            format!("a signing key must be at least {MIN_KEY_BYTES} bytes"),
        ));
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(key)
        .map_err(|_| PolicyError::without_echo(key_rule, "the signing key cannot be used"))?;
    for part in std::iter::once(label).chain(fields.iter().copied()) {
        mac.update(part);
        mac.update(b"\0");
    }
    Ok(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_separates_what_is_signed() {
        let key = [7u8; MIN_KEY_BYTES];
        let one = signer(&key, "k", b"one", &[b"a"]).unwrap().finalize();
        let two = signer(&key, "k", b"two", &[b"a"]).unwrap().finalize();
        assert_ne!(one.into_bytes(), two.into_bytes());
    }

    #[test]
    fn fields_are_delimited() {
        let key = [7u8; MIN_KEY_BYTES];
        let joined = signer(&key, "k", b"l", &[b"ab", b"c"]).unwrap().finalize();
        let moved = signer(&key, "k", b"l", &[b"a", b"bc"]).unwrap().finalize();
        assert_ne!(joined.into_bytes(), moved.into_bytes());
        assert_eq!(SIGNATURE_BYTES, 32);
    }
}
