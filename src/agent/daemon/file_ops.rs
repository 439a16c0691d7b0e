//! The `file.*` requests: arguments checked (paths lexically by the policy, under the daemon's
//! root), then the contained `files` operation run on a blocking thread.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::args::{file_error, policy, Args};
use crate::agent::files::{
    EditRequest, GlobQuery, GrepQuery, ListOptions, ReadOptions, Workspace, WriteOptions,
};
use crate::channel::message::ErrorBody;
use crate::channel::server::Reply;
use crate::channel::MAX_FRAME_BYTES;
use crate::policy as rules;

/// The most bytes one `file.read` returns: its payload must fit in one frame with its header.
pub(crate) const MAX_READ_PAYLOAD: usize = MAX_FRAME_BYTES - 64 * 1024;

fn to_value<T: serde::Serialize>(v: T) -> Result<Value, ErrorBody> {
    serde_json::to_value(v).map_err(|e| super::args::internal("cannot encode a result", e))
}

/// Runs one file operation; blocking (call it on a blocking thread).
pub(crate) fn run(
    ws: &Arc<Workspace>,
    root: &str,
    op: &str,
    args: &Map<String, Value>,
    payload: Vec<u8>,
) -> Reply {
    match run_inner(ws, root, op, args, payload) {
        Ok((result, payload)) => Reply {
            result: Ok(result),
            payload,
        },
        Err(e) => Reply::err(e),
    }
}

fn run_inner(
    ws: &Workspace,
    root: &str,
    op: &str,
    args: &Map<String, Value>,
    payload: Vec<u8>,
) -> Result<(Value, Vec<u8>), ErrorBody> {
    let a = Args(args);
    let path =
        rules::workspace_path(root, a.required_str("path")?).map_err(|e| policy("path", e))?;
    let result = match op {
        "file.stat" => to_value(ws.stat(&path).map_err(file_error)?)?,
        "file.list" => {
            let defaults = ListOptions::default();
            let opts = ListOptions {
                max_entries: a.usize("max_entries", defaults.max_entries)?,
                depth: u32::try_from(a.u64("depth")?.unwrap_or(0)).unwrap_or(u32::MAX),
            };
            to_value(ws.list(&path, opts).map_err(file_error)?)?
        }
        "file.read" => {
            let max_len = a.usize("max_len", 1 << 20)?.min(MAX_READ_PAYLOAD);
            let opts = ReadOptions {
                offset: a.u64("offset")?.unwrap_or(0),
                max_len: Some(max_len),
            };
            let chunk = ws.read(&path, opts).map_err(file_error)?;
            let meta = json!({
                "path": chunk.path,
                "offset": chunk.offset,
                "length": chunk.data.len(),
                "total_size": chunk.total_size,
                "truncated": chunk.truncated,
                "eof": chunk.eof,
            });
            return Ok((meta, chunk.data));
        }
        "file.write" => {
            let opts = WriteOptions {
                create_parents: a.bool("create_parents")?,
            };
            to_value(ws.write(&path, &payload, opts).map_err(file_error)?)?
        }
        "file.edit" => {
            let req = EditRequest {
                old: a.required_str("old")?.to_owned(),
                new: a.str("new")?.unwrap_or_default().to_owned(),
                expected: a
                    .u64("expected")?
                    .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            };
            to_value(ws.edit(&path, &req).map_err(file_error)?)?
        }
        "file.remove" => to_value(ws.remove(&path, a.bool("recursive")?).map_err(file_error)?)?,
        "file.mkdir" => to_value(ws.mkdir(&path, a.bool("parents")?).map_err(file_error)?)?,
        "file.glob" => {
            let mut q = GlobQuery::new(path, a.required_str("pattern")?);
            q.max_results = a.usize("max_results", q.max_results)?;
            q.max_files = a.usize("max_files", q.max_files)?;
            to_value(ws.glob(&q).map_err(file_error)?)?
        }
        "file.grep" => {
            let mut q = GrepQuery::new(path, a.required_str("pattern")?);
            q.glob = a.str("glob")?.map(str::to_owned);
            q.case_insensitive = a.bool("case_insensitive")?;
            q.max_results = a.usize("max_results", q.max_results)?;
            q.max_files = a.usize("max_files", q.max_files)?;
            q.max_file_size = a.u64("max_file_size")?.unwrap_or(q.max_file_size);
            q.max_line_chars = a.usize("max_line_chars", q.max_line_chars)?;
            to_value(ws.grep(&q).map_err(file_error)?)?
        }
        _ => {
            return Err(ErrorBody::invalid(
                "op",
                format!("unknown file operation '{op}'"),
            ))
        }
    };
    Ok((result, Vec::new()))
}
