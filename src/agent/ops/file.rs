//! The `file.*` requests: the path as given (a client path under `/workspace`, or one relative
//! to the root) and each operation's options, read into the `files` module's own types.

use super::args::Args;
use super::AgentOp;
use crate::agent::files::{EditRequest, ListOptions, ReadOptions, WriteOptions};
use crate::channel::message::ErrorBody;
use crate::channel::MAX_FRAME_BYTES;
use crate::patch::Format;

/// The most bytes one `file.read` returns: its payload must fit in one frame with its header.
pub(crate) const MAX_READ_PAYLOAD: usize = MAX_FRAME_BYTES - 64 * 1024;

/// What `file.glob` and `file.grep` take beyond the path; unset limits keep the query's own.
#[derive(Debug, Default)]
pub(crate) struct SearchOptions {
    pub(crate) pattern: String,
    pub(crate) max_results: Option<usize>,
    pub(crate) max_files: Option<usize>,
    /// The rest are `file.grep`'s.
    pub(crate) glob: Option<String>,
    pub(crate) case_insensitive: bool,
    pub(crate) max_file_size: Option<u64>,
    pub(crate) max_line_chars: Option<usize>,
}

#[derive(Debug)]
pub(crate) enum FileOp {
    Stat,
    List(ListOptions),
    Read(ReadOptions),
    Write {
        options: WriteOptions,
        content: Vec<u8>,
    },
    Edit(EditRequest),
    Remove {
        recursive: bool,
    },
    Mkdir {
        parents: bool,
    },
    Glob(SearchOptions),
    Grep(SearchOptions),
}

/// One file operation on `path` (as the request gave it; the daemon puts it under its root).
#[derive(Debug)]
pub(crate) struct FileRequest {
    pub(crate) path: String,
    pub(crate) op: FileOp,
}

fn optional_usize(a: &Args<'_>, name: &str) -> Result<Option<usize>, ErrorBody> {
    Ok(a.u64(name)?
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX)))
}

impl FileRequest {
    pub(crate) fn parse(op: AgentOp, a: &Args<'_>, payload: Vec<u8>) -> Result<Self, ErrorBody> {
        let path = a.required_str("path")?.to_owned();
        let search = |a: &Args<'_>| -> Result<SearchOptions, ErrorBody> {
            Ok(SearchOptions {
                pattern: a.required_str("pattern")?.to_owned(),
                max_results: optional_usize(a, "max_results")?,
                max_files: optional_usize(a, "max_files")?,
                ..SearchOptions::default()
            })
        };
        let op = match op {
            AgentOp::FileStat => FileOp::Stat,
            AgentOp::FileList => {
                let defaults = ListOptions::default();
                FileOp::List(ListOptions {
                    max_entries: a.usize("max_entries", defaults.max_entries)?,
                    depth: u32::try_from(a.u64("depth")?.unwrap_or(0)).unwrap_or(u32::MAX),
                })
            }
            AgentOp::FileRead => FileOp::Read(ReadOptions {
                offset: a.u64("offset")?.unwrap_or(0),
                max_len: Some(a.usize("max_len", 1 << 20)?.min(MAX_READ_PAYLOAD)),
            }),
            AgentOp::FileWrite => FileOp::Write {
                options: WriteOptions {
                    create_parents: a.bool("create_parents")?,
                },
                content: payload,
            },
            AgentOp::FileEdit => FileOp::Edit(EditRequest {
                old: a.required_str("old")?.to_owned(),
                new: a.str("new")?.unwrap_or_default().to_owned(),
                expected: optional_usize(a, "expected")?,
            }),
            AgentOp::FileRemove => FileOp::Remove {
                recursive: a.bool("recursive")?,
            },
            AgentOp::FileMkdir => FileOp::Mkdir {
                parents: a.bool("parents")?,
            },
            AgentOp::FileGlob => FileOp::Glob(search(a)?),
            AgentOp::FileGrep => {
                let mut q = search(a)?;
                q.glob = a.str("glob")?.map(str::to_owned);
                q.case_insensitive = a.bool("case_insensitive")?;
                q.max_file_size = a.u64("max_file_size")?;
                q.max_line_chars = optional_usize(a, "max_line_chars")?;
                FileOp::Grep(q)
            }
            other => {
                return Err(ErrorBody::invalid(
                    "op",
                    format!("'{}' is not a file operation", other.name()),
                ))
            }
        };
        Ok(Self { path, op })
    }
}

/// `file.patch`: the patch's text (the payload) and its format (detected when not named).
#[derive(Debug)]
pub(crate) struct PatchRequest {
    pub(crate) text: String,
    pub(crate) format: Option<Format>,
}

impl PatchRequest {
    pub(crate) fn parse(a: &Args<'_>, payload: Vec<u8>) -> Result<Self, ErrorBody> {
        let format = match a.str("format")? {
            None => None,
            Some(name) => Some(Format::from_name(name).ok_or_else(|| {
                ErrorBody::invalid("format", "'format' must be 'unified' or 'apply_patch'")
            })?),
        };
        let text = String::from_utf8(payload)
            .map_err(|_| ErrorBody::invalid("patch", "the patch must be UTF-8 text"))?;
        Ok(Self { text, format })
    }
}
