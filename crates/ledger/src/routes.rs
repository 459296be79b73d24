//! The HTTP surface: parse the request, call the owner, format the answer. Every refusal, the
//! router's own included, answers the one JSON error body (`ApiError`).

use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use serde_json::{Value, json};

use super::concepts::{DEFAULT_LIMIT, MAX_USAGE_LIMIT, usage_history};
use super::db::Budget;
use super::errors::ApiError;
use super::keys::KeyIdentity;
use super::resolve::{Answer, Ledger, Shared, dispatch};

pub const SERVICE: &str = "metabob-ledger";
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The largest request body the ledger reads. The biggest field a client sends is 16 KiB
/// (SPEC.md §Field kinds and caps); this leaves room for any pointer and bounds the rest.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/bootstrap", get(bootstrap))
        .route("/v1/auth/resolve", post(auth_resolve))
        .route("/resolve", post(resolve))
        .route("/concepts/{id}/usage", get(concept_usage))
        .route("/board", get(board_page))
        .route("/board.js", get(board_script))
        .route("/board.css", get(board_style))
        .route("/metrics", get(metrics))
        // After the routes: it applies to the paths defined so far.
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .layer(axum::middleware::map_response(json_errors))
        // Outermost, so it counts the status the caller is sent.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            super::metrics::track,
        ))
        .with_state(state)
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::RouteNotFound {
        method: method.to_string(),
        path: uri.path().to_string(),
    }
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_string(),
    }
}

/// Marks a producer's answer, which goes back as the producer gave it, errors included.
#[derive(Clone, Copy, Debug)]
struct Forwarded;

/// The last line of the one error body: an error status that reaches here without a JSON body
/// (a refusal from below the handlers) gets one, with the status's name as its token. A
/// producer's forwarded answer is left as it is.
// anchor: json_errors
async fn json_errors(resp: Response) -> Response {
    let status = resp.status();
    let is_error = status.is_client_error() || status.is_server_error();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    if !is_error || is_json || resp.extensions().get::<Forwarded>().is_some() {
        return resp;
    }
    let mut out = ApiError::Status(status).into_response();
    for name in [header::ALLOW, header::CONNECTION] {
        if let Some(v) = resp.headers().get(&name) {
            out.headers_mut().insert(name, v.clone());
        }
    }
    out
}

/// Reads a request body: at most [`MAX_BODY_BYTES`] (413 otherwise, refused from
/// `Content-Length` before reading when it says so), and all of it within the idle timeout
/// (408 otherwise), so a half-sent body holds nothing for long.
// anchor: read_body
async fn read_body(s: &Ledger, headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > MAX_BODY_BYTES as u64) {
        return Err(ApiError::PayloadTooLarge {
            max_bytes: MAX_BODY_BYTES,
            declared: Some(n),
        });
    }
    let collect = Limited::new(body, MAX_BODY_BYTES).collect();
    match tokio::time::timeout(s.idle_timeout, collect).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(ApiError::PayloadTooLarge {
                max_bytes: MAX_BODY_BYTES,
                declared: None,
            })
        }
        Ok(Err(_)) => Err(ApiError::bad(
            "body: the connection failed before the whole body arrived",
        )),
        Err(_) => Err(ApiError::RequestTimeout {
            timeout_ms: s.idle_timeout.as_millis() as u64,
        }),
    }
}

// anchor: health
async fn health(State(s): State<Shared>) -> Json<Value> {
    let (readers, busy) = s.db.readers();
    Json(json!({
        "status": "ok",
        "service": SERVICE,
        "version": VERSION,
        "resolves": s.resolves.load(Ordering::Relaxed),
        "readers": readers,
        "readers_busy": busy,
    }))
}

/// The board's page (SPEC.md §The board): static, served without a key; every datum it shows
/// comes from `taskBoard` through `/resolve` with the key the viewer types.
// anchor: board-page
async fn board_page() -> Response {
    board_file("text/html; charset=utf-8", super::board::PAGE)
}

async fn board_script() -> Response {
    board_file("text/javascript; charset=utf-8", super::board::SCRIPT)
}

async fn board_style() -> Response {
    board_file("text/css; charset=utf-8", super::board::STYLE)
}

/// What the board's page and its files are sent with (anchor: board-headers). The page shows
/// data read with a key the viewer typed, so it runs only its own script and style, talks only
/// to its own ledger, and is never framed (against clickjacking a key into it). The same set goes
/// with the script and style: harmless there, and one list is simpler to keep right.
const BOARD_HEADERS: [(&str, &str); 5] = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
];

fn board_file(content_type: &'static str, body: &'static str) -> Response {
    let mut resp = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    for (name, value) in BOARD_HEADERS {
        resp.headers_mut().insert(
            header::HeaderName::from_static(name),
            header::HeaderValue::from_static(value),
        );
    }
    resp
}

/// `GET /metrics` (SPEC.md §Metrics): with a key, its org's gauges; without one, every org's,
/// but only on a loopback listener.
// anchor: metrics-route
async fn metrics(State(s): State<Shared>, headers: HeaderMap) -> Result<Response, ApiError> {
    let budget = s.budget();
    // Read before the scrape's own reads take a connection.
    let (_, busy) = s.db.readers();
    let orgs = match header_key(&headers) {
        Some(key) => {
            let id = s.check_key(budget, key).await?;
            vec![(id.org_id, id.org_name)]
        }
        // The org list is no org's read: it is held to a share of its own.
        None if s.metrics_keyless => {
            s.db.read("", budget, |c| {
                super::keys::orgs(c, super::metrics::MAX_SCRAPED_ORGS)
            })
            .await?
        }
        None => return Err(NO_KEY),
    };
    let now = metabob_process::clock::now_ms();
    let seen = super::metrics::boards(&s, orgs, now).await?;
    let body = s.metrics.render(s.db.stats(), busy, &seen, now);
    Ok(([(header::CONTENT_TYPE, super::metrics::CONTENT_TYPE)], body).into_response())
}

// anchor: bootstrap
async fn bootstrap(State(s): State<Shared>) -> Json<Value> {
    Json(json!({
        "service": SERVICE,
        "version": VERSION,
        "discovery_endpoint": s.public_url,
        "identity_endpoint": s.public_url,
    }))
}

/// The key in `Authorization: ApiKey <key>` (`Bearer` accepted too).
fn header_key(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, key) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("apikey") || scheme.eq_ignore_ascii_case("bearer"))
        .then(|| key.trim().to_string())
        .filter(|k| !k.is_empty())
}

/// The key in the nested identity form, when the body is that form.
fn nested_key(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let impulse = v.get("impulse")?;
    let pointer = impulse.get("pointer")?;
    if impulse.get("type")?.as_str()? != "authentication"
        || pointer.get("type")?.as_str()? != "apiKey"
    {
        return None;
    }
    pointer.get("apiKey")?.as_str().map(str::to_string)
}

/// A request that names no key.
const NO_KEY: ApiError = ApiError::KeyRejected("no API key; send Authorization: ApiKey <key>");

async fn check_key(
    s: &Shared,
    budget: Budget,
    key: Option<String>,
) -> Result<KeyIdentity, ApiError> {
    s.check_key(budget, key.ok_or(NO_KEY)?).await
}

// anchor: auth-resolve
async fn auth_resolve(
    State(s): State<Shared>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let body = read_body(&s, &headers, body).await?;
    let budget = s.budget();
    // The nested form answers scopes; when a caller sends both forms, it is the one that counts.
    if let Some(key) = nested_key(&body) {
        let id = check_key(&s, budget, Some(key)).await?;
        return Ok(Json(json!({
            "orgId": id.org_id,
            "orgName": id.org_name,
            "userId": format!("user_{}", id.key_id),
            "keyId": id.key_id,
            "scopes": id.scopes,
        })));
    }
    let id = check_key(&s, budget, header_key(&headers)).await?;
    Ok(Json(json!({ "org_id": id.org_id, "key_id": id.key_id })))
}

// anchor: resolve-route
async fn resolve(
    State(s): State<Shared>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    s.resolves.fetch_add(1, Ordering::Relaxed);
    let body = read_body(&s, &headers, body).await?;
    let budget = s.budget();
    let key = header_key(&headers).ok_or(NO_KEY)?;
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok(match dispatch(&s, budget, key, &body, auth).await? {
        Answer::Json(status, v) => (status, Json(v)).into_response(),
        Answer::Raw {
            status,
            content_type,
            body,
        } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut resp = (status, body).into_response();
            if let Some(ct) = content_type.and_then(|c| c.parse().ok()) {
                resp.headers_mut().insert(header::CONTENT_TYPE, ct);
            }
            resp.extensions_mut().insert(Forwarded);
            resp
        }
    })
}

// anchor: concept-usage-route
async fn concept_usage(
    State(s): State<Shared>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let Path(id) = id.map_err(|e| ApiError::bad(format!("path: {}", e.body_text())))?;
    let budget = s.budget();
    let key = check_key(&s, budget, header_key(&headers)).await?;
    let limit = match query
        .as_deref()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("limit="))
    {
        None => DEFAULT_LIMIT,
        Some(v) => v
            .parse::<i64>()
            .map_err(|_| ApiError::bad("limit: must be an integer"))?,
    };
    // The history is a convenience read: an out-of-range limit is clamped, not refused.
    let limit = limit.clamp(1, MAX_USAGE_LIMIT);
    let org = key.org_id.clone();
    Ok(Json(
        s.db.read(&key.org_id, budget, move |c| {
            usage_history(c, &org, &id, limit)
        })
        .await?,
    ))
}
