//! The connection layer under every server here (the ledger, MCP over HTTP, the loopback
//! resolver): accepts TCP connections and serves HTTP/1.1 on each,
//! closing a connection that sits idle or sends its request head too slowly, and stops
//! gracefully on shutdown.
//!
//! axum's own `serve` sets no timer on its connections, so a client that connects and sends
//! half a request (or nothing) would hold its connection for as long as it likes. Here every
//! connection has hyper's header read timeout: the whole request head must arrive within the
//! idle timeout, counted from the connection's start or from the end of the previous answer.

mod cap;
pub mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::{Body, Frame, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;

use cap::{Admitted, Busy, Table};
pub use cap::{MAX_CONNECTIONS, RESERVED_FDS, default_cap, open_fds, raise_fd_limit};
pub use tls::{ServerTls, TlsFileError};

/// How long a stopping server lets the requests in flight finish, by default (the ledger's
/// `METABOB_LEDGER_DRAIN_MS` changes its own).
pub const DEFAULT_DRAIN_MS: u64 = 10_000;
/// The drain of the servers `serve` runs (MCP over HTTP, the loopback resolver).
pub const DRAIN: Duration = Duration::from_millis(DEFAULT_DRAIN_MS);

/// How a server treats its connections.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The most a request head (and a TLS handshake) may take, and a connection sit idle.
    pub idle_timeout: Duration,
    /// On shutdown, how long the requests in flight may finish.
    pub drain: Duration,
    /// Open connections at most (`cap`): past it the one idle longest is closed.
    pub max_connections: usize,
    /// HTTPS with this certificate; plain HTTP when `None`.
    pub tls: Option<Arc<ServerTls>>,
}

impl ServeConfig {
    /// Plain HTTP, with a cap drawn from this process's descriptor limit.
    pub fn plain(idle_timeout: Duration, drain: Duration) -> ServeConfig {
        ServeConfig {
            idle_timeout,
            drain,
            max_connections: default_cap(raise_fd_limit(), open_fds() + RESERVED_FDS),
            tls: None,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes; then stops accepting, lets every
/// request in flight finish within the drain (an idle keep-alive connection closes at once) and
/// returns.
// anchor: serve_connections
pub async fn serve_connections(
    listener: TcpListener,
    router: Router,
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
) {
    // Each connection holds a receiver; the sender's `closed()` is "every connection is done".
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let table = Table::new(config.max_connections);
    let mut shutdown = pin!(shutdown);
    let mut refused_logged = false;
    loop {
        let accepted = tokio::select! {
            accepted = async {
                table.room().await;
                listener.accept().await
            } => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                accept_failed(e).await;
                continue;
            }
        };
        let Some(admitted) = table.admit() else {
            // Every connection is running a request: this one is closed at once rather than
            // left waiting behind them.
            if !refused_logged {
                tracing::warn!(
                    "{} connections are all running requests; closing new ones until one \
                     finishes (raise --max-connections)",
                    config.max_connections
                );
                refused_logged = true;
            }
            continue;
        };
        // Answers are small and a client waits for each: send them without Nagle's delay.
        let _ = stream.set_nodelay(true);
        let (router, stop, config) = (router.clone(), stop_rx.clone(), config.clone());
        tokio::spawn(async move {
            let shed = admitted.shed.clone();
            tokio::select! {
                () = connection(stream, router, &config, stop, &admitted) => {}
                () = shed.notified() => {
                    tracing::debug!(%peer, "idle connection closed to make room for a new one");
                }
            }
            drop(admitted);
        });
    }
    drop(listener);
    drop(stop_rx);
    let _ = stop_tx.send(true);
    if tokio::time::timeout(config.drain, stop_tx.closed())
        .await
        .is_err()
    {
        tracing::warn!(
            "requests still running after {} ms of draining; stopping without them",
            config.drain.as_millis()
        );
    }
}

/// One connection, from the TLS handshake (when served) to its end; `stop` is held until then.
async fn connection(
    stream: tokio::net::TcpStream,
    router: Router,
    config: &ServeConfig,
    stop: tokio::sync::watch::Receiver<bool>,
    admitted: &Admitted,
) {
    let Some(tls) = &config.tls else {
        return http(stream, router, config.idle_timeout, stop, admitted).await;
    };
    match tokio::time::timeout(config.idle_timeout, tls.acceptor().accept(stream)).await {
        Ok(Ok(stream)) => http(stream, router, config.idle_timeout, stop, admitted).await,
        // A client that does not speak TLS, or gives up: its end, not the server's concern.
        Ok(Err(e)) => tracing::debug!("TLS handshake failed: {e}"),
        Err(_) => tracing::debug!("TLS handshake did not finish in time"),
    }
}

async fn http<I>(
    io: I,
    router: Router,
    idle_timeout: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
    admitted: &Admitted,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let inner = TowerToHyperService::new(router);
    // Each request marks the connection busy until its answer has been written, so it is never
    // shed mid-answer.
    let service = hyper::service::service_fn(move |req| {
        let busy = admitted.request();
        let answer = hyper::service::Service::call(&inner, req);
        async move {
            let resp = answer
                .await
                .unwrap_or_else(|never: Infallible| match never {});
            Ok::<_, Infallible>(resp.map(|body| Guarded { body, _busy: busy }))
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(idle_timeout);
    let mut conn = pin!(builder.serve_connection(TokioIo::new(io), service));
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
        // A header timeout, a reset or a malformed request: the connection's end, not the
        // server's concern.
        tracing::debug!("connection closed: {e}");
    }
}

/// An answer's body, holding its connection busy until hyper has written it all.
struct Guarded<B> {
    body: B,
    _busy: Busy,
}

impl<B: Body + Unpin> Body for Guarded<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
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
