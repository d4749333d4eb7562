//! The service's connections: HTTP/1.1 over hyper with a deadline for a request's headers, at
//! most so many connections at once (one more is answered 503 and closed), and a graceful
//! shutdown that waits for the requests in flight for at most a deadline, then closes what is
//! left: a client that sends half a request and stalls holds neither a connection for long nor
//! the shutdown. The body's deadline is the [`super::api::gate`]'s, which reads bodies.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

/// The deadlines and the connection limit.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub(super) header_timeout: Duration,
    pub(super) max_connections: usize,
    pub(super) shutdown_timeout: Duration,
}

/// Serves `app` on `listener` until `stop` turns true, then shuts down within the deadline.
pub(super) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped(&mut stop) => break,
        };
        while connections.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, or a connection reset before it was taken: the
                // listener goes on after a breath.
                tracing::warn!(error = %e, "a connection could not be accepted");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::debug!(
                limit = limits.max_connections,
                "a connection over the limit is answered 503"
            );
            connections.spawn(refuse(stream, limits.max_connections));
            continue;
        };
        let (app, mut stop) = (app.clone(), stop.clone());
        connections.spawn(async move {
            let _permit = permit;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            let connection =
                builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = stopped(&mut stop) => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    drop(listener);
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(limits.shutdown_timeout, drained)
        .await
        .is_err()
    {
        tracing::warn!(
            open = connections.len(),
            deadline_ms = limits.shutdown_timeout.as_millis() as u64,
            "connections still open at the shutdown deadline are closed"
        );
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
    Ok(())
}

/// Open files the process keeps beside its connections (the database, the journal, the model's
/// and the callbacks' connections).
const RESERVED_FILES: usize = 128;

/// The connection limit the process's open-file limit allows: `wanted`, or less when the soft
/// limit (`ulimit -n`, read from `/proc/self/limits`) leaves fewer files than that beside
/// [`RESERVED_FILES`], said on stderr; so that connections over the limit are answered 503
/// instead of the service running out of files and answering nobody.
pub(super) fn fit_to_file_limit(wanted: usize) -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| soft_file_limit(&text));
    match soft {
        Some(soft) if soft.saturating_sub(RESERVED_FILES) < wanted => {
            let fits = soft.saturating_sub(RESERVED_FILES).max(1);
            tracing::warn!(
                wanted,
                open_file_limit = soft,
                connections = fits,
                "the open-file limit (ulimit -n) leaves room for fewer connections than asked: the limit is lowered to fit"
            );
            fits
        }
        _ => wanted,
    }
}

/// The soft limit of open files in the text of `/proc/self/limits` (`None`: unlimited or not
/// found).
fn soft_file_limit(text: &str) -> Option<usize> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Resolves once `stop` is true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Answers a connection over the limit with a 503 and closes it (within a second).
async fn refuse(mut stream: TcpStream, limit: usize) {
    let body = serde_json::json!({
        "ok": false,
        "error": format!("the service has {limit} connections open, its limit (--max-connections); try again later"),
    })
    .to_string();
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        stream.write_all(reply.as_bytes()).await?;
        stream.shutdown().await?;
        // What the client sent is read and dropped, so that closing does not reset the
        // connection before the client read the answer.
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_limit_of_open_files_is_read() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \nMax cpu time              unlimited            unlimited            seconds   \nMax open files            1024                 524288               files     \n";
        assert_eq!(super::soft_file_limit(text), Some(1024));
        assert_eq!(
            super::soft_file_limit("Max open files unlimited unlimited files"),
            None
        );
        assert_eq!(super::soft_file_limit(""), None);
    }
}
