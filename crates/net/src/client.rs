//! The request path: first-hop TCP connect, the proxy's CONNECT, TLS, then one HTTP/1.1
//! exchange over hyper's connection API. Each step is ours so that every failure can be
//! named from what the network actually did (see `NetCause`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout_at};
use tokio_rustls::TlsConnector;

use super::cause::{NetCause, NetError, Portal, Target};
use super::proxy::{Hop, ProxyDiagnosis, ProxySettings, Route, RouteReason};
use super::tls::{self, TlsInfo};
use super::url::{Scheme, Url};
use metabob_process::env::Env;

// anchor: connect-budget
pub const DEFAULT_CONNECT_BUDGET: Duration = Duration::from_secs(5);
pub const DEFAULT_RESPONSE_BUDGET: Duration = Duration::from_secs(5);
/// A substrate answer is JSON measured in kilobytes; anything near this is not one.
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
// Any page of rows the ledger answers fits, whatever its rows hold (JSON escapes a byte into at
// most six), with room for the envelope.
const _: () = assert!(6 * metabob_wire::row::PAGE_BYTES + 2 * 1024 * 1024 < MAX_BODY_BYTES);
/// Pauses before the second and third attempts.
pub const RETRY_DELAYS: [Duration; 2] = [Duration::from_millis(250), Duration::from_millis(750)];
const MAX_CONNECT_ANSWER: usize = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
}

impl Method {
    fn as_hyper(self) -> hyper::Method {
        match self {
            Method::Get => hyper::Method::GET,
            Method::Post => hyper::Method::POST,
        }
    }
}

/// Which failures a request may be repeated after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    Never,
    /// Transient failures: a reset connection, a proxy's 5xx to CONNECT.
    Idempotent,
    /// As `Idempotent`, and a 502/503/504 answer too (discovery's bootstrap).
    IdempotentAndGateway,
}

#[derive(Clone)]
pub struct Request {
    pub method: Method,
    pub url: Url,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    /// The response budget: the whole request, retries included.
    pub budget: Duration,
    pub retry: Retry,
}

// Header values carry API keys; a Request printed into a log must show only their names.
impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("url", &self.url)
            .field("headers", &names)
            .field("body_bytes", &self.body.as_ref().map(Vec::len))
            .field("budget", &self.budget)
            .field("retry", &self.retry)
            .finish()
    }
}

impl Request {
    pub fn get(url: Url) -> Self {
        Request {
            method: Method::Get,
            url,
            headers: Vec::new(),
            body: None,
            budget: DEFAULT_RESPONSE_BUDGET,
            retry: Retry::Idempotent,
        }
    }

    pub fn post_json(url: Url, body: &serde_json::Value) -> Self {
        Request {
            method: Method::Post,
            url,
            headers: vec![("content-type".into(), "application/json".into())],
            body: Some(body.to_string().into_bytes()),
            budget: DEFAULT_RESPONSE_BUDGET,
            retry: Retry::Never,
        }
    }

    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let name = name.into();
        self.headers.retain(|(k, _)| !k.eq_ignore_ascii_case(&name));
        self.headers.push((name, value.into()));
        self
    }

    pub fn budget(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }

    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }
}

#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    /// Names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub route: Route,
    pub tls: Option<TlsInfo>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON; `None` when it is not JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// A page rather than data: an HTML content type, or a body that opens with a tag.
    pub fn is_html(&self) -> bool {
        self.header("content-type")
            .is_some_and(|c| c.to_ascii_lowercase().contains("html"))
            || self.body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'<')
    }
}

/// One attempt's failure, before it becomes a `NetError`.
struct Failure {
    cause: NetCause,
    /// Worth another attempt if the request allows it.
    transient: bool,
    tls: Option<TlsInfo>,
}

impl Failure {
    fn fatal(cause: NetCause) -> Self {
        Failure {
            cause,
            transient: false,
            tls: None,
        }
    }
    fn transient(cause: NetCause) -> Self {
        Failure {
            cause,
            transient: true,
            tls: None,
        }
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type BoxIo = Box<dyn Io>;

struct Inner {
    proxies: ProxySettings,
    connect_budget: Duration,
    /// Trust is assembled on the first TLS handshake: reading the OS store costs milliseconds
    /// that a plain-http attachment (the local ledger) should not pay.
    trust_env: Env,
    verifier: std::sync::OnceLock<Arc<WebPkiServerVerifier>>,
}

/// The HTTP client every substrate request goes through. Cloning shares one configuration.
#[derive(Clone)]
pub struct NetClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for NetClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetClient")
            .field("proxies", &self.inner.proxies.diagnosis())
            .field("connect_budget", &self.inner.connect_budget)
            .finish()
    }
}

impl NetClient {
    /// Reads proxies, NO_PROXY, the connect budget and trust from the snapshot. A proxy
    /// setting that does not parse is reported per request, so building never fails.
    pub fn from_env(env: &Env) -> NetClient {
        let connect_budget = env
            .get("METABOB_CONNECT_TIMEOUT_MS")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis)
            .unwrap_or(DEFAULT_CONNECT_BUDGET);
        NetClient {
            inner: Arc::new(Inner {
                proxies: ProxySettings::from_env(env),
                connect_budget,
                trust_env: env.clone(),
                verifier: std::sync::OnceLock::new(),
            }),
        }
    }

    pub fn route_for(&self, url: &Url) -> Result<Route, NetCause> {
        self.inner.proxies.select(url).map(|(_, route)| route)
    }

    pub fn proxy_diagnosis(&self) -> ProxyDiagnosis {
        self.inner.proxies.diagnosis()
    }

    pub fn connect_budget(&self) -> Duration {
        self.inner.connect_budget
    }

    /// The verifier every handshake of this client shares, built on first use.
    fn verifier(&self) -> &Arc<WebPkiServerVerifier> {
        self.inner
            .verifier
            .get_or_init(|| tls::base_verifier(&self.inner.trust_env))
    }

    /// This client's trust for a transport that makes its own connections (gix's smart HTTP,
    /// for clone and fetch): the roots and verifier `send` uses, and the witness that names
    /// a refused chain afterwards.
    pub fn tls_for_transport(&self) -> (rustls::ClientConfig, tls::TlsWitness) {
        tls::config_for_transport(self.verifier())
    }

    /// The proxy a request to `target` goes through, credentials included, or `None` for
    /// direct: the choice `send` makes, for a transport that makes its own connections.
    pub fn proxy_for(&self, target: &Url) -> Result<Option<Url>, NetCause> {
        match self.inner.proxies.select(target)? {
            (Hop::Proxy(proxy), _) => Ok(Some(proxy)),
            (Hop::Direct, _) => Ok(None),
        }
    }

    // anchor: send
    /// Sends `req` once, or up to three times when its retry policy and the failure allow,
    /// never past its budget. Redirects are returned, not followed.
    pub async fn send(&self, req: Request) -> Result<Response, NetError> {
        let (hop, route) = match self.inner.proxies.select(&req.url) {
            Ok(selected) => selected,
            Err(cause) => {
                let route = Route {
                    via: None,
                    reason: RouteReason::Proxy,
                };
                return Err(NetError {
                    cause,
                    route,
                    tls: None,
                });
            }
        };
        let deadline = Instant::now() + req.budget;
        let mut attempt = 0;
        loop {
            let outcome = self.attempt(&req, &hop, &route, deadline).await;
            let delay = RETRY_DELAYS.get(attempt).copied();
            let may_wait = delay.filter(|d| Instant::now() + *d < deadline);
            match outcome {
                Ok(resp) => {
                    let gateway = matches!(resp.status, 502..=504);
                    match may_wait {
                        Some(d) if gateway && req.retry == Retry::IdempotentAndGateway => {
                            tracing::debug!(url = %req.url, status = resp.status, "retrying after a gateway answer");
                            sleep(d).await;
                        }
                        _ => return Ok(resp),
                    }
                }
                Err(f) => match may_wait {
                    Some(d) if f.transient && req.retry != Retry::Never => {
                        tracing::debug!(url = %req.url, cause = %f.cause, "retrying after a transient failure");
                        sleep(d).await;
                    }
                    _ => {
                        return Err(NetError {
                            cause: f.cause,
                            route,
                            tls: f.tls,
                        });
                    }
                },
            }
            attempt += 1;
        }
    }

    async fn attempt(
        &self,
        req: &Request,
        hop: &Hop,
        route: &Route,
        deadline: Instant,
    ) -> Result<Response, Failure> {
        let first = match hop {
            Hop::Direct => &req.url,
            Hop::Proxy(p) => p,
        };
        let connect_deadline = (Instant::now() + self.inner.connect_budget).min(deadline);
        let (stream, tls) = timeout_at(connect_deadline, self.connect(&req.url, hop))
            .await
            .map_err(|_| Failure::fatal(NetCause::ConnectTimeout(first.target())))??;
        let ms = req.budget.as_millis() as u64;
        let exchanged = timeout_at(deadline, exchange(stream, req, hop, &first.host)).await;
        let (status, headers, body) = match exchanged {
            Ok(Ok(parts)) => parts,
            Ok(Err(mut f)) => {
                f.tls = tls;
                return Err(f);
            }
            Err(_) => {
                let cause = NetCause::ResponseTimeout {
                    host: req.url.host.clone(),
                    ms,
                };
                return Err(Failure {
                    cause,
                    transient: false,
                    tls,
                });
            }
        };
        // A proxy asked for a plain-http target in absolute form answers 407 in place of the
        // target; that answer is the proxy's, not the substrate's.
        if let (Hop::Proxy(p), Scheme::Http, 407) = (hop, req.url.scheme, status) {
            return Err(Failure::fatal(NetCause::ProxyAuthRequired {
                schemes: auth_schemes(&headers),
                had_credentials: p.has_credentials(),
            }));
        }
        Ok(Response {
            status,
            headers,
            body,
            route: route.clone(),
            tls,
        })
    }

    async fn connect(&self, url: &Url, hop: &Hop) -> Result<(BoxIo, Option<TlsInfo>), Failure> {
        let proxy = match hop {
            Hop::Direct => None,
            Hop::Proxy(p) => Some(p),
        };
        let first = proxy.unwrap_or(url);
        let mut stream: BoxIo = Box::new(tcp_connect(first).await?);
        if let Some(p) = proxy {
            if p.scheme == Scheme::Https {
                stream = self.handshake(stream, p, false).await?.0;
            }
            if url.scheme == Scheme::Https {
                stream = open_tunnel(stream, url, p).await?;
            }
        }
        if url.scheme == Scheme::Https {
            let (stream, info) = self.handshake(stream, url, proxy.is_some()).await?;
            return Ok((stream, Some(info)));
        }
        Ok((stream, None))
    }

    // anchor: tls-handshake
    /// Completes TLS with `peer` so that chain and name are verified before any request byte.
    async fn handshake(
        &self,
        stream: BoxIo,
        peer: &Url,
        tunneled: bool,
    ) -> Result<(BoxIo, TlsInfo), Failure> {
        let (config, seen) = tls::config_for_handshake(self.verifier());
        let Ok(name) = ServerName::try_from(peer.host.clone()) else {
            return Err(Failure::fatal(NetCause::TlsFailed(peer.target())));
        };
        let result = TlsConnector::from(config).connect(name, stream).await;
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        let info = |authorized| TlsInfo {
            host: peer.host.clone(),
            authorized,
            issuer: seen.issuer.clone(),
        };
        match result {
            Ok(s) => Ok((Box::new(s), info(true))),
            Err(e) => {
                let not_tls = e
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                    .is_some_and(|r| matches!(r, rustls::Error::InvalidMessage(_)));
                let cause = if seen.error.is_some() {
                    tls::classify_handshake(&seen, &peer.target())
                } else if tunneled && not_tls {
                    NetCause::BlockedByPortal(Portal::NotTlsInTunnel {
                        target: peer.target(),
                    })
                } else {
                    tracing::debug!(peer = %peer.host_port(), "TLS handshake failed: {e}");
                    NetCause::TlsFailed(peer.target())
                };
                Err(Failure {
                    cause,
                    transient: false,
                    tls: Some(info(false)),
                })
            }
        }
    }
}

async fn tcp_connect(first: &Url) -> Result<TcpStream, Failure> {
    let hop = first.target();
    let addrs: Vec<_> = match tokio::net::lookup_host((first.host.as_str(), first.port)).await {
        Ok(addrs) => addrs.collect(),
        Err(e) => {
            tracing::debug!(host = %first.host, "name lookup failed: {e}");
            Vec::new()
        }
    };
    if addrs.is_empty() {
        return Err(Failure::fatal(NetCause::DnsFailed {
            host: first.host.clone(),
        }));
    }
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(s) => {
                // Requests are small and written once; waiting to coalesce them only adds latency.
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    let cause = match last.map(|e| e.kind()) {
        Some(std::io::ErrorKind::ConnectionRefused) => NetCause::ConnectRefused(hop),
        Some(std::io::ErrorKind::TimedOut) => NetCause::ConnectTimeout(hop),
        _ => NetCause::AnchorUnreachable(hop),
    };
    Err(Failure::fatal(cause))
}

fn proxy_authorization(proxy: &Url) -> Option<String> {
    use base64::Engine as _;
    if !proxy.has_credentials() {
        return None;
    }
    let user = proxy.username.as_deref().unwrap_or_default();
    let pass = proxy.password.as_deref().unwrap_or_default();
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
    Some(format!("Basic {token}"))
}

// anchor: connect-tunnel
/// Asks the proxy for a tunnel to the target by name (the proxy resolves it) and names
/// whatever it answers instead of one.
async fn open_tunnel(mut stream: BoxIo, target: &Url, proxy: &Url) -> Result<BoxIo, Failure> {
    let hp = target.host_port();
    let mut head = format!(
        "CONNECT {hp} HTTP/1.1\r\nHost: {hp}\r\nUser-Agent: {}\r\n",
        metabob_wire::CLIENT
    );
    if let Some(auth) = proxy_authorization(proxy) {
        head.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    head.push_str("\r\n");
    let reset_cause = || NetCause::ConnectionReset {
        host: proxy.host.clone(),
    };
    let reset = |_| Failure::transient(reset_cause());
    stream.write_all(head.as_bytes()).await.map_err(reset)?;
    stream.flush().await.map_err(reset)?;

    let not_http = || {
        Failure::fatal(NetCause::BlockedByPortal(Portal::ConnectNotHttp {
            target: target.target(),
        }))
    };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() >= 5 && !buf.starts_with(b"HTTP/") {
            return Err(not_http());
        }
        if buf.len() > MAX_CONNECT_ANSWER {
            return Err(not_http());
        }
        let n = stream.read(&mut chunk).await.map_err(reset)?;
        if n == 0 {
            return Err(if buf.is_empty() || buf.starts_with(b"HTTP/") {
                Failure::transient(reset_cause())
            } else {
                not_http()
            });
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(not_http)?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let leftover = buf.len() > end;

    match status {
        200..=299 if !leftover => Ok(stream),
        200..=299 => Err(Failure::fatal(NetCause::BlockedByPortal(
            Portal::PageAfterConnect {
                target: target.target(),
            },
        ))),
        // Only the proxy can answer CONNECT, so a 401 is its own too: tinyproxy 1.11 answers
        // rejected credentials that way, with WWW-Authenticate instead of Proxy-Authenticate.
        401 | 407 => Err(Failure::fatal(NetCause::ProxyAuthRequired {
            schemes: auth_schemes(&headers),
            had_credentials: proxy.has_credentials(),
        })),
        403 | 405 if target.port != 443 => {
            Err(Failure::fatal(NetCause::ProxyPortBlocked(target.port)))
        }
        500..=599 => Err(Failure::transient(NetCause::AnchorUnreachable(
            target.target(),
        ))),
        _ => {
            let has_page = leftover
                || headers.iter().any(|(k, v)| {
                    (k == "content-length" && v != "0")
                        || k == "content-type"
                        || k == "transfer-encoding"
                });
            Err(Failure::fatal(if has_page {
                NetCause::BlockedByPortal(Portal::ConnectPage {
                    target: target.target(),
                    status,
                })
            } else {
                NetCause::AnchorUnreachable(target.target())
            }))
        }
    }
}

/// The scheme of each Proxy-Authenticate challenge, in the proxy's order, once each.
fn auth_schemes(headers: &[(String, String)]) -> Vec<String> {
    let mut schemes: Vec<String> = Vec::new();
    let challenges = |name: &'static str| headers.iter().filter(move |(k, _)| k == name);
    let mut list: Vec<_> = challenges("proxy-authenticate").collect();
    if list.is_empty() {
        list = challenges("www-authenticate").collect();
    }
    for (_, v) in list {
        if let Some(s) = v.split_whitespace().next().map(|s| s.trim_end_matches(',')) {
            if !schemes.iter().any(|x| x.eq_ignore_ascii_case(s)) {
                schemes.push(s.to_string());
            }
        }
    }
    schemes
}

/// Aborts the connection task when the exchange ends, however it ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);
impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

type Parts = (u16, Vec<(String, String)>, Vec<u8>);

/// One request and its complete answer over an established stream.
async fn exchange(
    stream: BoxIo,
    req: &Request,
    hop: &Hop,
    first_host: &str,
) -> Result<Parts, Failure> {
    let url = &req.url;
    let fail = |e: hyper::Error| classify_hyper(e, first_host, &url.target());
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream))
            .await
            .map_err(fail)?;
    let _conn = AbortOnDrop(tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("connection ended: {e}");
        }
    }));

    // A plain-http target behind a proxy is asked for in absolute form; everything else,
    // including https through a tunnel, speaks to the origin directly.
    let proxy = match hop {
        Hop::Proxy(p) if url.scheme == Scheme::Http => Some(p),
        _ => None,
    };
    let target = match proxy {
        Some(_) => format!("http://{}{}", url.host_header(), url.path),
        None => url.path.clone(),
    };
    let mut builder = hyper::Request::builder()
        .method(req.method.as_hyper())
        .uri(target);
    let has = |name: &str| {
        req.headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case(name))
    };
    if !has("host") {
        builder = builder.header("host", url.host_header());
    }
    if !has("user-agent") {
        builder = builder.header("user-agent", metabob_wire::CLIENT);
    }
    if let Some(auth) = proxy.and_then(proxy_authorization) {
        builder = builder.header("proxy-authorization", auth);
    }
    for (k, v) in &req.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let body = Full::new(Bytes::from(req.body.clone().unwrap_or_default()));
    let request = builder.body(body).map_err(|e| {
        tracing::warn!("request for {url} could not be built: {e}");
        Failure::fatal(NetCause::AnchorUnreachable(url.target()))
    })?;

    let resp = sender.send_request(request).await.map_err(fail)?;
    let status = resp.status().as_u16();
    let headers: Vec<(String, String)> = resp
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let too_large = || {
        Failure::fatal(NetCause::ResponseTooLarge {
            host: url.host_port(),
            limit: MAX_BODY_BYTES,
        })
    };
    let declared = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let mut body = resp.into_body();
    let mut buf = Vec::with_capacity(declared.unwrap_or(0) as usize);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(fail)?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > MAX_BODY_BYTES {
                return Err(too_large());
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok((status, headers, buf))
}

/// Names a hyper failure: garbage instead of HTTP is a portal's doing, a cut connection is
/// a reset (worth retrying), anything else leaves the target unreached.
fn classify_hyper(e: hyper::Error, first_host: &str, target: &Target) -> Failure {
    tracing::debug!(target_host = %target, "HTTP exchange failed: {e}");
    if e.is_parse() || e.is_parse_status() || e.is_parse_too_large() {
        return Failure::fatal(NetCause::BlockedByPortal(Portal::NotHttp {
            target: target.clone(),
        }));
    }
    let io_reset = std::error::Error::source(&e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .is_some_and(|io| {
            use std::io::ErrorKind::*;
            matches!(
                io.kind(),
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
            )
        });
    if e.is_incomplete_message() || e.is_canceled() || e.is_closed() || io_reset {
        return Failure::transient(NetCause::ConnectionReset {
            host: first_host.to_string(),
        });
    }
    Failure::fatal(NetCause::AnchorUnreachable(target.clone()))
}
