//! Download links: a token that names one workspace, one path and an expiry, signed with
//! HMAC-SHA256 under a key every gateway of a deployment derives alike (`signing`). The token
//! is the capability (a link needs no bearer token), so it is checked exactly: its shape, the
//! signature in constant time, then the expiry. Tampering with any part breaks the signature.
//!
//! Shape: `<workspace id>.<expiry, unix seconds>.<path, base64url>.<signature, base64url>`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::error::PolicyError;
use super::id::check_id;
use super::path::MAX_PATH_BYTES;
use super::signing::signer;

/// The longest token taken: a path of [`MAX_PATH_BYTES`] in base64 and the rest.
pub const MAX_LINK_TOKEN_CHARS: usize = MAX_PATH_BYTES * 4 / 3 + 160;

/// What a valid token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkClaim {
    pub workspace_id: String,
    pub path: String,
    pub expires: u64,
}

fn mac(
    key: &[u8],
    workspace_id: &str,
    path: &str,
    expires: u64,
) -> Result<Hmac<Sha256>, PolicyError> {
    signer(
        key,
        "link.key",
        b"mwc-artifact-link",
        &[
            workspace_id.as_bytes(),
            path.as_bytes(),
            expires.to_string().as_bytes(),
        ],
    )
}

fn check_path(path: &str) -> Result<(), PolicyError> {
    if path.is_empty() || path.len() > MAX_PATH_BYTES || path.contains('\0') {
        return Err(PolicyError::without_echo(
            "link.path",
            "a link's path must be a non-empty path without NUL",
        ));
    }
    Ok(())
}

/// A token for `path` (as the gateway canonicalised it) in `workspace_id`, valid until
/// `expires` (unix seconds).
pub fn mint_link(
    key: &[u8],
    workspace_id: &str,
    path: &str,
    expires: u64,
) -> Result<String, PolicyError> {
    check_id("ws", workspace_id)?;
    check_path(path)?;
    let signature = mac(key, workspace_id, path, expires)?
        .finalize()
        .into_bytes();
    Ok(format!(
        "{workspace_id}.{expires}.{}.{}",
        URL_SAFE_NO_PAD.encode(path),
        URL_SAFE_NO_PAD.encode(signature)
    ))
}

fn malformed() -> PolicyError {
    PolicyError::without_echo(
        "link.malformed",
        "this is not a download link's token (ask artifact_download for a new link)",
    )
}

/// What `token` names, when its signature is `key`'s and it has not expired at `now`.
pub fn verify_link(key: &[u8], token: &str, now: u64) -> Result<LinkClaim, PolicyError> {
    if token.len() > MAX_LINK_TOKEN_CHARS || !token.is_ascii() {
        return Err(malformed());
    }
    let mut parts = token.split('.');
    let (Some(workspace_id), Some(expires), Some(path), Some(signature), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(malformed());
    };
    check_id("ws", workspace_id).map_err(|_| malformed())?;
    if expires.is_empty() || expires.len() > 20 || !expires.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed());
    }
    let expires: u64 = expires.parse().map_err(|_| malformed())?;
    let path = URL_SAFE_NO_PAD
        .decode(path)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(malformed)?;
    check_path(&path).map_err(|_| malformed())?;
    let signature = URL_SAFE_NO_PAD.decode(signature).map_err(|_| malformed())?;
    // `verify_slice` compares in constant time.
    mac(key, workspace_id, &path, expires)?
        .verify_slice(&signature)
        .map_err(|_| {
            PolicyError::without_echo(
                "link.signature",
                "the download link's signature does not match: it was altered, or minted by \
                 another deployment",
            )
        })?;
    if now >= expires {
        return Err(PolicyError::without_echo(
            "link.expired",
            "the download link has expired; ask artifact_download for a new one",
        ));
    }
    Ok(LinkClaim {
        workspace_id: workspace_id.to_owned(),
        path,
        expires,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::signing::MIN_KEY_BYTES;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
    const WS: &str = "ws-0123456789abcdef0123456789abcdef";
    const OTHER: &str = "ws-ffffffffffffffffffffffffffffffff";

    #[test]
    fn a_minted_link_verifies_until_it_expires() {
        let token = mint_link(KEY, WS, "/workspace/out", 1000).unwrap();
        let claim = verify_link(KEY, &token, 999).unwrap();
        assert_eq!(claim.workspace_id, WS);
        assert_eq!(claim.path, "/workspace/out");
        assert_eq!(
            verify_link(KEY, &token, 1000).unwrap_err().rule,
            "link.expired"
        );
    }

    #[test]
    fn another_workspace_path_or_expiry_breaks_the_signature() {
        let token = mint_link(KEY, WS, "/workspace/out", 1000).unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        let other_path = URL_SAFE_NO_PAD.encode("/workspace/secret");
        for forged in [
            format!("{OTHER}.{}.{}.{}", parts[1], parts[2], parts[3]),
            format!("{}.{}.{other_path}.{}", parts[0], parts[1], parts[3]),
            format!("{}.99999.{}.{}", parts[0], parts[2], parts[3]),
        ] {
            assert_eq!(
                verify_link(KEY, &forged, 0).unwrap_err().rule,
                "link.signature"
            );
        }
        let mut flipped = token.clone().into_bytes();
        let last = flipped.len() - 2;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert!(verify_link(KEY, &flipped, 0).is_err());
    }

    #[test]
    fn another_key_refuses_the_link() {
        let token = mint_link(KEY, WS, "/workspace/out", 1000).unwrap();
        let other = b"ffffffffffffffffffffffffffffffff";
        assert_eq!(
            verify_link(other, &token, 0).unwrap_err().rule,
            "link.signature"
        );
    }

    #[test]
    fn malformed_tokens_are_refused_without_echo() {
        for token in [
            "",
            "a.b.c.d",
            "ws-x.1.cGF0aA.c2ln",
            &"x".repeat(10_000),
            "é",
        ] {
            let err = verify_link(KEY, token, 0).unwrap_err();
            assert_eq!(err.rule, "link.malformed", "{token:?}");
            assert!(!err.message.contains("ws-x"));
        }
        let token = mint_link(KEY, WS, "/workspace/out", 1000).unwrap();
        assert_eq!(
            verify_link(KEY, &format!("{token}.x"), 0).unwrap_err().rule,
            "link.malformed"
        );
    }

    #[test]
    fn the_longest_link_verifies_and_a_longer_token_is_refused_before_decoding() {
        let path = format!("/{}", "a".repeat(MAX_PATH_BYTES - 1));
        let longest = mint_link(KEY, WS, &path, u64::MAX).unwrap();
        assert!(longest.len() <= MAX_LINK_TOKEN_CHARS);
        assert_eq!(verify_link(KEY, &longest, 0).unwrap().path, path);
        // Well formed but for its length: a signature padded with base64 would otherwise be
        // decoded and refused as a wrong signature, after the work the bound exists to spare.
        let padded = format!("{longest}{}", "A".repeat(100));
        assert_eq!(
            verify_link(KEY, &padded, 0).unwrap_err().rule,
            "link.malformed"
        );
    }

    #[test]
    fn a_token_exactly_as_long_as_the_bound_is_judged_by_its_signature() {
        // Well formed and wrongly signed: the length check must let it through to the MAC. The
        // expiry's width is picked so that the signature has a length base64 can decode.
        let token = [1000u64, 10_000]
            .into_iter()
            .map(|expires| format!("{WS}.{expires}.{}.", URL_SAFE_NO_PAD.encode("/a")))
            .find(|head| (MAX_LINK_TOKEN_CHARS - head.len()) % 4 != 1)
            .map(|head| format!("{head}{}", "A".repeat(MAX_LINK_TOKEN_CHARS - head.len())))
            .unwrap();
        assert_eq!(token.len(), MAX_LINK_TOKEN_CHARS);
        assert_eq!(
            verify_link(KEY, &token, 0).unwrap_err().rule,
            "link.signature"
        );
    }

    #[test]
    fn an_expiry_is_one_to_twenty_digits_and_nothing_else() {
        let token = mint_link(KEY, WS, "/workspace/out", 1000).unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        // Rust parses each as 1000, which the signature covers: only the shape check stops them.
        for expires in ["+1000", &format!("{:0>21}", 1000)] {
            let forged = format!("{}.{expires}.{}.{}", parts[0], parts[2], parts[3]);
            assert_eq!(
                verify_link(KEY, &forged, 0).unwrap_err().rule,
                "link.malformed",
                "{expires}"
            );
        }
    }

    #[test]
    fn a_link_names_a_non_empty_bounded_path_without_nul() {
        let too_long = format!("/{}", "a".repeat(MAX_PATH_BYTES));
        for path in ["", "/a\0b", too_long.as_str()] {
            let err = mint_link(KEY, WS, path, 1000).unwrap_err();
            assert_eq!(err.rule, "link.path", "{path:?}");
        }
    }

    #[test]
    fn a_key_of_the_minimum_length_signs_and_one_byte_less_does_not() {
        let key = [7u8; MIN_KEY_BYTES];
        let token = mint_link(&key, WS, "/w", 1000).unwrap();
        assert_eq!(verify_link(&key, &token, 0).unwrap().expires, 1000);
        let err = mint_link(&key[1..], WS, "/w", 1000).unwrap_err();
        assert_eq!(err.rule, "link.key");
        assert!(err.message.contains("at least 16 bytes"), "{}", err.message);
    }

    #[test]
    fn a_short_key_is_refused() {
        assert_eq!(
            mint_link(b"short", WS, "/w", 1).unwrap_err().rule,
            "link.key"
        );
    }
}
