//! The one error every file operation returns: a kind the gateway maps to a status, and a
//! message that names the path as the client gave it (relative to the root), never a host path.

use std::fmt;
use std::io;

use serde::Serialize;

use crate::channel::message::ErrorCode;

/// What went wrong, in the terms of the product's error model (docs/architecture.md §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileErrorKind {
    /// The request itself is malformed (400).
    InvalidArgument,
    /// The path does not exist (404).
    NotFound,
    /// The request clashes with what is on disk: wrong count, not empty, already exists (409).
    Conflict,
    /// Outside the workspace root, or refused by the OS (403).
    Permission,
    /// A bound was hit: size, count, open watches, inotify's per-user limits (413/429).
    Limit,
    /// An I/O failure that is none of the above (for example EIO); reported as a server error.
    Io,
}

impl FileErrorKind {
    /// The protocol's error code for this kind: the one mapping between the two models. An
    /// I/O failure is the agent's own (`internal`), never the caller's.
    pub fn code(self) -> ErrorCode {
        match self {
            Self::InvalidArgument => ErrorCode::InvalidArgument,
            Self::NotFound => ErrorCode::NotFound,
            Self::Conflict => ErrorCode::Conflict,
            Self::Permission => ErrorCode::Permission,
            Self::Limit => ErrorCode::Limit,
            Self::Io => ErrorCode::Internal,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileError {
    pub kind: FileErrorKind,
    pub message: String,
}

impl FileError {
    pub fn new(kind: FileErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(FileErrorKind::InvalidArgument, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(FileErrorKind::NotFound, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(FileErrorKind::Conflict, message)
    }

    pub fn permission(message: impl Into<String>) -> Self {
        Self::new(FileErrorKind::Permission, message)
    }

    pub fn limit(message: impl Into<String>) -> Self {
        Self::new(FileErrorKind::Limit, message)
    }

    /// The path resolves outside the workspace root (`..`, an absolute path, or a symlink).
    pub fn outside(path: &str) -> Self {
        Self::permission(format!(
            "'{path}' resolves outside the workspace root; paths and the symlinks they pass \
             through must stay inside it"
        ))
    }

    /// Maps an OS error met while doing `action` on the client's `path` to a kind. The OS text
    /// carries no path (std formats errno only), so nothing of the host leaks through it.
    pub fn from_io(err: &io::Error, action: &str, path: &str) -> Self {
        let os = err.raw_os_error().unwrap_or(0);
        let shown = if path.is_empty() { "." } else { path };
        match os {
            libc::EXDEV => Self::outside(shown),
            libc::ENOENT => Self::not_found(format!(
                "cannot {action} '{shown}': no such file or directory"
            )),
            libc::ENOTDIR => Self::not_found(format!(
                "cannot {action} '{shown}': a component of the path is not a directory"
            )),
            libc::ELOOP => Self::invalid(format!(
                "cannot {action} '{shown}': too many levels of symbolic links, or a symlink \
                 where none may be followed"
            )),
            libc::EACCES | libc::EPERM | libc::EROFS => {
                Self::permission(format!("cannot {action} '{shown}': permission denied"))
            }
            libc::ENAMETOOLONG | libc::EINVAL => {
                Self::invalid(format!("cannot {action} '{shown}': {err}"))
            }
            libc::EEXIST => Self::conflict(format!("cannot {action} '{shown}': it already exists")),
            libc::EISDIR => Self::conflict(format!("cannot {action} '{shown}': it is a directory")),
            libc::ENOTEMPTY => Self::conflict(format!(
                "cannot {action} '{shown}': the directory is not empty"
            )),
            libc::EMFILE | libc::ENFILE | libc::ENOSPC | libc::EDQUOT | libc::EFBIG => {
                Self::limit(format!("cannot {action} '{shown}': {err}"))
            }
            _ => Self::new(
                FileErrorKind::Io,
                format!("cannot {action} '{shown}': {err}"),
            ),
        }
    }
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}]", self.message, self.kind.code().as_str())
    }
}

impl std::error::Error for FileError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_maps_to_the_product_error_kinds() {
        let kind =
            |errno| FileError::from_io(&io::Error::from_raw_os_error(errno), "read", "a").kind;
        assert_eq!(kind(libc::EXDEV), FileErrorKind::Permission);
        assert_eq!(kind(libc::ENOENT), FileErrorKind::NotFound);
        assert_eq!(kind(libc::EEXIST), FileErrorKind::Conflict);
        assert_eq!(kind(libc::ENOSPC), FileErrorKind::Limit);
        assert_eq!(kind(libc::EIO), FileErrorKind::Io);
        // On the wire an I/O failure is the agent's, not the caller's.
        assert_eq!(FileErrorKind::Io.code(), ErrorCode::Internal);
        assert_eq!(FileErrorKind::NotFound.code(), ErrorCode::NotFound);
    }

    #[test]
    fn messages_name_the_client_path() {
        let e = FileError::from_io(
            &io::Error::from_raw_os_error(libc::ENOENT),
            "read",
            "src/a.rs",
        );
        assert_eq!(
            e.to_string(),
            "cannot read 'src/a.rs': no such file or directory [not_found]"
        );
    }
}
