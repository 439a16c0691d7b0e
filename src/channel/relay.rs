//! Relays: a connection to the agent whose first request is `port.connect` stops being a
//! channel once it is answered, and carries raw bytes both ways between the gateway and a TCP
//! connection the agent opened to the workspace's own loopback (docs/protocol.md, "Relays").
//! This is how a preview reaches an app served inside an isolated workspace: the agent is in
//! the workspace's network namespace, so the gateway reaches nothing the workspace's own
//! processes could not, and nothing but `127.0.0.1` at a preview port.

use std::future::Future;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::message::ErrorBody;

/// The op that makes a connection a relay.
pub const RELAY_OP: &str = "port.connect";

/// What a relay's `port.connect` opens.
pub type RelayFuture = Pin<Box<dyn Future<Output = Result<TcpStream, ErrorBody>> + Send>>;

/// Carries bytes between the gateway's connection (`reader`, after `early`: what it sent past
/// the request before the answer, and `writer`) and `target`, each way until its end is read
/// and passed on as a half-close, and until both ends are done. A failed write ends both ways:
/// nobody is left to read the other.
pub async fn carry<R, W>(reader: R, early: Vec<u8>, writer: W, target: TcpStream)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (target_read, target_write) = target.into_split();
    let inbound = copy_then_close(early.as_slice().chain(reader), target_write);
    let outbound = copy_then_close(target_read, writer);
    tokio::pin!(inbound, outbound);
    let (mut inbound_done, mut outbound_done) = (false, false);
    while !(inbound_done && outbound_done) {
        let ok = tokio::select! {
            ok = &mut inbound, if !inbound_done => { inbound_done = true; ok }
            ok = &mut outbound, if !outbound_done => { outbound_done = true; ok }
        };
        if !ok {
            return;
        }
    }
}

/// Copies `from` to `to` to the end, then shuts `to` down; false when a read or write failed.
async fn copy_then_close<R, W>(mut from: R, mut to: W) -> bool
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    if tokio::io::copy(&mut from, &mut to).await.is_err() {
        return false;
    }
    to.shutdown().await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::{TcpListener, UnixStream};

    /// Bytes go both ways in order, the early ones first, and each side's end reaches the
    /// other as a half-close.
    #[tokio::test(flavor = "current_thread")]
    async fn bytes_go_both_ways_and_each_end_is_passed_on() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let app = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.expect("accept");
            let mut got = Vec::new();
            conn.read_to_end(&mut got).await.expect("read");
            conn.write_all(&got.repeat(2)).await.expect("write");
            conn.shutdown().await.expect("shutdown");
            got
        });
        let target = TcpStream::connect(address).await.expect("connect");
        let (gateway, agent) = UnixStream::pair().expect("pair");
        let (agent_read, agent_write) = agent.into_split();
        let relay = tokio::spawn(carry(agent_read, b"early ".to_vec(), agent_write, target));
        let (mut from_relay, mut to_relay) = gateway.into_split();
        to_relay.write_all(b"then late").await.expect("write");
        to_relay.shutdown().await.expect("half-close");
        let mut back = Vec::new();
        from_relay.read_to_end(&mut back).await.expect("read back");
        assert_eq!(app.await.expect("app"), b"early then late");
        assert_eq!(back, b"early then lateearly then late");
        relay.await.expect("the relay ends once both ends are done");
    }
}
