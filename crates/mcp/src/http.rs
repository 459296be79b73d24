//! MCP over HTTP, `serve --http ADDR` (SPEC.md §MCP over HTTP): rmcp's streamable HTTP server at
//! `/mcp`, run stateless with JSON answers (one JSON body per POST, no session id, no event
//! stream), over the same server, registry and call path as stdio (`Via::Http` in the call log).
//! Loopback by default; any other address needs a key that every request then carries.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Json, Response};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use rmcp::model::ErrorCode;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;

use super::calllog::Via;
use super::ctx::Ctx;
use super::framing::{self, ErrorAnswer, MAX_LINE_BYTES, Verdict};
use super::loopback::{presented_key, same_key, unauthorized};
use super::server::Server;

/// The path MCP is served at.
pub const MCP_PATH: &str = "/mcp";
/// A request head must arrive within this (the connection layer's header read timeout).
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// What every answer is: JSON, never an event stream (see [`accept_json`]).
const ACCEPTS: &str = "application/json, text/event-stream";

/// `KeyRequired` and `BadAddress` keep their advice in the line: it is joined there with `:` and
/// `;` as one sentence (a snapshot pins it), not appended after it as a hint.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error(
        "serve --http {addr}: {addr} is not a loopback address, so requests need a key: pass \
         --http-key KEY (or set METABOB_HTTP_KEY), or serve on 127.0.0.1"
    )]
    KeyRequired { addr: String },
    #[error(
        "serve --http {addr}: not an address to listen on; give HOST:PORT with an IP address or \
         localhost, for example 127.0.0.1:8765 (port 0 picks a free one)"
    )]
    BadAddress { addr: String },
    #[error("serve --http {addr}: cannot listen: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

impl metabob_wire::report::Hint for HttpError {
    fn hint(&self) -> Option<String> {
        match self {
            HttpError::Bind { .. } => Some("choose another address or port".into()),
            HttpError::KeyRequired { .. } | HttpError::BadAddress { .. } => None,
        }
    }
}

impl HttpError {
    /// A start refused for want of a key, which is a missing credential, not a failure to run.
    pub fn is_missing_key(&self) -> bool {
        matches!(self, HttpError::KeyRequired { .. })
    }
}

/// Where and how to serve, checked before anything starts.
#[derive(Debug)]
pub struct Plan {
    pub addr: SocketAddr,
    /// The key every request must carry; `None` only on a loopback address.
    key: Option<String>,
}

/// Checks `addr` and the key (anchor: http_plan): an address that is not loopback is refused
/// without a key. `localhost` means 127.0.0.1; no other name is looked up, so the decision
/// is made on what will be bound.
pub fn plan(addr: &str, key: Option<String>) -> Result<Plan, HttpError> {
    let parsed = match addr.parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => addr
            .rsplit_once(':')
            .filter(|(host, _)| host.eq_ignore_ascii_case("localhost"))
            .and_then(|(_, port)| port.parse::<u16>().ok())
            .map(|port| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)),
    };
    let Some(parsed) = parsed else {
        return Err(HttpError::BadAddress { addr: addr.into() });
    };
    let key = key.filter(|k| !k.trim().is_empty());
    if !parsed.ip().is_loopback() && key.is_none() {
        return Err(HttpError::KeyRequired { addr: addr.into() });
    }
    Ok(Plan { addr: parsed, key })
}

/// Binds the planned address.
pub async fn bind(plan: &Plan) -> Result<(TcpListener, SocketAddr), HttpError> {
    let fail = |source| HttpError::Bind {
        addr: plan.addr.to_string(),
        source,
    };
    let listener = TcpListener::bind(plan.addr).await.map_err(fail)?;
    let bound = listener.local_addr().map_err(fail)?;
    Ok((listener, bound))
}

/// The `/mcp` route (anchor: http_router): rmcp's service in stateless JSON mode, each body
/// sorted first as stdio sorts a line ([`classify_body`]), behind the key check when there is a
/// key.
pub fn router(ctx: Arc<Ctx>, plan: &Plan) -> Router {
    let mut config = StreamableHttpServerConfig::default()
        // No session: each POST is answered on its own, with no Mcp-Session-Id to carry.
        .with_legacy_session_mode(false)
        // JSON for every answer; the server sends nothing before a call's result, so rmcp never
        // needs its event-stream fallback.
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_sse_retry(None)
        .with_max_request_body_bytes(MAX_LINE_BYTES);
    if plan.key.is_some() && !plan.addr.ip().is_loopback() {
        // rmcp admits only loopback Host names by default, against DNS rebinding; a served
        // address has its own names, and the key is what keeps a rebinding page out.
        config = config.disable_allowed_hosts();
    }
    let service = StreamableHttpService::new(
        move || Ok(Server::over(ctx.clone(), Via::Http)),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Router::new()
        .route_service(MCP_PATH, service)
        // A route layer: only `/mcp` bodies are sorted; any other path stays a 404.
        .route_layer(axum::middleware::from_fn(classify_body))
        .layer(axum::middleware::from_fn(accept_json))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(plan.key.clone()),
            require_key,
        ))
}

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, router: Router, shutdown: impl Future<Output = ()>) {
    Box::pin(metabob_net::serve::serve_connections(
        listener,
        router,
        metabob_net::serve::ServeConfig::plain(IDLE_TIMEOUT, metabob_net::serve::DRAIN),
        shutdown,
    ))
    .await;
}

/// With a key, every request carries it (anchor: http_key): `Authorization: Bearer <key>`,
/// `ApiKey <key>` or the bare key; 401 otherwise.
async fn require_key(
    State(key): State<Arc<Option<String>>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(key) = key.as_ref() {
        match presented_key(request.headers()) {
            None => {
                return unauthorized(
                    "unauthorized: send the server's key as Authorization: Bearer <key>",
                );
            }
            Some(k) if !same_key(k, key) => {
                return unauthorized("unauthorized: the key sent is not this server's key");
            }
            Some(_) => {}
        }
    }
    next.run(request).await
}

/// A plain client may accept JSON alone. rmcp refuses a POST that does not also accept an event
/// stream (the transport lets a server stream); this server never streams, so the header is
/// completed rather than the request refused.
async fn accept_json(mut request: Request, next: Next) -> Response {
    let accepts = request
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",")
        .to_ascii_lowercase();
    let json = accepts.contains("application/json") || accepts.contains("*/*");
    let wants_stream_only = accepts.contains("text/event-stream") && !json;
    if !wants_stream_only {
        request
            .headers_mut()
            .insert(header::ACCEPT, HeaderValue::from_static(ACCEPTS));
    }
    next.run(request).await
}

/// Sorts every `POST` body as stdio sorts a line (anchor: http_classify), with the one
/// `framing::classify`: rmcp answers a body it cannot read with a plain-text 415, where JSON-RPC
/// asks for an error object, and the two surfaces must not answer one input two ways. Only a
/// message reaches rmcp; every other body is answered here.
async fn classify_body(request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let bytes = match read_body(&parts.headers, body).await {
        Ok(bytes) => bytes,
        Err(refusal) => return refusal,
    };
    match framing::classify(&bytes) {
        Verdict::Deliver(_) => {
            // rmcp parses the body again; a leading byte order mark, which classify accepts as
            // stdio does, would fail its parse, so it is the one thing taken off.
            let bytes = match bytes.strip_prefix(BOM) {
                Some(rest) => bytes.slice(bytes.len() - rest.len()..),
                None => bytes,
            };
            // A message is a message whatever type the client labelled it with; rmcp would refuse
            // any label but JSON with a plain-text 415.
            parts.headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            parts.headers.remove(header::TRANSFER_ENCODING);
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Verdict::Answer(answer) => {
            tracing::info!("answered a malformed message: {}", answer.error.message);
            // An answer with the request's id is a JSON-RPC response like any other; with no id
            // to answer, the request itself was bad.
            let status = if answer.id.is_null() {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::OK
            };
            error_response(status, answer)
        }
        Verdict::Ignore(why) => {
            tracing::warn!("ignored a message: {why}");
            StatusCode::ACCEPTED.into_response()
        }
        // On stdio a blank line is framing between messages; over HTTP the body is the frame, and
        // an empty one is no JSON text at all.
        Verdict::Blank => error_response(
            StatusCode::BAD_REQUEST,
            framing::error_answer(
                serde_json::Value::Null,
                ErrorCode::PARSE_ERROR,
                "Parse error: the body is empty; POST one JSON-RPC message",
            ),
        ),
    }
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Reads a `POST` body: at most [`MAX_LINE_BYTES`], refused from `Content-Length` before it is
/// read when that says more, and all of it within [`IDLE_TIMEOUT`], so a half-sent body holds its
/// connection no longer than a half-sent head does. A refusal is a JSON-RPC error object too.
async fn read_body(headers: &HeaderMap, body: Body) -> Result<Bytes, Response> {
    let too_long = || error_response(StatusCode::PAYLOAD_TOO_LARGE, framing::too_long());
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_LINE_BYTES as u64) {
        return Err(too_long());
    }
    let unread = |status, why: String| {
        error_response(
            status,
            framing::error_answer(
                serde_json::Value::Null,
                ErrorCode::INVALID_REQUEST,
                &format!("Invalid Request: {why}; send the whole message in one POST"),
            ),
        )
    };
    match tokio::time::timeout(IDLE_TIMEOUT, Limited::new(body, MAX_LINE_BYTES).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_long()),
        Ok(Err(e)) => Err(unread(
            StatusCode::BAD_REQUEST,
            format!("the body could not be read ({e})"),
        )),
        Err(_) => Err(unread(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the body did not arrive within {} s",
                IDLE_TIMEOUT.as_secs()
            ),
        )),
    }
}

fn error_response(status: StatusCode, answer: ErrorAnswer) -> Response {
    (status, Json(answer)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_loopback_address_needs_a_key() {
        assert!(plan("127.0.0.1:0", None).is_ok());
        assert!(plan("[::1]:8765", None).is_ok());
        assert_eq!(
            plan("localhost:8765", None)
                .map(|p| p.addr.to_string())
                .ok(),
            Some("127.0.0.1:8765".to_string())
        );
        for addr in ["0.0.0.0:8765", "192.0.2.1:80", "[::]:8765"] {
            let err = plan(addr, None)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains("--http-key"), "{addr}: {err}");
            assert!(plan(addr, Some("k".into())).is_ok(), "{addr}");
        }
        assert!(plan("0.0.0.0:8765", Some("  ".into())).is_err());
        for bad in ["8765", "example.com:80", "127.0.0.1", "localhost:x"] {
            assert!(
                matches!(plan(bad, None), Err(HttpError::BadAddress { .. })),
                "{bad}"
            );
        }
    }
}
