//! The HTTP surface: parse the request, call the owner, format the answer.

use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::concepts::{DEFAULT_LIMIT, MAX_USAGE_LIMIT, usage_history};
use super::errors::ApiError;
use super::keys::{KeyIdentity, authenticate};
use super::resolve::{Answer, Shared, dispatch};

pub const SERVICE: &str = "metabob-ledger";
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/bootstrap", get(bootstrap))
        .route("/v1/auth/resolve", post(auth_resolve))
        .route("/resolve", post(resolve))
        .route("/concepts/{id}/usage", get(concept_usage))
        .with_state(state)
}

// anchor: health
async fn health(State(s): State<Shared>) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "service": SERVICE,
        "version": VERSION,
        "resolves": s.resolves.load(Ordering::Relaxed),
    }))
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

async fn check_key(s: &Shared, key: Option<String>) -> Result<KeyIdentity, ApiError> {
    let key = key.ok_or(ApiError::KeyRejected(
        "no API key; send Authorization: ApiKey <key>",
    ))?;
    s.db.read(move |c| authenticate(c, &key)).await
}

// anchor: auth-resolve
async fn auth_resolve(
    State(s): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    // The nested form answers scopes; when a caller sends both forms, it is the one that counts.
    if let Some(key) = nested_key(&body) {
        let id = check_key(&s, Some(key)).await?;
        return Ok(Json(json!({
            "orgId": id.org_id,
            "orgName": id.org_name,
            "userId": format!("user_{}", id.key_id),
            "keyId": id.key_id,
            "scopes": id.scopes,
        })));
    }
    let id = check_key(&s, header_key(&headers)).await?;
    Ok(Json(json!({ "org_id": id.org_id, "key_id": id.key_id })))
}

// anchor: resolve-route
async fn resolve(
    State(s): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    s.resolves.fetch_add(1, Ordering::Relaxed);
    let key = check_key(&s, header_key(&headers)).await?;
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok(match dispatch(&s, key, &body, auth).await? {
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
            resp
        }
    })
}

// anchor: concept-usage-route
async fn concept_usage(
    State(s): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let key = check_key(&s, header_key(&headers)).await?;
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
    let org = key.org_id;
    Ok(Json(
        s.db.read(move |c| usage_history(c, &org, &id, limit))
            .await?,
    ))
}
