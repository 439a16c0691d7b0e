//! The `watch.*` requests: ids checked, the kinds of change to report read into the watch's
//! own filter.

use std::time::Duration;

use super::args::{policy, Args};
use crate::agent::watch::{EventKind, KindFilter};
use crate::channel::message::ErrorBody;
use crate::policy as rules;

/// `watch.cancel` and `watch.status`: the required `watch_id`, checked.
#[derive(Debug)]
pub(crate) struct WatchRef {
    pub(crate) watch_id: String,
}

impl WatchRef {
    pub(crate) fn parse(a: &Args<'_>) -> Result<Self, ErrorBody> {
        let id = a.required_str("watch_id")?;
        Ok(Self {
            watch_id: rules::check_id("fw", id).map_err(|e| policy("watch_id", e))?,
        })
    }
}

#[derive(Debug)]
pub(crate) struct WatchStartRequest {
    /// The gateway's id for the watch (a start of an id already known answers that watch).
    pub(crate) watch_id: Option<String>,
    /// As given (the root when not given); the daemon puts it under its root.
    pub(crate) path: String,
    pub(crate) kinds: KindFilter,
    pub(crate) timeout: Option<Duration>,
}

impl WatchStartRequest {
    pub(crate) fn parse(a: &Args<'_>) -> Result<Self, ErrorBody> {
        let watch_id = match a.str("watch_id")? {
            Some(id) => Some(rules::check_id("fw", id).map_err(|e| policy("watch_id", e))?),
            None => None,
        };
        let path = a.str("path")?.unwrap_or(".").to_owned();
        let kinds = match a.strings("kinds")? {
            None => KindFilter::all(),
            Some(names) => {
                let mut kinds = Vec::new();
                for name in names {
                    kinds.push(match name.as_str() {
                        "create" => EventKind::Create,
                        "modify" => EventKind::Modify,
                        "remove" => EventKind::Remove,
                        "rename" => EventKind::Rename,
                        _ => {
                            return Err(ErrorBody::invalid(
                                "kinds",
                                "kinds are create, modify, remove and rename",
                            ))
                        }
                    });
                }
                KindFilter::only(&kinds)
            }
        };
        Ok(Self {
            watch_id,
            path,
            kinds,
            timeout: a.seconds("timeout_seconds")?.filter(|t| !t.is_zero()),
        })
    }
}
