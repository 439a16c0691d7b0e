//! `mwc-agent connect`: bridges this process's stdin/stdout to the daemon's socket, so that a
//! gateway anywhere can open a channel by starting one process in the workspace.

use std::io::ErrorKind;
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;

/// Bytes moved per read: large, so the copy costs a few system calls per megabyte.
const COPY_BUFFER: usize = 256 * 1024;

/// How long `connect` waits for the daemon to listen: right after a sandbox starts, the
/// gateway's first channel may come before the daemon's socket exists. Waiting here costs the
/// gateway one exec; exiting would cost it an exec (and on Modal several calls) per retry.
const DAEMON_WAIT: Duration = Duration::from_secs(30);
const DAEMON_POLL: Duration = Duration::from_millis(25);

/// Copies until the daemon closes the connection (`Ok`), or fails with a message for stderr.
/// The end of stdin is passed on as a half-close; the copy then runs until the daemon closes.
pub async fn connect(socket: &Path) -> Result<(), String> {
    let stream = reach_daemon(socket, DAEMON_WAIT).await.map_err(|e| {
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

/// The daemon's socket, once it listens: a socket not there yet, or not accepting yet, is
/// tried again until `wait` has passed; any other failure is at once.
async fn reach_daemon(socket: &Path, wait: Duration) -> std::io::Result<UnixStream> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match UnixStream::connect(socket).await {
            Ok(stream) => return Ok(stream),
            Err(e)
                if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused)
                    && tokio::time::Instant::now() + DAEMON_POLL < deadline =>
            {
                tokio::time::sleep(DAEMON_POLL).await;
            }
            Err(e) => return Err(e),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("mwc-connect-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[tokio::test]
    async fn connect_waits_for_a_daemon_that_starts_listening_late() {
        let dir = scratch("late");
        let socket = dir.join("agent.sock");
        let late = socket.clone();
        let listener = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let listener = tokio::net::UnixListener::bind(&late).unwrap();
            listener.accept().await.map(|_| ())
        });
        assert!(reach_daemon(&socket, Duration::from_secs(10)).await.is_ok());
        listener.await.unwrap().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn connect_gives_up_after_its_wait() {
        let dir = scratch("never");
        let socket = dir.join("never.sock");
        let err = reach_daemon(&socket, Duration::from_millis(200))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
