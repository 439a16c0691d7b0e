//! Tickets: short-lived, single-purpose capabilities for what a person opens in a browser (an
//! experiment's page; later a terminal or a preview), minted by an authenticated call so that the
//! bearer token never has to be in a URL. A ticket names its purpose, one workspace, one object
//! in it (a run id, a port), an expiry at most [`MAX_TICKET_SECONDS`] after its minting and a
//! random nonce, signed like download links (`signing`) under a label of its own.
//!
//! Every byte of a presented ticket is the client's: its length and shape are checked before
//! anything is decoded, its signature in constant time, then what it is for and until when.
//!
//! Shape: `<purpose>.<workspace id>.<object>.<expiry, unix seconds>.<nonce>.<signature>`, the
//! nonce and signature in unpadded base64url: URL-safe as it is, without escaping.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::error::PolicyError;
use super::id::{check_id, os_random};
use super::signing::{signer, SIGNATURE_BYTES, SIGNATURE_CHARS};

/// The longest a ticket lives: a page left open outlives its ticket, and asks for a new one.
pub const MAX_TICKET_SECONDS: u64 = 3600;
/// The longest purpose name and object a ticket carries.
pub const MAX_PURPOSE_CHARS: usize = 32;
pub const MAX_OBJECT_CHARS: usize = 64;
const NONCE_BYTES: usize = 16;
const NONCE_CHARS: usize = 22;
const ID_CHARS: usize = 35;
const MAX_EXPIRY_DIGITS: usize = 20;
/// The longest ticket read: every field at its longest, and the five dots.
pub const MAX_TICKET_CHARS: usize = MAX_PURPOSE_CHARS
    + ID_CHARS
    + MAX_OBJECT_CHARS
    + MAX_EXPIRY_DIGITS
    + NONCE_CHARS
    + SIGNATURE_CHARS
    + 5;

const LABEL: &[u8] = b"mwc-ticket";

/// What a valid ticket grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketClaim {
    pub purpose: String,
    pub workspace_id: String,
    pub object: String,
    pub expires: u64,
}

/// A purpose's name: lowercase letters in words joined by `-` (`experiment-page`).
fn is_purpose(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_PURPOSE_CHARS
        && text
            .split('-')
            .all(|word| !word.is_empty() && word.bytes().all(|b| b.is_ascii_lowercase()))
}

/// An object in a workspace: an id or a number, in letters, digits, `_` and `-`.
fn is_object(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_OBJECT_CHARS
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn is_expiry(text: &str) -> bool {
    !text.is_empty() && text.len() <= MAX_EXPIRY_DIGITS && text.bytes().all(|b| b.is_ascii_digit())
}

/// Base64url of exactly `bytes` bytes, `chars` characters long.
fn decoded<const N: usize>(text: &str, chars: usize) -> Option<[u8; N]> {
    if text.len() != chars {
        return None;
    }
    URL_SAFE_NO_PAD.decode(text).ok()?.try_into().ok()
}

fn mac(
    key: &[u8],
    purpose: &str,
    workspace_id: &str,
    object: &str,
    expires: u64,
    nonce: &[u8],
) -> Result<Hmac<Sha256>, PolicyError> {
    signer(
        key,
        "ticket.key",
        LABEL,
        &[
            purpose.as_bytes(),
            workspace_id.as_bytes(),
            object.as_bytes(),
            expires.to_string().as_bytes(),
            nonce,
        ],
    )
}

/// A ticket for `purpose` on `object` in `workspace_id`, valid for `seconds` (1 to
/// [`MAX_TICKET_SECONDS`]) from `now` (unix seconds); with its expiry.
pub fn mint_ticket(
    key: &[u8],
    purpose: &str,
    workspace_id: &str,
    object: &str,
    now: u64,
    seconds: u64,
) -> Result<(String, u64), PolicyError> {
    let nonce: [u8; NONCE_BYTES] = os_random("ticket")?;
    mint_with_nonce(key, purpose, workspace_id, object, now, seconds, nonce)
}

fn mint_with_nonce(
    key: &[u8],
    purpose: &str,
    workspace_id: &str,
    object: &str,
    now: u64,
    seconds: u64,
    nonce: [u8; NONCE_BYTES],
) -> Result<(String, u64), PolicyError> {
    if !is_purpose(purpose) {
        return Err(PolicyError::new(
            "ticket.purpose-name",
            format!(
                "a ticket's purpose is 1-{MAX_PURPOSE_CHARS} lowercase letters in words joined \
                 by '-'"
            ),
            purpose,
        ));
    }
    check_id("ws", workspace_id)?;
    if !is_object(object) {
        return Err(PolicyError::new(
            "ticket.object-name",
            format!("a ticket's object is 1-{MAX_OBJECT_CHARS} ASCII letters, digits, '_' or '-'"),
            object,
        ));
    }
    if seconds == 0 || seconds > MAX_TICKET_SECONDS {
        return Err(PolicyError::without_echo(
            "ticket.lifetime",
            format!("a ticket lives 1 to {MAX_TICKET_SECONDS} seconds"),
        ));
    }
    let expires = now.checked_add(seconds).ok_or_else(|| {
        PolicyError::without_echo("ticket.lifetime", "a ticket's expiry must fit in 64 bits")
    })?;
    let signature = mac(key, purpose, workspace_id, object, expires, &nonce)?
        .finalize()
        .into_bytes();
    let ticket = format!(
        "{purpose}.{workspace_id}.{object}.{expires}.{}.{}",
        URL_SAFE_NO_PAD.encode(nonce),
        URL_SAFE_NO_PAD.encode(signature)
    );
    Ok((ticket, expires))
}

fn malformed() -> PolicyError {
    PolicyError::without_echo(
        "ticket.malformed",
        "this is not a ticket (ask for a new link to the page)",
    )
}

fn refused(rule: &'static str, what: &str) -> PolicyError {
    PolicyError::without_echo(rule, format!("{what}; ask for a new link to the page"))
}

/// What `ticket` grants, when `key` signed it for `purpose` (and, where given, for
/// `workspace_id` and `object`) and it is live at `now`.
pub fn verify_ticket(
    key: &[u8],
    ticket: &str,
    purpose: &str,
    workspace_id: Option<&str>,
    object: Option<&str>,
    now: u64,
) -> Result<TicketClaim, PolicyError> {
    // Bounded before it is split: a ticket longer than the longest mintable is work to spare.
    if ticket.len() > MAX_TICKET_CHARS || !ticket.is_ascii() {
        return Err(malformed());
    }
    let fields: Vec<&str> = ticket.splitn(7, '.').collect();
    let [named, ws, obj, expires, nonce, signature] = fields.as_slice() else {
        return Err(malformed());
    };
    if !is_purpose(named) || check_id("ws", ws).is_err() || !is_object(obj) || !is_expiry(expires) {
        return Err(malformed());
    }
    // One to twenty digits: a sign or a leading run of zeros is not another spelling of it.
    let expires: u64 = expires.parse().map_err(|_| malformed())?;
    if expires.to_string() != fields[3] {
        return Err(malformed());
    }
    let nonce: [u8; NONCE_BYTES] = decoded(nonce, NONCE_CHARS).ok_or_else(malformed)?;
    let signature: [u8; SIGNATURE_BYTES] =
        decoded(signature, SIGNATURE_CHARS).ok_or_else(malformed)?;
    // `verify_slice` compares in constant time.
    mac(key, named, ws, obj, expires, &nonce)?
        .verify_slice(&signature)
        .map_err(|_| {
            refused(
                "ticket.signature",
                "the ticket's signature does not match: it was altered, or minted by another \
                 deployment",
            )
        })?;
    if *named != purpose {
        return Err(refused(
            "ticket.purpose",
            "the ticket is for something else",
        ));
    }
    if workspace_id.is_some_and(|expected| expected != *ws) {
        return Err(refused(
            "ticket.workspace",
            "the ticket is for another workspace",
        ));
    }
    if object.is_some_and(|expected| expected != *obj) {
        return Err(refused("ticket.object", "the ticket is for another object"));
    }
    if now >= expires {
        return Err(refused("ticket.expired", "the ticket has expired"));
    }
    // Only a key holder could make one that lives longer; it is refused all the same.
    if expires - now > MAX_TICKET_SECONDS {
        return Err(refused(
            "ticket.lifetime",
            "the ticket lives longer than a ticket may",
        ));
    }
    Ok(TicketClaim {
        purpose: (*named).to_owned(),
        workspace_id: (*ws).to_owned(),
        object: (*obj).to_owned(),
        expires,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
    const WS: &str = "ws-0123456789abcdef0123456789abcdef";
    const OTHER_WS: &str = "ws-ffffffffffffffffffffffffffffffff";
    const RUN: &str = "xp-0123456789abcdef0123456789abcdef";
    const PAGE: &str = "experiment-page";

    fn ticket(now: u64, seconds: u64) -> String {
        mint_ticket(KEY, PAGE, WS, RUN, now, seconds).unwrap().0
    }

    fn rule(ticket: &str, now: u64) -> &'static str {
        verify_ticket(KEY, ticket, PAGE, None, None, now)
            .unwrap_err()
            .rule
    }

    #[test]
    fn a_ticket_grants_its_purpose_workspace_and_object_until_it_expires() {
        let (minted, expires) = mint_ticket(KEY, PAGE, WS, RUN, 1000, 600).unwrap();
        assert_eq!(expires, 1600);
        let claim = verify_ticket(KEY, &minted, PAGE, Some(WS), Some(RUN), 1599).unwrap();
        assert_eq!(
            claim,
            TicketClaim {
                purpose: PAGE.into(),
                workspace_id: WS.into(),
                object: RUN.into(),
                expires: 1600
            }
        );
        assert_eq!(rule(&minted, 1600), "ticket.expired");
        assert!(minted.len() <= MAX_TICKET_CHARS);
        assert!(minted
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)));
    }

    #[test]
    fn two_tickets_for_the_same_thing_differ() {
        assert_ne!(ticket(1000, 600), ticket(1000, 600));
    }

    #[test]
    fn another_purpose_workspace_or_object_is_refused() {
        let minted = ticket(1000, 600);
        let verify = |purpose, ws, obj| {
            verify_ticket(KEY, &minted, purpose, ws, obj, 1000)
                .unwrap_err()
                .rule
        };
        assert_eq!(verify("terminal-write", None, None), "ticket.purpose");
        assert_eq!(verify(PAGE, Some(OTHER_WS), None), "ticket.workspace");
        assert_eq!(verify(PAGE, Some(WS), Some("xp-other")), "ticket.object");
    }

    #[test]
    fn any_field_changed_breaks_the_signature() {
        let minted = ticket(1000, 600);
        let fields: Vec<&str> = minted.split('.').collect();
        let other_nonce = URL_SAFE_NO_PAD.encode([0u8; NONCE_BYTES]);
        let swaps: [(usize, &str); 5] = [
            (0, "terminal-write"),
            (1, OTHER_WS),
            (2, "xp-ffffffffffffffffffffffffffffffff"),
            (3, "1500"),
            (4, &other_nonce),
        ];
        for (at, value) in swaps {
            let mut forged = fields.clone();
            forged[at] = value;
            assert_eq!(rule(&forged.join("."), 1000), "ticket.signature", "{at}");
        }
        let other_key = b"ffffffffffffffffffffffffffffffff";
        let err = verify_ticket(other_key, &minted, PAGE, None, None, 1000).unwrap_err();
        assert_eq!(err.rule, "ticket.signature");
    }

    #[test]
    fn a_lifetime_is_one_second_to_an_hour() {
        for seconds in [0, MAX_TICKET_SECONDS + 1] {
            let err = mint_ticket(KEY, PAGE, WS, RUN, 1000, seconds).unwrap_err();
            assert_eq!(err.rule, "ticket.lifetime");
        }
        let err = mint_ticket(KEY, PAGE, WS, RUN, u64::MAX, 1).unwrap_err();
        assert_eq!(err.rule, "ticket.lifetime");
        assert!(mint_ticket(KEY, PAGE, WS, RUN, 1000, MAX_TICKET_SECONDS).is_ok());
    }

    #[test]
    fn a_ticket_that_lives_longer_than_the_bound_is_refused() {
        // Made with the key (only a key holder could), as a gateway without the bound would.
        let expires = 1000 + MAX_TICKET_SECONDS + 1;
        let nonce = [1u8; NONCE_BYTES];
        let signature = mac(KEY, PAGE, WS, RUN, expires, &nonce)
            .unwrap()
            .finalize()
            .into_bytes();
        let long = format!(
            "{PAGE}.{WS}.{RUN}.{expires}.{}.{}",
            URL_SAFE_NO_PAD.encode(nonce),
            URL_SAFE_NO_PAD.encode(signature)
        );
        assert_eq!(rule(&long, 1000), "ticket.lifetime");
        assert!(verify_ticket(KEY, &long, PAGE, None, None, 1001).is_ok());
    }

    #[test]
    fn malformed_tickets_are_refused_without_echo() {
        let minted = ticket(1000, 600);
        let fields: Vec<&str> = minted.split('.').collect();
        let with = |at: usize, value: &str| {
            let mut forged = fields.clone();
            forged[at] = value;
            forged.join(".")
        };
        for bad in [
            String::new(),
            "a.b.c.d.e.f".into(),
            format!("{minted}.x"),
            minted[..minted.len() - 1].into(),
            format!("{minted}A"),
            "x".repeat(10_000),
            minted.replace('-', "é"),
            with(0, "Experiment-page"),
            with(0, "-page"),
            with(0, "page-"),
            with(1, "ws-<script>"),
            with(2, "xp/../x"),
            with(2, ""),
            with(3, "+1600"),
            with(3, "01600"),
            with(3, "1".repeat(21).as_str()),
            with(4, "AAAA"),
            with(5, "AAAA"),
        ] {
            let err = verify_ticket(KEY, &bad, PAGE, None, None, 1000).unwrap_err();
            assert_eq!(err.rule, "ticket.malformed", "{bad:?}");
            assert!(!err.message.contains("script"));
        }
    }

    #[test]
    fn mint_refuses_fields_that_would_not_read_back() {
        for (purpose, ws, obj, expected) in [
            ("Page", WS, RUN, "ticket.purpose-name"),
            ("a.b", WS, RUN, "ticket.purpose-name"),
            (PAGE, "ws-x", RUN, "id.format"),
            (PAGE, WS, "a.b", "ticket.object-name"),
            (PAGE, WS, "", "ticket.object-name"),
        ] {
            let err = mint_ticket(KEY, purpose, ws, obj, 1000, 600).unwrap_err();
            assert_eq!(err.rule, expected, "{purpose} {ws} {obj}");
        }
        assert_eq!(
            mint_ticket(b"short", PAGE, WS, RUN, 1, 1).unwrap_err().rule,
            "ticket.key"
        );
    }

    #[test]
    fn the_longest_ticket_is_within_the_bound() {
        let purpose = format!("{}-b", "a".repeat(MAX_PURPOSE_CHARS - 2));
        let object = "o".repeat(MAX_OBJECT_CHARS);
        let nonce = [0xffu8; NONCE_BYTES];
        let (longest, _) =
            mint_with_nonce(KEY, &purpose, WS, &object, u64::MAX - 1, 1, nonce).unwrap();
        assert!(longest.len() <= MAX_TICKET_CHARS, "{}", longest.len());
        assert_eq!(
            verify_ticket(KEY, &longest, &purpose, None, None, u64::MAX - 1)
                .unwrap()
                .object,
            object
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::policy::tests::test_cases()))]
        #[test]
        fn no_input_but_a_minted_ticket_verifies(text in "[ -~]{0,300}") {
            prop_assert!(verify_ticket(KEY, &text, PAGE, None, None, 0).is_err());
        }

        #[test]
        fn any_one_byte_changed_is_refused(at in 0usize..150, byte in 0x21u8..0x7f) {
            let minted = ticket(1000, 600);
            let at = at % minted.len();
            prop_assume!(minted.as_bytes()[at] != byte);
            let mut forged = minted.into_bytes();
            forged[at] = byte;
            let forged = String::from_utf8(forged).unwrap();
            prop_assert!(verify_ticket(KEY, &forged, PAGE, None, None, 1000).is_err());
        }
    }
}
