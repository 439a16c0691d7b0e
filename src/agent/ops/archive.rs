//! The `archive.*` requests (docs/protocol.md): which staged archive, and each step's options,
//! bounded by the agent's own limits whatever the gateway asks.

use super::args::Args;
use super::file::MAX_READ_PAYLOAD;
use super::AgentOp;
use crate::agent::archive::{
    PackLimits, UnpackFormat, MAX_ARCHIVE_BYTES, MAX_ARCHIVE_ENTRIES, MAX_LISTING,
};
use crate::channel::message::ErrorBody;
use crate::policy::TarLimits;

/// How many entries a listing carries unless the request says otherwise.
const DEFAULT_LISTING: usize = 1000;

#[derive(Debug)]
pub(crate) enum ArchiveOp {
    /// Pack `path` into the archive (`dry_run`: only list and count, stage nothing).
    Create {
        path: String,
        limits: PackLimits,
        dry_run: bool,
    },
    /// `max_len` bytes of the archive from `offset`, as the reply's payload.
    Read {
        offset: u64,
        max_len: usize,
    },
    /// The payload written into the archive at `offset`; it may not grow past `max_bytes`.
    Write {
        offset: u64,
        max_bytes: u64,
        data: Vec<u8>,
    },
    /// Unpack the archive at `path`.
    Extract {
        path: String,
        format: UnpackFormat,
        overwrite: bool,
        limits: TarLimits,
    },
    Remove,
}

#[derive(Debug)]
pub(crate) struct ArchiveRequest {
    /// The staging name the gateway chose (32 lowercase hex digits; checked by the staging).
    pub(crate) archive_id: String,
    pub(crate) op: ArchiveOp,
}

fn bytes_bound(a: &Args<'_>) -> Result<u64, ErrorBody> {
    Ok(a.u64("max_bytes")?
        .unwrap_or(MAX_ARCHIVE_BYTES)
        .min(MAX_ARCHIVE_BYTES))
}

fn entries_bound(a: &Args<'_>) -> Result<u64, ErrorBody> {
    Ok(a.u64("max_entries")?
        .unwrap_or(MAX_ARCHIVE_ENTRIES)
        .min(MAX_ARCHIVE_ENTRIES))
}

impl ArchiveRequest {
    pub(crate) fn parse(op: AgentOp, a: &Args<'_>, payload: Vec<u8>) -> Result<Self, ErrorBody> {
        let archive_id = a.required_str("archive_id")?.to_owned();
        let op = match op {
            AgentOp::ArchiveCreate => ArchiveOp::Create {
                path: a.required_str("path")?.to_owned(),
                limits: PackLimits {
                    max_bytes: bytes_bound(a)?,
                    max_entries: entries_bound(a)?,
                    list_max: a.usize("list_max", DEFAULT_LISTING)?.min(MAX_LISTING),
                },
                dry_run: a.bool("dry_run")?,
            },
            AgentOp::ArchiveRead => ArchiveOp::Read {
                offset: a.u64("offset")?.unwrap_or(0),
                max_len: a.usize("max_len", MAX_READ_PAYLOAD)?.min(MAX_READ_PAYLOAD),
            },
            AgentOp::ArchiveWrite => ArchiveOp::Write {
                offset: a.u64("offset")?.unwrap_or(0),
                max_bytes: bytes_bound(a)?,
                data: payload,
            },
            AgentOp::ArchiveExtract => ArchiveOp::Extract {
                path: a.required_str("path")?.to_owned(),
                format: match a.str("format")?.unwrap_or("tar") {
                    "tar" => UnpackFormat::Tar,
                    "file" => UnpackFormat::File,
                    _ => return Err(ErrorBody::invalid("format", "'format' must be tar or file")),
                },
                overwrite: a.bool("overwrite")?,
                limits: TarLimits {
                    max_bytes: bytes_bound(a)?,
                    max_entries: entries_bound(a)?,
                },
            },
            AgentOp::ArchiveRemove => ArchiveOp::Remove,
            other => {
                return Err(ErrorBody::invalid(
                    "op",
                    format!("'{}' is not an archive operation", other.name()),
                ))
            }
        };
        Ok(Self { archive_id, op })
    }
}
