//! The loopback resolver (SPEC.md §Loopback resolver): `POST /v2/impulses/resolve` and
//! `GET /health` on 127.0.0.1, started by `serve`. A local caller hands it impulses; each mapped
//! shape runs its tool through the one call path (`tools::call`, `Via::Loopback`), so the schema
//! check, workspace gate, attachment gate, outgoing guard and call log apply as on stdio. A
//! `human_input` is queued in the agent-resolver queue, not answered inline. This module only
//! adapts: it parses, authenticates, calls the owners and formats their answers.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;

use super::calllog::Via;
use super::ctx::Ctx;
use super::server::answer_even_if_it_panics;
use super::tools::{self, Reply};
use crate::agent_queue::{Sidecar, Solicitation, queue_vessel};
use metabob_process::env::Env;
use metabob_wire::report;

/// The largest request body read, as for one MCP line on stdio (`framing::MAX_LINE_BYTES`);
/// a larger one is answered 413 without being kept.
pub const MAX_BODY_BYTES: usize = super::framing::MAX_LINE_BYTES;
/// The most impulses one request may carry (anchor: MAX_IMPULSES): they run one after another,
/// so this bounds how long one request holds the server's tools.
pub const MAX_IMPULSES: usize = 32;
/// A request head must arrive within this, and its body within this once the head is read.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// What a `human_input` ACK names as the way its answer comes back.
const WILL_RESPOND_VIA: &str = "pull_assigned_work";

/// The shapes that run a fixed tool, and the pointer fields forwarded as its arguments
/// (anchor: MAPPED_SHAPES). `mcp:tool_call` names its tool itself; `human_input` is queued.
pub const MAPPED_SHAPES: &[(&str, &str, &[&str])] = &[
    (
        "code:cochange_prediction",
        "predict_cochanges",
        &["changed_files", "limit", "confidence_threshold"],
    ),
    (
        "code:impact_analysis",
        "analyze_impact",
        &[
            "changed_files",
            "diff",
            "direction",
            "max_depth",
            "include_tests",
        ],
    ),
    (
        "code:git_change_assignment",
        "assign_git_changes",
        &[
            "changed_files",
            "diff",
            "include_cochange_predictions",
            "prediction_limit",
        ],
    ),
    (
        "code:analysis_context",
        "get_analysis_context",
        &["recently_changed_files", "problem_limit", "scope"],
    ),
];

/// The shapes queued for the agent rather than resolved inline (anchor: QUEUED_SHAPES).
pub const QUEUED_SHAPES: &[&str] = &["human_input"];

#[derive(Debug, thiserror::Error)]
pub enum LoopbackError {
    /// The parenthesis says what a port is, as part of the line rather than advice after it.
    #[error(
        "METABOB_RESOLVER_PORT={value:?} is not a port (0 to 65535; 0 or unset picks a free one)"
    )]
    BadPort { value: String },
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Bind {
        port: u16,
        #[source]
        source: std::io::Error,
    },
}

impl metabob_wire::report::Hint for LoopbackError {
    fn hint(&self) -> Option<String> {
        match self {
            LoopbackError::BadPort { .. } => None,
            LoopbackError::Bind { .. } => Some(
                "choose another --resolver-port (0 picks a free one) or pass --no-resolver".into(),
            ),
        }
    }
}

/// The port asked for: `--resolver-port`, else `METABOB_RESOLVER_PORT`, else 0 (any free one).
pub fn requested_port(flag: Option<u16>, env: &Env) -> Result<u16, LoopbackError> {
    if let Some(p) = flag {
        return Ok(p);
    }
    match env.get("METABOB_RESOLVER_PORT").map(str::trim) {
        None | Some("") => Ok(0),
        Some(v) => v.parse::<u16>().map_err(|_| LoopbackError::BadPort {
            value: v.to_string(),
        }),
    }
}

/// Binds 127.0.0.1 only (anchor: bind_loopback): the resolver is for callers on this host, and
/// no flag or variable names another address.
pub async fn bind(port: u16) -> Result<(TcpListener, SocketAddr), LoopbackError> {
    let fail = |source| LoopbackError::Bind { port, source };
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
        .await
        .map_err(fail)?;
    let bound = listener.local_addr().map_err(fail)?;
    Ok((listener, bound))
}

/// What the resolver's handlers share.
pub struct Resolver {
    ctx: Arc<Ctx>,
    /// The key configured when the resolver started, used until a call derives the session;
    /// then the session's attachment's own key is the one compared.
    started_key: Option<String>,
    /// `METABOB_TOOLS`: the tools the resolver may run; `None` for all.
    allowed: Option<BTreeSet<String>>,
}

impl Resolver {
    pub fn new(ctx: Arc<Ctx>) -> Resolver {
        let mut env = ctx.env.clone();
        // The session loads the same configuration on its first call and logs its warnings
        // then; this read only learns the key, so it stays quiet rather than log them twice.
        let config =
            tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::new(), || {
                metabob_net::config::load(&mut env)
            });
        let allowed = allowed_tools(&ctx.env);
        Resolver {
            started_key: config.api_key,
            allowed,
            ctx,
        }
    }

    /// The attachment's configured key (anchor: resolver_key).
    fn configured_key(&self) -> Option<String> {
        match self.ctx.session() {
            Some(s) => s.att.config().api_key.clone(),
            None => self.started_key.clone(),
        }
        .filter(|k| !k.is_empty())
    }
}

/// `METABOB_TOOLS`, comma-separated; unset or blank allows every tool. A name no tool has is
/// warned about once, so a typo does not silently refuse everything.
fn allowed_tools(env: &Env) -> Option<BTreeSet<String>> {
    let raw = env.get("METABOB_TOOLS").filter(|v| !v.trim().is_empty())?;
    let names: BTreeSet<String> = raw
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    for n in names.iter().filter(|n| tools::spec(n).is_none()) {
        tracing::warn!("METABOB_TOOLS names {n}, but no tool has that name; it allows nothing");
    }
    Some(names)
}

/// The resolver's routes.
pub fn router(resolver: Arc<Resolver>) -> Router {
    Router::new()
        .route("/v2/impulses/resolve", post(resolve))
        .route("/health", get(health))
        .method_not_allowed_fallback(|| async {
            failure(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this path",
            )
        })
        .fallback(|| async {
            failure(
                StatusCode::NOT_FOUND,
                "not found: the resolver serves POST /v2/impulses/resolve and GET /health",
            )
        })
        .layer(axum::middleware::from_fn(loopback_host_only))
        .with_state(resolver)
}

/// Serves the resolver on `listener` until `shutdown` completes, on the ledger's connection
/// layer (header read timeout, graceful stop).
pub async fn serve(
    listener: TcpListener,
    resolver: Arc<Resolver>,
    shutdown: impl Future<Output = ()>,
) {
    Box::pin(metabob_net::serve::serve_connections(
        listener,
        router(resolver),
        metabob_net::serve::ServeConfig::plain(IDLE_TIMEOUT, metabob_net::serve::DRAIN),
        shutdown,
    ))
    .await;
}

fn failure(status: StatusCode, line: &str) -> Response {
    (status, Json(json!({ "error": line }))).into_response()
}

/// A request whose `Host` names another host is refused (anchor: loopback_host_only): a web
/// page that rebinds its own name to 127.0.0.1 would otherwise reach `/health` from a browser.
async fn loopback_host_only(request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{0}"));
    match host {
        Some(h) if !is_loopback_host(h) => failure(
            StatusCode::FORBIDDEN,
            "forbidden: the Host header names no loopback host",
        ),
        _ => next.run(request).await,
    }
}

/// `127.0.0.1`, `localhost` or `[::1]`, with or without a port.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.split(':').next().unwrap_or_default(),
    };
    matches!(
        name.to_ascii_lowercase().as_str(),
        "127.0.0.1" | "localhost" | "::1"
    )
}

/// The key a request presents: `Authorization: ApiKey <key>`, `Bearer <key>` or the bare key
/// (anchor: presented_key).
pub(crate) fn presented_key(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let is_scheme = |s: &str| s.eq_ignore_ascii_case("apikey") || s.eq_ignore_ascii_case("bearer");
    let key = match value.split_once(' ') {
        Some((scheme, rest)) if is_scheme(scheme) => rest.trim(),
        // A scheme with nothing after it carries no key.
        None if is_scheme(value) => "",
        _ => value,
    };
    (!key.is_empty()).then_some(key)
}

/// Whether two keys are equal, in time that does not depend on where they differ
/// (anchor: same_key): both are hashed first, so the comparison runs over equal lengths.
pub(crate) fn same_key(presented: &str, configured: &str) -> bool {
    let a = Sha256::digest(presented.as_bytes());
    let b = Sha256::digest(configured.as_bytes());
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// 401 with the one line saying why, and the scheme a caller should use.
pub(crate) fn unauthorized(line: &str) -> Response {
    let mut resp = failure(StatusCode::UNAUTHORIZED, line);
    resp.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("ApiKey"));
    resp
}

/// The resolver's key check (anchor: resolver_auth): the refusal's line, or `None` to go on.
/// With no key configured every request is refused, since there is nothing to tell this host's
/// callers from anyone else.
fn refused_key(r: &Resolver, headers: &HeaderMap) -> Option<&'static str> {
    let Some(configured) = r.configured_key() else {
        return Some(
            "unauthorized: no API key is configured, so the resolver refuses every request; \
             configure one (METABOB_API_KEY or ~/.substrate/config.json) and restart serve",
        );
    };
    match presented_key(headers) {
        None => Some("unauthorized: send the configured API key as Authorization: ApiKey <key>"),
        Some(k) if !same_key(k, &configured) => {
            Some("unauthorized: the key sent is not the API key this server is configured with")
        }
        Some(_) => None,
    }
}

/// Reads the body: at most [`MAX_BODY_BYTES`] (413 otherwise, from `Content-Length` before
/// reading when it says so) and all of it within [`IDLE_TIMEOUT`] (408 otherwise).
async fn read_body(headers: &HeaderMap, body: Body) -> Result<Bytes, Response> {
    let too_large = || {
        failure(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("payload_too_large: a request body is at most {MAX_BODY_BYTES} bytes"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    match tokio::time::timeout(IDLE_TIMEOUT, Limited::new(body, MAX_BODY_BYTES).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Ok(Err(_)) => Err(failure(
            StatusCode::BAD_REQUEST,
            "bad_request: the connection failed before the whole body arrived",
        )),
        Err(_) => Err(failure(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout: the body did not arrive in time",
        )),
    }
}

/// One impulse as the body gave it.
struct Impulse {
    id: Value,
    pointer: Value,
}

/// The body's impulses (anchor: parse_impulses): `{impulses: [{id?, pointer}]}` or one
/// `{pointer}`. Whatever is wrong with the body as a whole is a 400; an impulse that is not an
/// object is kept, and answered `loaded: false` in its place.
fn parse_impulses(body: &[u8]) -> Result<Vec<Impulse>, String> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("bad_request: the body is not JSON ({e})"))?;
    let Value::Object(mut top) = v else {
        return Err(
            "bad_request: the body must be a JSON object: {impulses: [{id?, pointer}]} \
                    or {pointer}"
                .into(),
        );
    };
    let list = match (top.remove("impulses"), top.remove("pointer")) {
        (Some(Value::Array(list)), None) => list,
        (None, Some(pointer)) => vec![json!({ "id": top.remove("id"), "pointer": pointer })],
        (Some(_), Some(_)) => {
            return Err("bad_request: send either impulses or one pointer, not both".into());
        }
        (Some(_), None) => return Err("bad_request: impulses must be a list".into()),
        (None, None) => {
            return Err("bad_request: the body names no impulses and no pointer".into());
        }
    };
    if list.is_empty() {
        return Err("bad_request: impulses is empty".into());
    }
    if list.len() > MAX_IMPULSES {
        return Err(format!(
            "too_many_impulses: {} impulses in one request; at most {MAX_IMPULSES} are taken",
            list.len()
        ));
    }
    Ok(list
        .into_iter()
        .map(|item| match item {
            Value::Object(mut m) => Impulse {
                id: m.remove("id").unwrap_or(Value::Null),
                pointer: m.remove("pointer").unwrap_or(Value::Null),
            },
            _ => Impulse {
                id: Value::Null,
                pointer: Value::Null,
            },
        })
        .collect())
}

// anchor: resolve_impulses
async fn resolve(State(r): State<Arc<Resolver>>, headers: HeaderMap, body: Body) -> Response {
    if let Some(line) = refused_key(&r, &headers) {
        return unauthorized(line);
    }
    let bytes = match read_body(&headers, body).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let impulses = match parse_impulses(&bytes) {
        Ok(list) => list,
        Err(line) => return failure(StatusCode::BAD_REQUEST, &line),
    };
    let mut results = Vec::with_capacity(impulses.len());
    // One after another: tools share the workspace and the index, and the call log keeps order.
    for impulse in impulses {
        results.push(resolve_one(&r, impulse).await);
    }
    Json(json!({ "results": results })).into_response()
}

/// What one pointer asks for.
enum Route {
    Tool { name: String, args: Value },
    Queue(Solicitation),
}

/// Reads a pointer into what it asks for (anchor: route_pointer); the line says what is wrong.
fn route(pointer: &Value) -> Result<Route, String> {
    let Value::Object(p) = pointer else {
        return Err("bad_pointer: each impulse needs a pointer object with a type".into());
    };
    let Some(shape) = p.get("type").and_then(Value::as_str) else {
        return Err("bad_pointer: the pointer has no string type naming its shape".into());
    };
    if shape == "mcp:tool_call" {
        return tool_call(p);
    }
    if QUEUED_SHAPES.contains(&shape) {
        return solicitation(p).map(Route::Queue);
    }
    let Some((_, tool, fields)) = MAPPED_SHAPES.iter().find(|(s, _, _)| *s == shape) else {
        return Err(format!(
            "unknown_shape({shape}): the resolver maps mcp:tool_call, {}, and queues {}",
            MAPPED_SHAPES
                .iter()
                .map(|(s, _, _)| *s)
                .collect::<Vec<_>>()
                .join(", "),
            QUEUED_SHAPES.join(", ")
        ));
    };
    let args: Map<String, Value> = fields
        .iter()
        .filter_map(|f| p.get(*f).map(|v| (f.to_string(), v.clone())))
        .collect();
    Ok(Route::Tool {
        name: tool.to_string(),
        args: Value::Object(args),
    })
}

/// `mcp:tool_call`: `tool`, and `input` or its alias `arguments` (never both), default `{}`.
fn tool_call(p: &Map<String, Value>) -> Result<Route, String> {
    let Some(name) = p.get("tool").and_then(Value::as_str) else {
        return Err("bad_pointer: mcp:tool_call needs tool, the tool's name".into());
    };
    let args = match (p.get("input"), p.get("arguments")) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "bad_pointer: {name}: give input or arguments (its alias), not both"
            ));
        }
        (Some(v), None) | (None, Some(v)) => v.clone(),
        (None, None) => Value::Null,
    };
    if !(args.is_object() || args.is_null()) {
        return Err(format!(
            "bad_pointer: {name}: input must be a JSON object of the tool's arguments"
        ));
    }
    Ok(Route::Tool {
        name: name.to_string(),
        args,
    })
}

/// `human_input`: `question_markdown` (required), `solicitation_id` or `id`, `timeout_ms`,
/// and `dispatch_id` when the caller names one. The queue validates the values.
fn solicitation(p: &Map<String, Value>) -> Result<Solicitation, String> {
    let text = |field: &str| -> Result<Option<String>, String> {
        match p.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!(
                "bad_pointer: human_input: {field} must be a string"
            )),
        }
    };
    let question_markdown = text("question_markdown")?
        .ok_or("bad_pointer: human_input needs question_markdown, the question to ask")?;
    let timeout_ms = match p.get("timeout_ms") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or(
            "bad_pointer: human_input: timeout_ms must be a whole number of milliseconds",
        )?),
    };
    Ok(Solicitation {
        id: text("solicitation_id")?.or(text("id")?),
        question_markdown,
        timeout_ms,
        dispatch_id: text("dispatch_id")?,
    })
}

/// One impulse's result: `{id, loaded, content, is_error, error?}`.
async fn resolve_one(r: &Resolver, impulse: Impulse) -> Value {
    let id = impulse.id;
    match route(&impulse.pointer) {
        Err(line) => not_loaded(id, &line),
        Ok(Route::Tool { name, .. }) if r.allowed.as_ref().is_some_and(|a| !a.contains(&name)) => {
            not_loaded(
                id,
                &format!(
                    "tool_not_allowed({name}): METABOB_TOOLS does not list it, so the resolver \
                     does not run it"
                ),
            )
        }
        Ok(Route::Tool { name, args }) => {
            let call = tools::call(&r.ctx, &name, args, Via::Loopback, std::future::pending());
            match answer_even_if_it_panics(&name, call).await {
                Some(reply) => tool_result(id, reply),
                // Never cancelled: a request dropped by its client drops this future instead.
                None => not_loaded(id, &format!("{name}: the call was cancelled")),
            }
        }
        Ok(Route::Queue(s)) => queue(r, id, s).await,
    }
}

fn not_loaded(id: Value, line: &str) -> Value {
    json!({ "id": id, "loaded": false, "content": line, "is_error": true, "error": line })
}

fn tool_result(id: Value, reply: Reply) -> Value {
    if reply.is_error {
        let first = reply.text.lines().next().unwrap_or_default().to_string();
        json!({ "id": id, "loaded": false, "content": reply.text, "is_error": true,
                "error": first })
    } else {
        json!({ "id": id, "loaded": true, "content": reply.text, "is_error": false })
    }
}

/// Queues a solicitation for this vessel's agent and ACKs it (anchor: queue_human_input).
async fn queue(r: &Resolver, id: Value, s: Solicitation) -> Value {
    let queued = match queue_target(&r.ctx).await {
        Ok((sidecar, vessel)) => tokio::task::spawn_blocking(move || {
            sidecar
                .enqueue(&vessel, s)
                .map(|ack| ack.solicitation_id)
                .map_err(|e| format!("human_input: not queued: {}", report::with_hint(&e)))
        })
        .await
        .unwrap_or_else(|e| Err(format!("human_input: queueing stopped unexpectedly: {e}"))),
        Err(line) => Err(line),
    };
    match queued {
        Ok(solicitation_id) => json!({
            "id": id,
            "loaded": true,
            "accepted": true,
            "solicitation_id": solicitation_id,
            "will_respond_via": WILL_RESPOND_VIA,
            "content": format!(
                "queued {solicitation_id} for the agent; it answers through \
                 {WILL_RESPOND_VIA} and submit_resolution"
            ),
            "is_error": false,
        }),
        Err(line) => {
            let mut v = not_loaded(id, &line);
            v["accepted"] = json!(false);
            v
        }
    }
}

/// The queue and the vessel whose queue takes the solicitation, the one `pull_assigned_work`
/// reads: the workspace is decided as for a tool call, since the vessel is derived from it.
async fn queue_target(ctx: &Ctx) -> Result<(Arc<Sidecar>, String), String> {
    ctx.workspace.settle_roots().await;
    let here = (ctx.here()).map_err(|e| format!("human_input: {}", report::with_hint(&e)))?;
    let vessel = queue_vessel(here.session.vessel.as_deref());
    let sidecar = ctx.sidecar().map_err(|e| format!("human_input: {e}"))?;
    Ok((sidecar, vessel))
}

// anchor: health
async fn health(State(r): State<Arc<Resolver>>) -> Json<Value> {
    let key = r.configured_key();
    let mut body = match r.ctx.session() {
        None => json!({
            "ok": true,
            "attached": false,
            "reason": "attaching: the attachment starts with the first tool call",
            "attachment": null,
            "network": { "proxy": metabob_net::attachment::state::ProxyReport::from(
                metabob_net::NetClient::from_env(&r.ctx.env).proxy_diagnosis()) },
        }),
        Some(session) => match session.att.settled() {
            None => json!({
                "ok": true,
                "attached": false,
                "reason": "attaching",
                "attachment": null,
            }),
            Some(state) => {
                let attached = state.attached();
                let mut v = json!({
                    "ok": true,
                    "attached": attached,
                    "attachment": state,
                });
                if !attached {
                    v["reason"] = json!(match &state.cause {
                        Some(cause) => session.att.refusal_line(cause),
                        None => "attaching".to_string(),
                    });
                }
                v
            }
        },
    };
    scrub(&mut body, key.as_deref());
    Json(body)
}

/// Every string of `/health`'s answer with URL credentials redacted and the key, should any
/// part ever carry it, masked: the state never holds it, and this keeps it so.
fn scrub(v: &mut Value, key: Option<&str>) {
    match v {
        Value::String(s) => {
            let mut out = metabob_process::guard::redact_url_credentials(s);
            if let Some(k) = key.filter(|k| k.len() >= 8)
                && out.contains(k)
            {
                out = out.replace(k, "***");
            }
            *s = out;
        }
        Value::Array(items) => items.iter_mut().for_each(|i| scrub(i, key)),
        Value::Object(m) => m.values_mut().for_each(|i| scrub(i, key)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mapped_field_is_an_argument_of_its_tool() {
        for (shape, tool, fields) in MAPPED_SHAPES {
            let spec = tools::spec(tool).unwrap_or_else(|| panic!("{shape}: no tool {tool}"));
            let schema = Value::Object((spec.schema)());
            for f in *fields {
                assert!(
                    schema["properties"].get(*f).is_some(),
                    "{shape}: {tool} has no argument {f}"
                );
            }
        }
    }

    #[test]
    fn keys_are_read_from_each_accepted_form() {
        for (value, want) in [
            ("ApiKey mb_live_k", Some("mb_live_k")),
            ("apikey  mb_live_k ", Some("mb_live_k")),
            ("Bearer mb_live_k", Some("mb_live_k")),
            ("mb_live_k", Some("mb_live_k")),
            ("Bearer ", None),
            ("", None),
        ] {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            assert_eq!(presented_key(&h), want, "{value:?}");
        }
        assert!(same_key("mb_live_k", "mb_live_k"));
        assert!(!same_key("mb_live_k", "mb_live_j"));
        assert!(!same_key("", "mb_live_k"));
    }

    #[test]
    fn only_loopback_hosts_pass() {
        for h in [
            "127.0.0.1:9",
            "localhost",
            "LOCALHOST:80",
            "[::1]:9",
            "127.0.0.1",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in [
            "example.com",
            "127.0.0.2:9",
            "evil.localhost.example",
            "[::2]",
        ] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn bodies_are_read_into_impulses_or_refused() {
        let one = parse_impulses(br#"{"pointer": {"type": "x"}, "id": "a"}"#).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].id, json!("a"));
        let many = parse_impulses(br#"{"impulses": [{"pointer": {}}, 3]}"#).unwrap();
        assert_eq!(many.len(), 2);
        assert!(many[1].pointer.is_null());
        for bad in [
            &b"[]"[..],
            b"nope",
            br#"{"impulses": []}"#,
            br#"{"impulses": {}}"#,
            br#"{}"#,
            br#"{"impulses": [], "pointer": {}}"#,
        ] {
            assert!(
                parse_impulses(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let too_many = json!({ "impulses": vec![json!({"pointer": {}}); MAX_IMPULSES + 1] });
        let err = parse_impulses(too_many.to_string().as_bytes())
            .err()
            .unwrap();
        assert!(err.starts_with("too_many_impulses"), "{err}");
    }

    #[test]
    fn pointers_route_to_tools_or_say_what_is_wrong() {
        let Ok(Route::Tool { name, args }) = route(&json!({
            "type": "code:impact_analysis", "changed_files": ["a.py"], "other": 1
        })) else {
            panic!("impact analysis routes to a tool")
        };
        assert_eq!(name, "analyze_impact");
        assert_eq!(args, json!({"changed_files": ["a.py"]}));
        let Ok(Route::Tool { args, .. }) = route(&json!({
            "type": "mcp:tool_call", "tool": "get_metrics", "arguments": {"x": 1}
        })) else {
            panic!("the arguments alias is read")
        };
        assert_eq!(args, json!({"x": 1}));
        for (pointer, starts) in [
            (
                json!({"type": "mcp:tool_call", "tool": "t", "input": {}, "arguments": {}}),
                "bad_pointer",
            ),
            (
                json!({"type": "mcp:tool_call", "tool": "t", "input": [1]}),
                "bad_pointer",
            ),
            (json!({"type": "mcp:tool_call"}), "bad_pointer"),
            (json!({"type": "nope"}), "unknown_shape(nope)"),
            (json!({"tool": "x"}), "bad_pointer"),
            (json!("x"), "bad_pointer"),
            (json!({"type": "human_input"}), "bad_pointer"),
            (
                json!({"type": "human_input", "question_markdown": "q", "timeout_ms": -1}),
                "bad_pointer",
            ),
        ] {
            match route(&pointer) {
                Err(line) => assert!(line.starts_with(starts), "{pointer}: {line}"),
                Ok(_) => panic!("{pointer} was routed"),
            }
        }
        let Ok(Route::Queue(s)) = route(&json!({
            "type": "human_input", "question_markdown": "Ship it?", "id": "q-1"
        })) else {
            panic!("human_input is queued")
        };
        assert_eq!(s.id.as_deref(), Some("q-1"));
        assert_eq!(s.timeout_ms, None);
    }

    #[test]
    fn health_strings_lose_credentials_and_the_key() {
        let mut v = json!({"a": ["http://u:secretpw@proxy:8080", "k=mb_live_abcdefgh1234"]});
        scrub(&mut v, Some("mb_live_abcdefgh1234"));
        let text = v.to_string();
        assert!(!text.contains("secretpw"), "{text}");
        assert!(!text.contains("mb_live_abcdefgh1234"), "{text}");
    }
}
