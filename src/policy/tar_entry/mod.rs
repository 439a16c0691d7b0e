//! Which entries of an uploaded tar may be extracted: every entry is admitted (or the whole
//! archive refused) before anything is written, so a hostile archive leaves no trace.
//!
//! An entry's name must be relative, UTF-8, free of `..` and NUL, and within the path bounds;
//! only files, directories, symlinks and hardlinks are taken (no devices, fifos or sockets);
//! a symlink's target must stay inside the extraction root lexically and may not pass through
//! another symlink of the archive (where it would resolve is then not a lexical question); a
//! hardlink must name a file the archive holds before it; no entry may lie under a symlink or a
//! file of the archive. Sizes and counts are bounded by the caller's limits.

use std::collections::{HashMap, HashSet};

use super::error::PolicyError;
use super::path::{MAX_COMPONENT_BYTES, MAX_PATH_BYTES};

/// What a tar header says an entry is, as far as the rules care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TarKind {
    File,
    Dir,
    Symlink,
    Hardlink,
    /// Anything else (character or block device, fifo, socket, unknown type): never extracted.
    Other,
}

/// The bounds one extraction is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TarLimits {
    pub max_entries: u64,
    pub max_bytes: u64,
}

/// One admitted entry: its path relative to the extraction root, normalised (no `.`, no empty
/// components, no trailing slash); `link` is a symlink's target as written or a hardlink's
/// target path (normalised like `path`); `mode` has no setuid, setgid or sticky bit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarEntry {
    pub path: String,
    pub kind: TarKind,
    pub size: u64,
    pub mode: u32,
    pub link: Option<String>,
}

/// The entries admitted so far and what later ones are checked against.
#[derive(Debug)]
pub struct TarPlan {
    limits: TarLimits,
    entries: Vec<TarEntry>,
    bytes: u64,
    /// Every admitted path, by kind.
    kinds: HashMap<String, TarKind>,
    /// The directories an admitted path implies (its ancestors).
    implied_dirs: HashSet<String>,
}

fn refuse(rule: &'static str, what: String, name: &str) -> PolicyError {
    PolicyError::new(rule, what, name)
}

/// `raw` as a normalised relative path; `None` for the root itself (`./`, `.`).
fn relative(raw: &[u8], what: &str) -> Result<Option<String>, PolicyError> {
    let text = std::str::from_utf8(raw).map_err(|_| {
        PolicyError::without_echo("tar.not-utf8", format!("a tar {what} must be UTF-8 text"))
    })?;
    if text.contains('\0') {
        return Err(refuse(
            "tar.nul",
            format!("a tar {what} must not contain NUL"),
            text,
        ));
    }
    if text.len() > MAX_PATH_BYTES {
        return Err(refuse(
            "tar.too-long",
            format!("a tar {what} must be at most {MAX_PATH_BYTES} bytes"),
            text,
        ));
    }
    if text.starts_with('/') {
        return Err(refuse(
            "tar.absolute",
            format!("a tar {what} must be relative, not absolute"),
            text,
        ));
    }
    let mut parts = Vec::new();
    for part in text.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(refuse(
                    "tar.parent",
                    format!("a tar {what} must not contain '..'"),
                    text,
                ))
            }
            _ if part.len() > MAX_COMPONENT_BYTES => {
                return Err(refuse(
                    "tar.too-long",
                    format!(
                        "each part of a tar {what} must be at most {MAX_COMPONENT_BYTES} bytes"
                    ),
                    text,
                ))
            }
            _ => parts.push(part),
        }
    }
    Ok((!parts.is_empty()).then(|| parts.join("/")))
}

/// The ancestors of `path` (`a/b/c` → `a`, `a/b`).
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(move |(i, _)| &path[..i])
}

/// A symlink target as components from the extraction root, or `None` when it climbs out.
fn resolved_target(entry: &str, target: &str) -> Option<Vec<String>> {
    let mut parts: Vec<String> = entry.split('/').map(str::to_owned).collect();
    parts.pop(); // the link's own name: its target is relative to its directory
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            other => parts.push(other.to_owned()),
        }
    }
    Some(parts)
}

impl TarPlan {
    pub fn new(limits: TarLimits) -> Self {
        Self {
            limits,
            entries: Vec::new(),
            bytes: 0,
            kinds: HashMap::new(),
            implied_dirs: HashSet::new(),
        }
    }

    /// Checks one header; `Ok(None)` for the root directory entry (`./`), which is skipped.
    pub fn admit(
        &mut self,
        raw_path: &[u8],
        kind: TarKind,
        size: u64,
        mode: u32,
        raw_link: Option<&[u8]>,
    ) -> Result<Option<&TarEntry>, PolicyError> {
        let Some(path) = relative(raw_path, "entry name")? else {
            if kind == TarKind::Dir {
                return Ok(None);
            }
            return Err(PolicyError::without_echo(
                "tar.root",
                "a tar entry other than a directory names the extraction root itself",
            ));
        };
        if kind == TarKind::Other {
            return Err(refuse(
                "tar.special",
                "only files, directories, symlinks and hardlinks may be extracted (no devices, \
                 fifos or sockets)"
                    .into(),
                &path,
            ));
        }
        if self.entries.len() as u64 >= self.limits.max_entries {
            return Err(PolicyError::without_echo(
                "tar.entries",
                format!(
                    "the archive holds more than {} entries",
                    self.limits.max_entries
                ),
            ));
        }
        let size = if kind == TarKind::File { size } else { 0 };
        if size > self.limits.max_bytes.saturating_sub(self.bytes) {
            return Err(refuse(
                "tar.bytes",
                format!(
                    "the archive's files hold more than {} bytes",
                    self.limits.max_bytes
                ),
                &path,
            ));
        }
        let link = match kind {
            TarKind::Symlink => Some(self.symlink_target(&path, raw_link)?),
            TarKind::Hardlink => Some(self.hardlink_target(&path, raw_link)?),
            _ => None,
        };
        self.place(&path, kind)?;
        self.bytes += size;
        self.entries.push(TarEntry {
            path,
            kind,
            size,
            mode: mode & 0o777,
            link,
        });
        Ok(self.entries.last())
    }

    fn symlink_target(&self, path: &str, raw: Option<&[u8]>) -> Result<String, PolicyError> {
        let raw = raw.unwrap_or_default();
        let target = std::str::from_utf8(raw).map_err(|_| {
            PolicyError::without_echo("tar.not-utf8", "a symlink's target must be UTF-8 text")
        })?;
        if target.is_empty() || target.contains('\0') || target.len() > MAX_PATH_BYTES {
            return Err(refuse(
                "tar.link-target",
                "a symlink's target must be a non-empty path without NUL".into(),
                path,
            ));
        }
        if target.starts_with('/') || resolved_target(path, target).is_none() {
            return Err(refuse(
                "tar.link-outside",
                "a symlink's target must stay inside the extraction root".into(),
                path,
            ));
        }
        Ok(target.to_owned())
    }

    fn hardlink_target(&self, path: &str, raw: Option<&[u8]>) -> Result<String, PolicyError> {
        let target = relative(raw.unwrap_or_default(), "hardlink target")?;
        match target {
            Some(target) if self.kinds.get(&target) == Some(&TarKind::File) => Ok(target),
            _ => Err(refuse(
                "tar.link-outside",
                "a hardlink must name a file the archive holds before it".into(),
                path,
            )),
        }
    }

    /// Records `path`; refuses a second entry of the same name (except a directory again) and
    /// any entry under a symlink or a file of the archive, in either order.
    fn place(&mut self, path: &str, kind: TarKind) -> Result<(), PolicyError> {
        let clash = || {
            refuse(
                "tar.clash",
                "an entry clashes with another (the same name twice, or a name under a symlink \
                 or a file of the archive)"
                    .into(),
                path,
            )
        };
        match self.kinds.get(path) {
            Some(TarKind::Dir) if kind == TarKind::Dir => return Ok(()),
            Some(_) => return Err(clash()),
            None => {}
        }
        if kind != TarKind::Dir && self.implied_dirs.contains(path) {
            return Err(clash());
        }
        for dir in ancestors(path) {
            if matches!(self.kinds.get(dir), Some(k) if *k != TarKind::Dir) {
                return Err(clash());
            }
        }
        for dir in ancestors(path) {
            self.implied_dirs.insert(dir.to_owned());
        }
        self.kinds.insert(path.to_owned(), kind);
        Ok(())
    }

    /// The checks that need the whole archive: no symlink target passes through a symlink of
    /// the archive (wherever it comes in the archive). Returns the admitted entries in order.
    pub fn finish(self) -> Result<Vec<TarEntry>, PolicyError> {
        for entry in &self.entries {
            let (TarKind::Symlink, Some(target)) = (entry.kind, &entry.link) else {
                continue;
            };
            // Walk the target as written: a `..` after a symlink of the archive is where a
            // lexical answer and the real one part.
            let mut walked: Vec<&str> = entry.path.split('/').collect();
            walked.pop();
            let parts: Vec<&str> = target
                .split('/')
                .filter(|p| !p.is_empty() && *p != ".")
                .collect();
            for part in &parts[..parts.len().saturating_sub(1)] {
                if *part == ".." {
                    walked.pop();
                    continue;
                }
                walked.push(part);
                if self.kinds.get(&walked.join("/")) == Some(&TarKind::Symlink) {
                    return Err(refuse(
                        "tar.link-chain",
                        "a symlink's target must not pass through another symlink of the \
                         archive"
                            .into(),
                        &entry.path,
                    ));
                }
            }
            // A target naming a symlink itself (last part) is fine: that link is checked too.
        }
        Ok(self.entries)
    }

    /// The file bytes admitted so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests;
