//! What a client gives for a commit (its message, the author's name and email) and for a pull
//! request (its title and body). A commit's parts reach git as one argv element or environment
//! value each, so the rules keep out what git would misread (NUL, which no argv can carry; `<`
//! `>` and newlines, which would forge an ident line of the commit object); a pull request's
//! reach GitHub's API. All are bounded.

use super::error::PolicyError;

/// Longest commit message accepted, in bytes.
pub const MAX_COMMIT_MESSAGE_BYTES: usize = 64 * 1024;
/// Longest author name, in characters.
pub const MAX_AUTHOR_NAME_CHARS: usize = 256;
/// Longest author email, in characters (RFC 5321's path limit).
pub const MAX_AUTHOR_EMAIL_CHARS: usize = 254;

/// Longest pull request title, in characters.
pub const MAX_PULL_REQUEST_TITLE_CHARS: usize = 256;
/// Longest pull request body, in bytes (GitHub's own limit is 65536 characters).
pub const MAX_PULL_REQUEST_BODY_BYTES: usize = 64 * 1024;

/// The characters git strips from both ends of an ident's name and email ("crud").
fn is_crud(c: char) -> bool {
    c.is_whitespace() || ".,:;<>\"\\'".contains(c)
}

/// A commit message: not blank, at most 64 KiB, no NUL and no control characters other than
/// newline, tab and carriage return. Returned unchanged (git itself trims and cleans it).
pub fn commit_message(text: &str) -> Result<String, PolicyError> {
    let what = "a commit message must be 1 to 65536 bytes of text with at least one visible \
                character, without NUL or control characters other than newline and tab";
    if text.len() > MAX_COMMIT_MESSAGE_BYTES {
        return Err(PolicyError::new("commit.message-too-long", what, text));
    }
    if text.trim().is_empty() {
        return Err(PolicyError::new("commit.message-empty", what, text));
    }
    if text
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r'))
    {
        return Err(PolicyError::new("commit.message-control-char", what, text));
    }
    Ok(text.to_owned())
}

/// An author's name as git records it in `Name <email>`: 1-256 characters, no `<`, `>` or
/// control characters, and something left once git strips the punctuation at its ends.
pub fn author_name(text: &str) -> Result<String, PolicyError> {
    let what = "an author name must be 1-256 characters without '<', '>' or control characters, \
                and not only spaces and punctuation";
    if text.chars().count() > MAX_AUTHOR_NAME_CHARS
        || text.chars().any(|c| c.is_control() || c == '<' || c == '>')
        || text.chars().all(is_crud)
    {
        return Err(PolicyError::new("commit.author-name", what, text));
    }
    Ok(text.to_owned())
}

/// An author's email: `local@domain`, 3-254 characters, no spaces, `<`, `>` or control
/// characters, exactly one `@` with something on each side.
pub fn author_email(text: &str) -> Result<String, PolicyError> {
    let what = "an author email must look like name@example.com: 3-254 characters, one '@', no \
                spaces, '<', '>' or control characters";
    let bad_char = |c: char| c.is_whitespace() || c.is_control() || c == '<' || c == '>';
    let parts: Vec<&str> = text.split('@').collect();
    if text.chars().count() > MAX_AUTHOR_EMAIL_CHARS
        || text.chars().any(bad_char)
        || parts.len() != 2
        || parts.iter().any(|p| p.is_empty() || p.chars().all(is_crud))
    {
        return Err(PolicyError::new("commit.author-email", what, text));
    }
    Ok(text.to_owned())
}

/// A pull request's title: one line of 1-256 characters with something visible, no control
/// characters.
pub fn pull_request_title(text: &str) -> Result<String, PolicyError> {
    let what = "a pull request title must be one line of 1-256 characters, not blank, without \
                control characters";
    if text.chars().count() > MAX_PULL_REQUEST_TITLE_CHARS
        || text.trim().is_empty()
        || text.chars().any(char::is_control)
    {
        return Err(PolicyError::new("pull-request.title", what, text));
    }
    Ok(text.to_owned())
}

/// A pull request's body: at most 64 KiB, no NUL nor control characters other than newline,
/// tab and carriage return (it may be empty).
pub fn pull_request_body(text: &str) -> Result<String, PolicyError> {
    let what = "a pull request body must be at most 65536 bytes, without NUL or control \
                characters other than newline and tab";
    if text.len() > MAX_PULL_REQUEST_BODY_BYTES
        || text
            .chars()
            .any(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r'))
    {
        return Err(PolicyError::new("pull-request.body", what, text));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_keep_their_text_and_refuse_what_git_would_misread() {
        let message = "Fix the parser\n\nIt read\tone byte too far.\r\n";
        assert_eq!(commit_message(message).unwrap(), message);
        for (bad, rule) in [
            ("", "commit.message-empty"),
            ("  \n\t", "commit.message-empty"),
            ("a\0b", "commit.message-control-char"),
            ("bell\u{7}", "commit.message-control-char"),
            ("escape\u{1b}[31m", "commit.message-control-char"),
        ] {
            assert_eq!(commit_message(bad).unwrap_err().rule, rule, "{bad:?}");
        }
        let long = "x".repeat(MAX_COMMIT_MESSAGE_BYTES + 1);
        assert_eq!(
            commit_message(&long).unwrap_err().rule,
            "commit.message-too-long"
        );
        assert!(commit_message(&long[1..]).is_ok());
    }

    #[test]
    fn the_byte_limits_are_the_65536_the_messages_promise() {
        // The error text says 65536 bytes, and GitHub takes 65536 for a body.
        let full = "x".repeat(65_536);
        assert!(commit_message(&full).is_ok());
        assert!(pull_request_body(&full).is_ok());
        let err = commit_message(&format!("{full}x")).unwrap_err();
        assert!(err.message.contains("1 to 65536 bytes"), "{}", err.message);
        assert!(pull_request_body(&format!("{full}x")).is_err());
    }

    #[test]
    fn pull_request_titles_are_one_line_and_bodies_are_text() {
        assert_eq!(
            pull_request_title("Fix the parser").unwrap(),
            "Fix the parser"
        );
        for bad in ["", "  ", "two\nlines", "tab\there", &"t".repeat(257)] {
            assert_eq!(
                pull_request_title(bad).unwrap_err().rule,
                "pull-request.title",
                "{bad:?}"
            );
        }
        assert!(pull_request_body("").is_ok());
        assert!(pull_request_body("## Summary\n\n- one\n\t- two\r\n").is_ok());
        for bad in ["nul\0", "esc\u{1b}[0m"] {
            assert!(pull_request_body(bad).is_err(), "{bad:?}");
        }
        let long = "b".repeat(MAX_PULL_REQUEST_BODY_BYTES + 1);
        assert!(pull_request_body(&long).is_err());
        assert!(pull_request_body(&long[1..]).is_ok());
    }

    #[test]
    fn author_names_cannot_forge_an_ident_line() {
        assert_eq!(author_name("Ada Lovelace").unwrap(), "Ada Lovelace");
        assert_eq!(author_name("Zoë O'Brien").unwrap(), "Zoë O'Brien");
        for bad in [
            "",
            "   ",
            "...",
            "Eve <eve@evil>",
            "a\nb",
            "a\0",
            "x>",
            &"n".repeat(MAX_AUTHOR_NAME_CHARS + 1),
        ] {
            assert_eq!(
                author_name(bad).unwrap_err().rule,
                "commit.author-name",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn names_titles_and_emails_are_bounded_in_characters_as_their_messages_say() {
        // Two-byte characters: the bounds count characters, not bytes.
        let name = "é".repeat(256);
        assert!(author_name(&name).is_ok());
        assert!(pull_request_title(&name).is_ok());
        assert!(author_name(&format!("{name}é")).is_err());
        assert!(pull_request_title(&format!("{name}é")).is_err());
        let email = format!("{}@example.com", "é".repeat(254 - "@example.com".len()));
        assert_eq!(email.chars().count(), 254);
        assert!(author_email(&email).is_ok());
        assert!(author_email(&format!("é{email}")).is_err());
    }

    #[test]
    fn author_emails_are_one_address() {
        assert_eq!(author_email("ada@example.com").unwrap(), "ada@example.com");
        assert!(author_email("bot+agent@users.noreply.github.com").is_ok());
        for bad in [
            "",
            "ada",
            "@example.com",
            "ada@",
            "a@b@c",
            "ada lovelace@example.com",
            "ada@example.com>",
            "<ada@example.com",
            "ada@exa\nmple.com",
            "...@...",
        ] {
            assert_eq!(
                author_email(bad).unwrap_err().rule,
                "commit.author-email",
                "{bad:?}"
            );
        }
        let long = format!("{}@example.com", "a".repeat(MAX_AUTHOR_EMAIL_CHARS));
        assert!(author_email(&long).is_err());
    }
}
