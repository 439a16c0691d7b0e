//! The `archive.*` requests: staged archives are opened as the agent (its private directory),
//! the workspace side is walked or written as the commands' user, on a blocking thread.
//! Every request first prunes archives a vanished gateway left behind.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use serde_json::{json, Value};

use super::fs_user::AsUser;
use crate::agent::archive::{pack, unpack, Staging, STAGING_MAX_AGE, STAGING_MAX_BYTES};
use crate::agent::files::{FileError, Workspace};
use crate::agent::ops::{file_error, internal, policy, under_root, ArchiveOp, ArchiveRequest};
use crate::agent::process::CommandUser;
use crate::channel::message::ErrorBody;
use crate::channel::server::Reply;
use crate::policy as rules;

pub(crate) struct ArchiveContext {
    pub(crate) ws: Arc<Workspace>,
    pub(crate) root: String,
    pub(crate) staging: Staging,
    pub(crate) user: Option<CommandUser>,
}

/// Runs one archive request; blocking (call it on a blocking thread).
pub(crate) fn run(cx: &ArchiveContext, request: ArchiveRequest) -> Reply {
    cx.staging.prune(STAGING_MAX_AGE);
    match run_inner(cx, request) {
        Ok((result, payload)) => Reply {
            result: Ok(result),
            payload,
        },
        Err(e) => Reply::err(e),
    }
}

fn io(what: &str, e: std::io::Error) -> ErrorBody {
    internal(what, e)
}

fn run_inner(cx: &ArchiveContext, request: ArchiveRequest) -> Result<(Value, Vec<u8>), ErrorBody> {
    let ArchiveRequest { archive_id, op } = request;
    let staging = &cx.staging;
    let contained = |path: &str| {
        rules::workspace_path(&cx.root, &under_root(path)).map_err(|e| policy("path", e))
    };
    let result = match op {
        ArchiveOp::Create {
            path,
            limits,
            dry_run,
        } => {
            let path = contained(&path)?;
            // Admitted by what it may grow to, so transfers in flight stay within the bound.
            if !dry_run
                && staging.total_bytes().saturating_add(limits.max_bytes) > STAGING_MAX_BYTES
            {
                return Err(file_error(FileError::limit(format!(
                    "transfers in flight already hold most of {STAGING_MAX_BYTES} bytes; retry \
                     when one ends"
                ))));
            }
            let mut out = match dry_run {
                true => None,
                false => Some(staging.create(&archive_id).map_err(file_error)?),
            };
            let packed = {
                let _as_user = AsUser::enter(cx.user);
                pack(&cx.ws, &path, out.as_mut(), limits)
            };
            let summary = match packed {
                Ok(summary) => summary,
                Err(e) => {
                    drop(out);
                    let _ = staging.remove(&archive_id);
                    return Err(file_error(e));
                }
            };
            let size = match &out {
                Some(file) => file
                    .metadata()
                    .map_err(|e| io("cannot stat an archive", e))?
                    .len(),
                None => 0,
            };
            let mut value = serde_json::to_value(&summary)
                .map_err(|e| internal("cannot encode a result", e))?;
            value["size"] = json!(size);
            value
        }
        ArchiveOp::Read { offset, max_len } => {
            let file = staging.readable(&archive_id).map_err(file_error)?;
            let size = file
                .metadata()
                .map_err(|e| io("cannot stat an archive", e))?
                .len();
            let len = usize::try_from(size.saturating_sub(offset))
                .unwrap_or(usize::MAX)
                .min(max_len);
            let mut data = vec![0u8; len];
            file.read_exact_at(&mut data, offset)
                .map_err(|e| io("cannot read an archive", e))?;
            let eof = offset + len as u64 >= size;
            return Ok((json!({"offset": offset, "size": size, "eof": eof}), data));
        }
        ArchiveOp::Write {
            offset,
            max_bytes,
            data,
        } => {
            let end = offset.saturating_add(data.len() as u64);
            if end > max_bytes {
                return Err(file_error(FileError::limit(format!(
                    "the upload is over {max_bytes} bytes"
                ))));
            }
            let file = staging.writable(&archive_id).map_err(file_error)?;
            let grows = end.saturating_sub(file.metadata().map_or(0, |m| m.len()));
            if staging.total_bytes().saturating_add(grows) > STAGING_MAX_BYTES {
                return Err(file_error(FileError::limit(format!(
                    "transfers in flight already hold {STAGING_MAX_BYTES} bytes; retry when one \
                     ends"
                ))));
            }
            file.write_all_at(&data, offset)
                .map_err(|e| file_error(FileError::from_io(&e, "stage", "the upload")))?;
            json!({"offset": offset, "written": data.len(), "end": end})
        }
        ArchiveOp::Extract {
            path,
            format,
            overwrite,
            limits,
        } => {
            let path = contained(&path)?;
            let mut staged: File = staging.readable(&archive_id).map_err(file_error)?;
            let mut outcome = {
                let _as_user = AsUser::enter(cx.user);
                unpack(&cx.ws, &mut staged, &path, format, overwrite, limits)
            }
            .map_err(file_error)?;
            outcome.path = crate::agent::ops::shown_path(&outcome.path);
            serde_json::to_value(&outcome).map_err(|e| internal("cannot encode a result", e))?
        }
        ArchiveOp::Remove => json!({"removed": staging.remove(&archive_id).map_err(file_error)?}),
    };
    Ok((result, Vec::new()))
}
