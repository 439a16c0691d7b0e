//! The `file.*` requests: the path put under the daemon's root and checked lexically by the
//! policy, the contained `files` operation run (on a blocking thread), and the result's paths
//! said under `/workspace`.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::agent::files::{GlobQuery, GrepQuery, Workspace};
use crate::agent::ops::{file_error, internal, policy, shown_path, under_root};
use crate::agent::ops::{FileOp, FileRequest, PatchRequest};
use crate::channel::message::ErrorBody;
use crate::channel::server::Reply;
use crate::patch::Patch;
use crate::policy as rules;

fn to_value<T: serde::Serialize>(v: T) -> Result<Value, ErrorBody> {
    serde_json::to_value(v).map_err(|e| internal("cannot encode a result", e))
}

/// Runs one file operation; blocking (call it on a blocking thread).
pub(crate) fn run(ws: &Arc<Workspace>, root: &str, request: FileRequest) -> Reply {
    match run_inner(ws, root, request) {
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
    request: FileRequest,
) -> Result<(Value, Vec<u8>), ErrorBody> {
    let FileRequest { path, op } = request;
    let path = rules::workspace_path(root, &under_root(&path)).map_err(|e| policy("path", e))?;
    let result = match op {
        FileOp::Stat => {
            let mut stat = ws.stat(&path).map_err(file_error)?;
            stat.path = shown_path(&stat.path);
            to_value(stat)?
        }
        FileOp::List(options) => {
            let mut listing = ws.list(&path, options).map_err(file_error)?;
            listing.path = shown_path(&listing.path);
            for entry in &mut listing.entries {
                entry.path = shown_path(&entry.path);
            }
            to_value(listing)?
        }
        FileOp::Read(options) => {
            let chunk = ws.read(&path, options).map_err(file_error)?;
            let meta = json!({
                "path": shown_path(&chunk.path),
                "offset": chunk.offset,
                "length": chunk.data.len(),
                "total_size": chunk.total_size,
                "truncated": chunk.truncated,
                "eof": chunk.eof,
            });
            return Ok((meta, chunk.data));
        }
        FileOp::Write { options, content } => {
            let mut outcome = ws.write(&path, &content, options).map_err(file_error)?;
            outcome.path = shown_path(&outcome.path);
            to_value(outcome)?
        }
        FileOp::Edit(edit) => {
            let mut outcome = ws.edit(&path, &edit).map_err(file_error)?;
            outcome.path = shown_path(&outcome.path);
            to_value(outcome)?
        }
        FileOp::Remove { recursive } => {
            let mut outcome = ws.remove(&path, recursive).map_err(file_error)?;
            outcome.path = shown_path(&outcome.path);
            to_value(outcome)?
        }
        FileOp::Mkdir { parents } => {
            let mut outcome = ws.mkdir(&path, parents).map_err(file_error)?;
            outcome.path = shown_path(&outcome.path);
            to_value(outcome)?
        }
        FileOp::Glob(options) => {
            let mut q = GlobQuery::new(path, options.pattern);
            q.max_results = options.max_results.unwrap_or(q.max_results);
            q.max_files = options.max_files.unwrap_or(q.max_files);
            shown_hits(ws.glob(&q).map_err(file_error)?)?
        }
        FileOp::Grep(options) => {
            let mut q = GrepQuery::new(path, options.pattern);
            q.glob = options.glob;
            q.case_insensitive = options.case_insensitive;
            q.max_results = options.max_results.unwrap_or(q.max_results);
            q.max_files = options.max_files.unwrap_or(q.max_files);
            q.max_file_size = options.max_file_size.unwrap_or(q.max_file_size);
            q.max_line_chars = options.max_line_chars.unwrap_or(q.max_line_chars);
            shown_hits(ws.grep(&q).map_err(file_error)?)?
        }
    };
    Ok((result, Vec::new()))
}

/// Runs one patch: parsed, every path put under the daemon's root and checked by the policy,
/// then applied all or nothing; blocking (call it on a blocking thread).
pub(crate) fn run_patch(ws: &Workspace, root: &str, request: PatchRequest) -> Reply {
    let refused = |e: rules::PolicyError| ErrorBody::invalid("patch", e.message);
    let applied = (|| {
        let mut patch = Patch::parse(&request.text, request.format).map_err(refused)?;
        patch
            .check_paths(root, |p| rules::workspace_path(root, &under_root(p)))
            .map_err(refused)?;
        let mut outcome = ws.patch(&patch).map_err(file_error)?;
        for file in &mut outcome.files {
            file.path = shown_path(&file.path);
            file.to = file.to.as_deref().map(shown_path);
        }
        let mut result = to_value(outcome)?;
        result["format"] = json!(patch.format.name());
        Ok(result)
    })();
    match applied {
        Ok(result) => Reply {
            result: Ok(result),
            payload: Vec::new(),
        },
        Err(e) => Reply::err(e),
    }
}

fn shown_hits(mut result: crate::agent::files::SearchResult) -> Result<Value, ErrorBody> {
    for hit in &mut result.hits {
        hit.path = shown_path(&hit.path);
    }
    to_value(result)
}
