//! The GitHub repository a client names, parsed strictly by hand and rebuilt to a canonical URL.
//! Only `OWNER/REPO` and `https://github.com/OWNER/REPO` forms pass; the input is never passed on.

use super::error::PolicyError;

/// Inputs longer than this are refused before any parsing.
pub const MAX_REPO_INPUT_CHARS: usize = 256;

const MAX_OWNER_CHARS: usize = 39;
const MAX_NAME_CHARS: usize = 100;
const HOST: &str = "github.com";

/// What every rejection reminds the client is accepted.
const ACCEPTED: &str = "use OWNER/REPO or https://github.com/OWNER/REPO(.git)";

/// A GitHub repository that passed the policy: both parts are safe to put in a URL or a path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GitHubRepo {
    pub owner: String,
    pub name: String,
}

impl GitHubRepo {
    /// `OWNER/REPO`.
    pub fn slug(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// `https://github.com/OWNER/REPO.git`: the repository's identity (recorded in tags).
    pub fn url(&self) -> String {
        format!("https://{HOST}/{}/{}.git", self.owner, self.name)
    }

    /// `BASE/OWNER/REPO.git` on a base that [`github_base`] accepted: the only URL git is given
    /// (`https://github.com` in production; a GitHub Enterprise or test server otherwise).
    pub fn url_on(&self, base: &str) -> Result<String, PolicyError> {
        let base = github_base(base)?;
        Ok(format!("{base}/{}/{}.git", self.owner, self.name))
    }
}

/// Inputs longer than this are refused as a base URL.
pub const MAX_BASE_URL_CHARS: usize = 200;

/// Checks the operator's GitHub base URL (`MODAL_WORKSPACE_GITHUB_URL`, and the API one) and
/// returns it canonical: `http(s)://HOST[:PORT][/PATH]`, scheme and host lowercased, no trailing
/// slash. Refused: other schemes, userinfo (never echoed), query, fragment, percent-escapes,
/// whitespace, control characters, backslashes, `.`/`..` segments, and empty hosts.
pub fn github_base(text: &str) -> Result<String, PolicyError> {
    const ACCEPTED_BASE: &str = "use http(s)://HOST[:PORT][/PATH], e.g. https://github.com";
    let bad =
        |rule: &'static str, what: &str| reject(rule, &format!("{what}; {ACCEPTED_BASE}"), text);
    if text.chars().count() > MAX_BASE_URL_CHARS {
        return Err(bad(
            "base.too-long",
            "a base URL must be at most 200 characters",
        ));
    }
    if text
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || matches!(c, '\\' | '%' | '?' | '#'))
    {
        return Err(bad(
            "base.character",
            "a base URL must not contain whitespace, control characters, '\\', '%', '?' or '#'",
        ));
    }
    let Some((scheme, rest)) = text.split_once("://") else {
        return Err(bad(
            "base.scheme",
            "a base URL must start with https:// or http://",
        ));
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "https" && scheme != "http" {
        return Err(bad(
            "base.scheme",
            "a base URL must start with https:// or http://",
        ));
    }
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.contains('@') {
        return Err(PolicyError::without_echo(
            "base.userinfo",
            format!("a base URL must not carry a user name, password or token; {ACCEPTED_BASE}"),
        ));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        && !host.starts_with(['.', '-']);
    if !host_ok {
        return Err(bad(
            "base.host",
            "a base URL needs a host name or IPv4 address",
        ));
    }
    if let Some(port) = port {
        let valid = !port.is_empty()
            && port.len() <= 5
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p));
        if !valid {
            return Err(bad("base.port", "a base URL's port must be 1 to 65535"));
        }
    }
    let path = path.strip_suffix('/').unwrap_or(path);
    let segments: Vec<&str> = match path {
        "" => Vec::new(),
        _ => path.split('/').collect(),
    };
    let segment_ok = |s: &&str| {
        !s.is_empty()
            && *s != "."
            && *s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'~'))
    };
    if !segments.iter().all(segment_ok) {
        return Err(bad(
            "base.path",
            "a base URL's path may hold only letters, digits, '.', '_', '-' and '~' segments",
        ));
    }
    let mut out = format!("{scheme}://{}", host.to_ascii_lowercase());
    if let Some(port) = port {
        out.push(':');
        out.push_str(port);
    }
    for segment in segments {
        out.push('/');
        out.push_str(segment);
    }
    Ok(out)
}

/// Parses `OWNER/REPO`, `OWNER/REPO.git` or `https://github.com/OWNER/REPO` (optional `.git`, one
/// optional trailing slash; scheme and host compared case-insensitively).
pub fn github_repo(text: &str) -> Result<GitHubRepo, PolicyError> {
    let reject = |rule: &'static str, what: &str| reject(rule, what, text);
    if text.is_empty() {
        return Err(reject("repo.empty", "a repository must not be empty"));
    }
    if text.chars().count() > MAX_REPO_INPUT_CHARS {
        return Err(reject(
            "repo.too-long",
            "a repository must be at most 256 characters",
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(reject(
            "repo.control-char",
            "a repository must not contain control characters",
        ));
    }
    if text.chars().any(char::is_whitespace) {
        return Err(reject(
            "repo.whitespace",
            "a repository must not contain whitespace",
        ));
    }
    if text.contains('\\') {
        return Err(reject(
            "repo.backslash",
            "a repository must not contain backslashes",
        ));
    }
    if text.contains('%') {
        return Err(reject(
            "repo.percent-escape",
            "a repository must not contain percent-escapes",
        ));
    }
    let url_rest = split_scheme(text)?;
    reject_query_and_fragment(text)?;
    let (path, trailing_slash_ok) = match url_rest {
        Some(rest) => (github_path(text, rest)?, true),
        None => (text, false),
    };
    owner_and_name(text, path, trailing_slash_ok)
}

/// Returns what follows `https://` when the input is a URL, `None` for the `OWNER/REPO` form, and
/// refuses every other scheme, transport and the scp-like `host:path`.
fn split_scheme(text: &str) -> Result<Option<&str>, PolicyError> {
    if let Some((scheme, rest)) = text.split_once("://") {
        if scheme.eq_ignore_ascii_case("https") {
            return Ok(Some(rest));
        }
        let what = if scheme.eq_ignore_ascii_case("http") {
            "plain http:// is not accepted (git would send credentials in the clear)"
        } else {
            "only the https:// scheme is accepted (no ssh://, git://, file:// or others)"
        };
        return Err(reject("repo.scheme", &format!("{what}; {ACCEPTED}"), text));
    }
    let Some((before, _)) = text.split_once(':') else {
        return Ok(None);
    };
    let (rule, what) = if text.starts_with("ext::") || before.contains('+') {
        (
            "repo.transport",
            "git transports such as ext:: are not accepted",
        )
    } else if before.contains('@') || (!before.contains('/') && before.contains('.')) {
        (
            "repo.scp-like",
            "scp-like HOST:PATH addresses are not accepted",
        )
    } else if before.contains('/') {
        (
            "repo.colon",
            "a repository must not contain ':' outside https://",
        )
    } else {
        (
            "repo.scheme",
            "only the https:// scheme is accepted (no file: or others)",
        )
    };
    Err(reject(rule, &format!("{what}; {ACCEPTED}"), text))
}

/// Checks the authority of an `https://` URL and returns its path (without the leading slash).
fn github_path<'a>(text: &str, rest: &'a str) -> Result<&'a str, PolicyError> {
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.contains('@') {
        // Never echo: the part before `@` is usually a token.
        return Err(PolicyError::without_echo(
            "repo.userinfo",
            format!("a repository URL must not carry a user name, password or token; {ACCEPTED} and configure credentials separately"),
        ));
    }
    if authority.contains(':') {
        return Err(reject(
            "repo.port",
            &format!("a repository URL must not name a port; {ACCEPTED}"),
            text,
        ));
    }
    if !authority.eq_ignore_ascii_case(HOST) {
        return Err(reject(
            "repo.host",
            &format!("only repositories on github.com are accepted; {ACCEPTED}"),
            text,
        ));
    }
    Ok(path)
}

fn reject_query_and_fragment(text: &str) -> Result<(), PolicyError> {
    if text.contains('?') {
        return Err(reject(
            "repo.query",
            &format!("a repository must not have a query (?...); {ACCEPTED}"),
            text,
        ));
    }
    if text.contains('#') {
        return Err(reject(
            "repo.fragment",
            &format!("a repository must not have a fragment (#...); {ACCEPTED}"),
            text,
        ));
    }
    Ok(())
}

/// Splits `OWNER/REPO[.git][/]` and checks both parts against GitHub's naming rules.
fn owner_and_name(
    text: &str,
    path: &str,
    trailing_slash_ok: bool,
) -> Result<GitHubRepo, PolicyError> {
    let reject = |rule: &'static str, what: &str| reject(rule, what, text);
    let path = match path.strip_suffix('/') {
        Some(stripped) if trailing_slash_ok => stripped,
        _ => path,
    };
    let parts: Vec<&str> = path.split('/').collect();
    if parts.iter().any(|p| *p == "." || *p == "..") {
        return Err(reject(
            "repo.dot-segment",
            &format!("a repository must not contain '.' or '..' segments; {ACCEPTED}"),
        ));
    }
    let [owner, name] = parts[..] else {
        return Err(reject(
            "repo.path-parts",
            &format!("a repository must have exactly two parts, OWNER and REPO; {ACCEPTED}"),
        ));
    };
    if owner.is_empty() || name.is_empty() {
        return Err(reject(
            "repo.path-parts",
            &format!("neither OWNER nor REPO may be empty; {ACCEPTED}"),
        ));
    }
    let name = name.strip_suffix(".git").unwrap_or(name);
    if owner.starts_with('-') || name.starts_with('-') {
        return Err(reject(
            "repo.leading-dash",
            "neither OWNER nor REPO may start with '-'",
        ));
    }
    if name == "." || name == ".." {
        return Err(reject(
            "repo.dot-segment",
            "a repository name must not be '.' or '..'",
        ));
    }
    if !valid_owner(owner) {
        return Err(reject(
            "repo.owner",
            "OWNER must be 1-39 letters, digits or '-', not starting or ending with '-'",
        ));
    }
    if !valid_name(name) {
        return Err(reject(
            "repo.name",
            "REPO must be 1-100 letters, digits, '.', '_' or '-' (plus an optional '.git')",
        ));
    }
    if name.ends_with(".git") {
        return Err(reject(
            "repo.name-git-suffix",
            "REPO must not end in '.git' once one '.git' suffix is removed",
        ));
    }
    Ok(GitHubRepo {
        owner: owner.to_owned(),
        name: name.to_owned(),
    })
}

fn valid_owner(owner: &str) -> bool {
    (1..=MAX_OWNER_CHARS).contains(&owner.len())
        && owner
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !owner.starts_with('-')
        && !owner.ends_with('-')
}

fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME_CHARS).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A rejection that quotes the input only when it cannot hold a credential: anything with an
/// `@` (userinfo) or a GitHub token prefix is never echoed, whichever rule caught it.
fn reject(rule: &'static str, what: &str, text: &str) -> PolicyError {
    if may_hold_secret(text) {
        PolicyError::without_echo(rule, what)
    } else {
        PolicyError::new(rule, what, text)
    }
}

fn may_hold_secret(text: &str) -> bool {
    const TOKEN_PREFIXES: [&str; 6] = ["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"];
    let lower = text.to_ascii_lowercase();
    lower.contains('@') || TOKEN_PREFIXES.iter().any(|p| lower.contains(p))
}

#[cfg(test)]
mod tests;
