//! `mwc-agent connect`: bridges this process's stdin/stdout to the daemon's socket, so that a
//! gateway anywhere can open a channel by starting one process in the workspace.

use std::path::Path;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;

/// Bytes moved per read: large, so the copy costs a few system calls per megabyte.
const COPY_BUFFER: usize = 256 * 1024;

/// Copies until the daemon closes the connection (`Ok`), or fails with a message for stderr.
/// The end of stdin is passed on as a half-close; the copy then runs until the daemon closes.
pub async fn connect(socket: &Path) -> Result<(), String> {
    let stream = UnixStream::connect(socket).await.map_err(|e| {
        format!(
            "cannot reach the agent daemon at {}: {e} (is `mwc-agent daemon` running with this --socket?)",
            socket.display()
        )
    })?;
    let (mut from_daemon, mut to_daemon) = crate::agent::socket::split(stream)
        .map_err(|e| format!("cannot set up the daemon's socket: {e}"))?;
    let upstream = async {
        let copied = copy(&mut tokio::io::stdin(), &mut to_daemon).await;
        let _ = to_daemon.shutdown().await;
        copied
    };
    let mut stdout = tokio::io::stdout();
    let downstream = copy(&mut from_daemon, &mut stdout);
    tokio::pin!(upstream, downstream);
    let mut upstream_done = false;
    loop {
        tokio::select! {
            result = &mut downstream => {
                return result.map_err(|e| format!("writing to stdout failed: {e}"));
            }
            result = &mut upstream, if !upstream_done => {
                upstream_done = true;
                if let Err(e) = result {
                    return Err(format!("relaying stdin to the daemon failed: {e}"));
                }
            }
        }
    }
}

async fn copy<R, W>(reader: &mut R, writer: &mut W) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; COPY_BUFFER];
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            return writer.flush().await;
        }
        writer.write_all(&buf[..n]).await?;
        // Stdout buffers inside tokio: flush so each burst reaches the gateway at once.
        writer.flush().await?;
    }
}
