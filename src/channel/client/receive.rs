//! What the channel does with each frame the agent sends: the Hello check, responses matched to
//! their requests, and pages taken into the stream cache (credit goes back as readers read).

use super::wire::{self, parse_header, ChannelError, ResponseView};
use super::{AgentChannel, Fed, Pending, ReceivedPage, Response};
use crate::channel::message::{ErrorCode, EventsHeader, Hello};
use crate::channel::{FrameKind, FrameRef};

impl AgentChannel {
    pub(super) fn handle(
        &mut self,
        frame: FrameRef<'_>,
        fed: &mut Fed,
    ) -> Result<(), ChannelError> {
        if self.hello.is_none() {
            return self.handle_hello(frame, fed);
        }
        match frame.kind {
            FrameKind::Response => self.handle_response(frame, fed),
            FrameKind::Events => self.handle_events(frame, fed),
            kind => Err(ChannelError::new(
                ErrorCode::Unavailable,
                format!("the agent sent an unexpected {kind:?} frame; the channel is closed"),
            )),
        }
    }

    fn handle_hello(&mut self, frame: FrameRef<'_>, fed: &mut Fed) -> Result<(), ChannelError> {
        match frame.kind {
            FrameKind::Hello => {
                let hello: Hello = parse_header(frame.kind, frame.header)?;
                wire::check_agent(&hello)?;
                self.agent_takes_keepalive = hello.keepalive;
                let json = String::from_utf8_lossy(frame.header).into_owned();
                self.hello = Some(json.clone());
                fed.hello = Some(json);
                Ok(())
            }
            // The agent refuses a gateway before its own Hello only to say why.
            FrameKind::Response => self.handle_response(frame, fed).and(Err(ChannelError::new(
                ErrorCode::Unavailable,
                "the agent answered before saying Hello; the channel is closed",
            ))),
            kind => Err(ChannelError::new(
                ErrorCode::Unavailable,
                format!("the peer's first frame was {kind:?}, not Hello: is it an agent?"),
            )),
        }
    }

    fn handle_response(&mut self, frame: FrameRef<'_>, fed: &mut Fed) -> Result<(), ChannelError> {
        let header: ResponseView<'_> = parse_header(frame.kind, frame.header)?;
        let body = match (header.ok, header.result, header.error) {
            (true, Some(result), _) => result.get().to_owned(),
            (true, None, _) => "{}".to_owned(),
            (false, _, Some(error)) => error.get().to_owned(),
            (false, _, None) => {
                ChannelError::new(ErrorCode::Internal, "the agent gave no reason").to_json()
            }
        };
        if header.id == 0 {
            // Id 0 answers no request: the agent is refusing the whole channel.
            return Err(channel_refusal(header.ok, &body));
        }
        let response = Response {
            id: header.id,
            ok: header.ok,
            body,
            payload: frame.payload.to_vec(),
        };
        match self.pending.remove(&header.id) {
            Some(Pending::Caller) => fed.responses.push(response),
            Some(Pending::Subscribe { stream, caller }) => {
                if !response.ok && self.cache.remove(&stream) {
                    wake(fed, &stream);
                }
                if caller {
                    fed.responses.push(response);
                }
            }
            Some(Pending::Internal) | None => {}
        }
        Ok(())
    }

    fn handle_events(&mut self, frame: FrameRef<'_>, fed: &mut Fed) -> Result<(), ChannelError> {
        let header: EventsHeader = parse_header(frame.kind, frame.header)?;
        if !self.cache.contains(&header.stream) {
            return Ok(());
        }
        let page = ReceivedPage::parse(frame.payload)?;
        let Some(consumed) = self
            .cache
            .consume(&header.stream, page, frame.payload.len())
        else {
            return Ok(());
        };
        if consumed?.changed {
            wake(fed, &header.stream);
        }
        Ok(())
    }
}

fn wake(fed: &mut Fed, stream: &str) {
    if !fed.woken.iter().any(|s| s == stream) {
        fed.woken.push(stream.to_owned());
    }
}

/// The agent's refusal of the channel (a response with id 0) as the channel's failure.
fn channel_refusal(ok: bool, body: &str) -> ChannelError {
    if ok {
        return ChannelError::new(
            ErrorCode::Unavailable,
            "the agent answered request id 0, which no gateway sends; the channel is closed",
        );
    }
    let (code, message) = wire::error_code(body);
    ChannelError::new(code, message)
}
