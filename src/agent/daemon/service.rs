//! The daemon as the channel's [`Service`]: each op of docs/protocol.md dispatched to the exec
//! registry, the watch, task and metrics streams or the file operations, and the streams
//! subscriptions read.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use super::execs::ExecRegistry;
use super::file_ops;
use super::fs_user::AsUser;
use super::metrics::MetricsStream;
use super::tasks::TaskStreams;
use super::watches::WatchStreams;
use crate::agent::exec_log::ExecLog;
use crate::agent::files::Workspace;
use crate::agent::ops::{internal, AgentRequest};
use crate::agent::process::CommandUser;
use crate::channel::message::{ErrorBody, ErrorCode, BUILD, PROTOCOL_VERSION};
use crate::channel::relay::RelayFuture;
use crate::channel::server::{Reply, ReplyFuture, Request, Service};
use crate::channel::subscription::{EventSource, RingSource, WaitFuture, WAIT_SLICE};
use crate::event::StreamKind;
use crate::ring::{Page, MAX_PAGE_EVENTS};

pub struct Daemon {
    pub(crate) root: String,
    /// See `DaemonConfig::agent_dir`; `ping` tells the gateway (where git mirrors live).
    pub(crate) agent_dir: String,
    pub(crate) askpass: Option<String>,
    pub(crate) ws: Arc<Workspace>,
    /// Where archives are staged between their steps (see `archive_ops`).
    pub(crate) staging: crate::agent::archive::Staging,
    pub(crate) execs: ExecRegistry,
    pub(crate) watches: WatchStreams,
    pub(crate) tasks: TaskStreams,
    /// The workspace's metrics stream, sampled from the daemon's start.
    pub(crate) metrics: MetricsStream,
    pub(crate) started: Instant,
    /// The user file operations run as (the commands'), when it is not the agent's.
    pub(crate) workspace_user: Option<CommandUser>,
    /// What a peer's `Hello` must carry, when the launcher gave one.
    pub(crate) channel_key: Option<String>,
    /// The tokens of running authenticated steps (see `askpass`).
    pub(crate) credentials: Arc<super::askpass::Credentials>,
}

fn ready(result: Result<Value, ErrorBody>) -> ReplyFuture {
    let reply = match result {
        Ok(v) => Reply::ok(v),
        Err(e) => Reply::err(e),
    };
    Box::pin(async move { reply })
}

impl Service for Daemon {
    fn channel_key(&self) -> Option<&str> {
        self.channel_key.as_deref()
    }

    fn relay(&self, request: Request) -> RelayFuture {
        match AgentRequest::parse(&request.op, &request.args, Vec::new()) {
            Ok(AgentRequest::PortConnect(port)) => Box::pin(super::port_relay::connect(port)),
            Ok(_) => Box::pin(async {
                Err(ErrorBody::new(
                    ErrorCode::Internal,
                    "only port.connect opens a relay",
                ))
            }),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }

    fn handle(&self, request: Request) -> ReplyFuture {
        let Request {
            op, args, payload, ..
        } = request;
        tracing::debug!(op = %op, "request");
        let request = match AgentRequest::parse(&op, &args, payload) {
            Ok(request) => request,
            Err(e) => return ready(Err(e)),
        };
        match request {
            AgentRequest::Ping => ready(Ok(json!({
                "protocol": PROTOCOL_VERSION,
                "build": BUILD,
                "root": self.root,
                "agent_dir": self.agent_dir,
                "askpass": self.askpass,
                "uptime_seconds": self.started.elapsed().as_secs_f64(),
            }))),
            AgentRequest::ExecStart(start) => ready(self.execs.start(start)),
            AgentRequest::ExecCancel(cancel) => ready(self.execs.cancel(cancel)),
            AgentRequest::ExecResize(resize) => ready(self.execs.resize(resize)),
            AgentRequest::ExecStatus(status) => ready(
                self.execs
                    .record(&status.exec_id)
                    .map(|record| record.status_with(status.command, status.report)),
            ),
            AgentRequest::ExecList => ready(Ok(json!({"execs": self.execs.list()}))),
            AgentRequest::ExecNotes => ready(Ok(json!({"execs": self.execs.open_notes()}))),
            AgentRequest::ExecSettle(exec_id) => ready(Ok(self.execs.settle_note(&exec_id))),
            AgentRequest::ExecInput(input) => match self.execs.input(input) {
                Ok(rx) => Box::pin(async move {
                    match rx.await {
                        Ok(Ok(n)) => Reply::ok(json!({"accepted": n})),
                        Ok(Err(e)) => Reply::err(e),
                        Err(_) => Reply::err(ErrorBody::new(
                            ErrorCode::Conflict,
                            "stdin is closed: the exec has ended",
                        )),
                    }
                }),
                Err(e) => ready(Err(e)),
            },
            AgentRequest::ExecRead(read) => match self.execs.read(read) {
                Ok(read) => Box::pin(async move {
                    match read.page().await {
                        Ok(page) => Reply {
                            result: Ok(json!({})),
                            payload: page.to_json().into_bytes(),
                        },
                        Err(e) => Reply::err(e),
                    }
                }),
                Err(e) => ready(Err(e)),
            },
            AgentRequest::WatchStart(start) => ready(self.watches.start(start)),
            AgentRequest::WatchCancel(watch) => ready(self.watches.cancel(&watch)),
            AgentRequest::WatchStatus(watch) => ready(self.watches.status(&watch)),
            AgentRequest::WatchList => ready(Ok(json!({"watches": self.watches.list()}))),
            AgentRequest::TaskStart(start) => ready(self.tasks.start(start)),
            AgentRequest::TaskProgress(progress) => ready(self.tasks.progress(progress)),
            AgentRequest::TaskEnd(end) => ready(self.tasks.end(end)),
            AgentRequest::TaskStatus(task) => ready(self.tasks.status(&task)),
            AgentRequest::MetricsStatus => ready(Ok(self.metrics.status())),
            AgentRequest::MetricsSet(set) => ready(self.metrics.set_interval(set.interval)),
            // Only a connection's first request opens a relay (`channel::server`): on a channel
            // that already serves, it would have no bytes to carry.
            AgentRequest::PortConnect(_) => ready(Err(ErrorBody::new(
                ErrorCode::Conflict,
                "port.connect opens a relay: send it as the first request of a connection of \
                 its own (docs/protocol.md)",
            ))),
            AgentRequest::Archive(request) => {
                let cx = super::archive_ops::ArchiveContext {
                    ws: Arc::clone(&self.ws),
                    root: self.root.clone(),
                    staging: self.staging.clone(),
                    user: self.workspace_user,
                };
                Box::pin(async move {
                    let done =
                        tokio::task::spawn_blocking(move || super::archive_ops::run(&cx, request))
                            .await;
                    done.unwrap_or_else(|e| Reply::err(internal("an archive operation failed", e)))
                })
            }
            AgentRequest::FilePatch(request) => {
                let ws = Arc::clone(&self.ws);
                let root = self.root.clone();
                let user = self.workspace_user;
                Box::pin(async move {
                    let done = tokio::task::spawn_blocking(move || {
                        let _as_user = AsUser::enter(user);
                        file_ops::run_patch(&ws, &root, request)
                    })
                    .await;
                    done.unwrap_or_else(|e| Reply::err(internal("a patch failed", e)))
                })
            }
            AgentRequest::File(file) => {
                let ws = Arc::clone(&self.ws);
                let root = self.root.clone();
                let user = self.workspace_user;
                Box::pin(async move {
                    let done = tokio::task::spawn_blocking(move || {
                        let _as_user = AsUser::enter(user);
                        file_ops::run(&ws, &root, file)
                    })
                    .await;
                    done.unwrap_or_else(|e| Reply::err(internal("a file operation failed", e)))
                })
            }
        }
    }

    fn stream(&self, id: &str) -> Result<Arc<dyn EventSource>, ErrorBody> {
        match StreamKind::of(id).ok() {
            Some(StreamKind::Watch) => {
                let entry = self.watches.entry(id)?;
                return Ok(Arc::new(RingSource(Arc::clone(&entry.ring))));
            }
            Some(StreamKind::Task) => {
                let entry = self.tasks.entry(id)?;
                return Ok(Arc::new(RingSource(Arc::clone(&entry.ring))));
            }
            Some(StreamKind::Metrics) => {
                return Ok(Arc::new(RingSource(self.metrics.entry(id)?)));
            }
            Some(StreamKind::Exec) | None => {}
        }
        // Anything else is an exec id or refused as one, with the exec id's message.
        let record = self.execs.record(id).map_err(|mut e| {
            e.field = Some("stream".into());
            e
        })?;
        Ok(Arc::new(LogSource(Arc::clone(&record.log))))
    }
}

/// An exec's log as a subscribable stream.
struct LogSource(Arc<ExecLog>);

impl EventSource for LogSource {
    fn read(&self, cursor: u64, max_bytes: usize) -> Result<Page, String> {
        self.0
            .read(cursor, MAX_PAGE_EVENTS, max_bytes)
            .map_err(|e| e.to_string())
    }

    fn ready(&self, cursor: u64) -> bool {
        self.0.ready(cursor)
    }

    fn wait(&self, cursor: u64) -> WaitFuture<'_> {
        Box::pin(async move { while !self.0.wait_async(cursor, WAIT_SLICE).await {} })
    }
}
