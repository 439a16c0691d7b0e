//! What a relay connection (`port.connect`, `channel::relay`) carries bytes to: a TCP
//! connection the daemon opens, from inside the workspace's network namespace, to a port on
//! the workspace's own loopback. Only loopback, only a preview port (the core's rule, already
//! applied to the request): nothing a client or the workspace says can point it elsewhere.

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpStream;

use crate::channel::message::{ErrorBody, ErrorCode};

/// How long a connection may take to open: on loopback it is at once or never.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to `port` on the workspace's loopback: 127.0.0.1, else ::1 (a server that
/// listens on `localhost` may have taken either).
pub(crate) async fn connect(port: u16) -> Result<TcpStream, ErrorBody> {
    let mut last = None;
    for ip in [
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ] {
        let address = SocketAddr::new(ip, port);
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => {
                // Small writes (a WebSocket's frames) go at once.
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = Some(e),
            Err(_) => {
                return Err(ErrorBody::new(
                    ErrorCode::Timeout,
                    format!("port {port} in the workspace did not accept a connection in time"),
                ))
            }
        }
    }
    let why = match last {
        Some(e)
            if matches!(
                e.kind(),
                ErrorKind::ConnectionRefused | ErrorKind::AddrNotAvailable
            ) =>
        {
            "nothing listens on it".to_owned()
        }
        Some(e) => e.to_string(),
        None => "no address was tried".to_owned(),
    };
    Err(ErrorBody::new(
        ErrorCode::Unavailable,
        format!("cannot connect to port {port} in the workspace: {why}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[tokio::test(flavor = "current_thread")]
    async fn connects_to_a_listener_on_loopback() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let stream = connect(port).await.expect("connect");
        assert!(stream.peer_addr().expect("peer").ip().is_loopback());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_port_nothing_listens_on_is_unavailable() {
        // Bound and dropped: nothing listens there now.
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            listener.local_addr().expect("address").port()
        };
        let e = connect(port).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(e.message.contains("nothing listens"), "{e}");
    }
}
