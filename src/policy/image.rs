//! What a workspace request may say about its image: a published image's name or an image id,
//! and extra Debian (apt) and Python (pip) packages, which the Modal driver installs in a cached
//! layer on top of the workspace image. Every accepted value is a bare name, optionally pinned
//! to one version: never an option, a path, a URL, a shell word or a version range.

use super::error::PolicyError;
use super::names::modal_name;

/// At most this many packages of each kind in one request.
pub const MAX_IMAGE_PACKAGES: usize = 32;
/// Longest package name accepted, in bytes (Debian's and PyPI's real names are far shorter).
pub const MAX_PACKAGE_NAME_BYTES: usize = 64;
/// Longest pinned version accepted, in bytes.
pub const MAX_PACKAGE_VERSION_BYTES: usize = 64;
/// Longest image tag accepted after `name:`, in bytes.
pub const MAX_IMAGE_TAG_BYTES: usize = 64;

/// A published image's name, `NAME` or `NAME:TAG`: the name a Modal object name, the tag
/// `[A-Za-z0-9._-]`, at most 64 bytes, not starting with `.` or `-`.
pub fn image_name(text: &str) -> Result<String, PolicyError> {
    let what = "an image name must be a Modal object name, optionally with ':TAG' \
                (letters, digits, '.', '_' or '-', at most 64)";
    let (name, tag) = match text.split_once(':') {
        Some((name, tag)) => (name, Some(tag)),
        None => (text, None),
    };
    modal_name(name).map_err(|_| PolicyError::new("image.name", what, text))?;
    if let Some(tag) = tag {
        let ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
        if tag.is_empty()
            || tag.len() > MAX_IMAGE_TAG_BYTES
            || tag.starts_with(['.', '-'])
            || !tag.bytes().all(ok)
        {
            return Err(PolicyError::new("image.tag", what, text));
        }
    }
    Ok(text.to_owned())
}

/// An image id: `im-` and 1-64 ASCII letters or digits.
pub fn image_id(text: &str) -> Result<String, PolicyError> {
    let what = "an image id must be 'im-' followed by 1-64 letters or digits";
    match text.strip_prefix("im-") {
        Some(rest)
            if !rest.is_empty()
                && rest.len() <= 64
                && rest.bytes().all(|b| b.is_ascii_alphanumeric()) =>
        {
            Ok(text.to_owned())
        }
        _ => Err(PolicyError::new("image.id", what, text)),
    }
}

/// A Debian package: `NAME` or `NAME=VERSION`. The name follows Debian policy §5.6.1 (lowercase
/// letters, digits, `+`, `-`, `.`; at least two characters; starting with a letter or digit);
/// the version is an optional `EPOCH:` (digits), then an upstream version starting with a digit,
/// of letters, digits, `.`, `+`, `~` and `-`. No release (`/`), no architecture (`:`), no option.
pub fn apt_package(text: &str) -> Result<String, PolicyError> {
    let what = "an apt package must be a Debian package name (lowercase letters, digits, '+', \
                '-', '.'; at least 2, at most 64), optionally '=VERSION'";
    let (name, version) = match text.split_once('=') {
        Some((name, version)) => (name, Some(version)),
        None => (text, None),
    };
    let name_ok =
        |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.');
    let first_ok = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if name.len() < 2
        || name.len() > MAX_PACKAGE_NAME_BYTES
        || !first_ok
        || !name.bytes().all(name_ok)
    {
        return Err(PolicyError::new("package.apt-name", what, text));
    }
    if let Some(version) = version {
        let upstream = match version.split_once(':') {
            Some((epoch, rest))
                if !epoch.is_empty() && epoch.bytes().all(|b| b.is_ascii_digit()) =>
            {
                rest
            }
            Some(_) => return Err(PolicyError::new("package.apt-version", what, text)),
            None => version,
        };
        let ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'~' | b'-');
        if version.len() > MAX_PACKAGE_VERSION_BYTES
            || !upstream.bytes().next().is_some_and(|b| b.is_ascii_digit())
            || !upstream.bytes().all(ok)
        {
            return Err(PolicyError::new("package.apt-version", what, text));
        }
    }
    Ok(text.to_owned())
}

/// A Python package: `NAME` or `NAME==VERSION`. The name follows PEP 508 (letters, digits and
/// `.`, `_`, `-`, starting and ending with a letter or digit); the version is a PEP 440 public
/// version (digits and dots, then optional pre/post/dev parts of letters, digits and dots).
/// No extras, markers, ranges, local versions, URLs (`@`) or options.
pub fn pip_package(text: &str) -> Result<String, PolicyError> {
    let what = "a pip package must be a PEP 508 name (letters, digits, '.', '_', '-'; at most \
                64), optionally '==VERSION' (a PEP 440 public version)";
    let (name, version) = match text.split_once("==") {
        Some((name, version)) => (name, Some(version)),
        None => (text, None),
    };
    let inner = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    let ends_ok = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if name.is_empty()
        || name.len() > MAX_PACKAGE_NAME_BYTES
        || !ends_ok
        || !name.bytes().all(inner)
    {
        return Err(PolicyError::new("package.pip-name", what, text));
    }
    if let Some(version) = version {
        if !pep440_public(version) {
            return Err(PolicyError::new("package.pip-version", what, text));
        }
    }
    Ok(text.to_owned())
}

/// `N(.N)*` then letters, digits and dots (`1.2.3`, `2.0rc1`, `1.0.post2`, `3.1.dev4`).
fn pep440_public(version: &str) -> bool {
    if version.is_empty() || version.len() > MAX_PACKAGE_VERSION_BYTES {
        return false;
    }
    let release_end = version
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(version.len());
    let release = &version[..release_end];
    let rest = &version[release_end..];
    let release_ok = !release.is_empty()
        && release
            .trim_end_matches('.')
            .split('.')
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()));
    let rest_ok = rest
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.')
        && !rest.ends_with('.')
        && !rest.contains("..");
    release_ok && rest_ok && !release.starts_with('.')
}

/// A list of packages of one kind (`apt` or `pip`): each checked, at most
/// [`MAX_IMAGE_PACKAGES`], duplicates dropped (first kept, order kept).
pub fn image_packages(kind: &str, items: &[String]) -> Result<Vec<String>, PolicyError> {
    let check: fn(&str) -> Result<String, PolicyError> = match kind {
        "apt" => apt_package,
        "pip" => pip_package,
        _ => {
            return Err(PolicyError::new(
                "package.kind",
                "the package kind must be 'apt' or 'pip'",
                kind,
            ))
        }
    };
    if items.len() > MAX_IMAGE_PACKAGES {
        return Err(PolicyError::without_echo(
            "package.too-many",
            format!(
                "at most {MAX_IMAGE_PACKAGES} {kind} packages (got {})",
                items.len()
            ),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let checked = check(item)?;
        if !out.contains(&checked) {
            out.push(checked);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apt_packages_are_debian_names_with_an_optional_exact_version() {
        for ok in [
            "git",
            "libssl-dev",
            "g++",
            "python3.11",
            "nodejs=18.19.0+dfsg-6~deb12u1",
            "tzdata=1:2024a-0",
        ] {
            assert_eq!(apt_package(ok).as_deref(), Ok(ok), "{ok}");
        }
        for (bad, rule) in [
            ("", "package.apt-name"),
            ("a", "package.apt-name"),
            ("Git", "package.apt-name"),
            ("-o", "package.apt-name"),
            ("--allow-unauthenticated", "package.apt-name"),
            ("git curl", "package.apt-name"),
            ("git;rm", "package.apt-name"),
            ("./local.deb", "package.apt-name"),
            ("git/bookworm-backports", "package.apt-name"),
            ("git:amd64", "package.apt-name"),
            ("git=", "package.apt-version"),
            ("git=latest", "package.apt-version"),
            ("git=1.0 x", "package.apt-version"),
            ("git=x:1.0", "package.apt-version"),
            ("git=$(id)", "package.apt-version"),
        ] {
            assert_eq!(apt_package(bad).map_err(|e| e.rule), Err(rule), "{bad:?}");
        }
        assert!(apt_package(&"a".repeat(65)).is_err());
        assert!(apt_package(&format!("git={}", "1".repeat(65))).is_err());
    }

    #[test]
    fn pip_packages_are_pep508_names_with_an_optional_exact_version() {
        for ok in [
            "requests",
            "Django",
            "zope.interface",
            "typing_extensions",
            "numpy==2.1.3",
            "black==24.1.0rc1",
            "a==1.0.post2",
            // A pre-release before the first dot: the release part ends at the letter.
            "a==1rc1.post2",
        ] {
            assert_eq!(pip_package(ok).as_deref(), Ok(ok), "{ok}");
        }
        for (bad, rule) in [
            ("", "package.pip-name"),
            ("-e", "package.pip-name"),
            ("--index-url=http://x", "package.pip-name"),
            ("requests[socks]", "package.pip-name"),
            ("requests>=2", "package.pip-name"),
            ("requests @ https://x/y.whl", "package.pip-name"),
            ("requests;python_version<'3'", "package.pip-name"),
            ("git+https://github.com/a/b", "package.pip-name"),
            ("_private", "package.pip-name"),
            ("requests==", "package.pip-version"),
            ("requests==2.*", "package.pip-version"),
            ("requests==2.0+local", "package.pip-version"),
            ("requests==2.0 ", "package.pip-version"),
            ("requests==2.0==3", "package.pip-version"),
            ("requests==1..2", "package.pip-version"),
        ] {
            assert_eq!(pip_package(bad).map_err(|e| e.rule), Err(rule), "{bad:?}");
        }
    }

    #[test]
    fn lists_are_bounded_and_deduplicated() {
        let list: Vec<String> = vec!["git".into(), "jq".into(), "git".into()];
        assert_eq!(
            image_packages("apt", &list),
            Ok(vec!["git".to_owned(), "jq".to_owned()])
        );
        let full: Vec<String> = (0..32).map(|i| format!("p{i}")).collect();
        assert_eq!(image_packages("pip", &full).map(|l| l.len()), Ok(32));
        let many: Vec<String> = (0..=MAX_IMAGE_PACKAGES).map(|i| format!("p{i}")).collect();
        assert_eq!(
            image_packages("pip", &many).map_err(|e| e.rule),
            Err("package.too-many")
        );
        assert_eq!(
            image_packages("npm", &[]).map_err(|e| e.rule),
            Err("package.kind")
        );
    }

    #[test]
    fn every_length_bound_takes_exactly_64_bytes_and_refuses_65() {
        // The messages promise "at most 64": each bound must let its 64th byte through.
        let name = |n: usize| format!("a{}", "b".repeat(n - 1));
        let version = |n: usize| format!("1{}", "0".repeat(n - 1));
        type Rule = fn(&str) -> Result<String, PolicyError>;
        let cases: [(&dyn Fn(usize) -> String, Rule); 6] = [
            (&|n| format!("img:{}", name(n)), image_name),
            (&|n| format!("im-{}", name(n)), image_id),
            (&name, apt_package),
            (&|n| format!("git={}", version(n)), apt_package),
            (&name, pip_package),
            (&|n| format!("requests=={}", version(n)), pip_package),
        ];
        for (i, (make, check)) in cases.iter().enumerate() {
            assert!(check(&make(64)).is_ok(), "case {i}: {}", make(64));
            assert!(check(&make(65)).is_err(), "case {i}: {}", make(65));
        }
    }

    #[test]
    fn image_names_and_ids() {
        for ok in ["modal-workspace", "my.image:v2", "img:2024-01-01"] {
            assert_eq!(image_name(ok).as_deref(), Ok(ok));
        }
        for bad in [
            "",
            "a/b",
            "name:",
            "name:-x",
            "name: x",
            "https://x",
            &"a".repeat(65),
        ] {
            assert!(image_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(image_id("im-abc123XYZ").as_deref(), Ok("im-abc123XYZ"));
        for bad in [
            "im-",
            "abc",
            "im-a_b",
            "sn-abc",
            &format!("im-{}", "a".repeat(65)),
        ] {
            assert!(image_id(bad).is_err(), "{bad:?}");
        }
    }
}
