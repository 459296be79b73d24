//! The connection layer under every server here (the ledger, MCP over HTTP, the loopback
//! resolver): accepts TCP connections and serves HTTP/1.1 on each,
//! closing a connection that sits idle or sends its request head too slowly, and stops
//! gracefully on shutdown.
//!
//! axum's own `serve` sets no timer on its connections, so a client that connects and sends
//! half a request (or nothing) would hold its connection for as long as it likes. Here every
//! connection has hyper's header read timeout: the whole request head must arrive within the
//! idle timeout, counted from the connection's start or from the end of the previous answer.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// How long a stopping server lets the requests in flight finish, by default (the ledger's
/// `METABOB_LEDGER_DRAIN_MS` changes its own).
pub const DEFAULT_DRAIN_MS: u64 = 10_000;
/// The drain of the servers `serve` runs (MCP over HTTP, the loopback resolver).
pub const DRAIN: Duration = Duration::from_millis(DEFAULT_DRAIN_MS);

/// Serves `router` on `listener` until `shutdown` completes; then stops accepting, lets every
/// request in flight finish within `drain` (an idle keep-alive connection closes at once) and
/// returns.
// anchor: serve_connections
pub async fn serve_connections(
    listener: TcpListener,
    router: Router,
    idle_timeout: Duration,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    // Each connection holds a receiver; the sender's `closed()` is "every connection is done".
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut shutdown = pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                accept_failed(e).await;
                continue;
            }
        };
        // Answers are small and a client waits for each: send them without Nagle's delay.
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(idle_timeout);
            let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
            let mut stopping = false;
            let result = loop {
                tokio::select! {
                    result = conn.as_mut() => break result,
                    changed = stop.changed(), if !stopping => {
                        stopping = true;
                        // Either way the server is stopping: the sender only goes when it returns.
                        let _ = changed;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            };
            if let Err(e) = result {
                // A header timeout, a reset or a malformed request: the connection's end, not
                // the server's concern.
                tracing::debug!(%peer, "connection closed: {e}");
            }
            drop(stop);
        });
    }
    drop(listener);
    drop(stop_rx);
    let _ = stop_tx.send(true);
    if tokio::time::timeout(drain, stop_tx.closed()).await.is_err() {
        tracing::warn!(
            "requests still running after {} ms of draining; stopping without them",
            drain.as_millis()
        );
    }
}

/// A failed accept: a connection that went away before it was accepted is nothing; anything
/// else (out of file descriptors, most often) is logged, and accepting pauses for a second
/// rather than spinning on the same failure.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
    ) {
        return;
    }
    tracing::error!("accepting a connection failed: {e}; pausing for a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
