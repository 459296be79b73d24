//! The ledger's two error families: what an operator sees (`LedgerError`, CLI and startup) and
//! what a client sees on the wire (`ApiError`, always a JSON body with a fixed status).

use std::path::PathBuf;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A failure of `ledger serve` or `ledger key …`, reported as one line.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("ledger database {path}: {source}")]
    Db {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("ledger database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("no HOME in the environment; pass --data DIR")]
    NoHome,
    #[error("{0}")]
    Usage(String),
    #[error("no key with id {0}; `metabob-mcp ledger key list` shows the ids")]
    UnknownKey(String),
    #[error("ledger server stopped: {0}")]
    Serve(std::io::Error),
}

/// An answer other than success, with the status and JSON body the wire format fixes.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A missing or malformed field; the detail names which.
    #[error("bad_request: {0}")]
    BadRequest(String),
    #[error("key_rejected: {0}")]
    KeyRejected(&'static str),
    #[error("forbidden: key lacks write scope")]
    Forbidden,
    #[error("concept_not_found: {0}")]
    ConceptNotFound(String),
    #[error("no_producer({0})")]
    NoProducer(String),
    #[error("forward_failed({shape}): unreachable: {detail}")]
    ForwardUnreachable { shape: String, detail: String },
    #[error("forward_failed({shape}): timeout after {timeout_ms} ms")]
    ForwardTimeout { shape: String, timeout_ms: u64 },
    #[error("internal: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn bad(field: impl Into<String>) -> Self {
        ApiError::BadRequest(field.into())
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::KeyRejected(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden => StatusCode::FORBIDDEN,
            ApiError::ConceptNotFound(_) | ApiError::NoProducer(_) => StatusCode::NOT_FOUND,
            ApiError::ForwardUnreachable { .. } | ApiError::ForwardTimeout { .. } => {
                StatusCode::BAD_GATEWAY
            }
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    // anchor: api-error-body
    pub fn body(&self) -> Value {
        match self {
            ApiError::BadRequest(field) => json!({"error": "bad_request", "detail": field}),
            ApiError::KeyRejected(why) => json!({"error": "key_rejected", "detail": why}),
            ApiError::Forbidden => json!({"error": "forbidden", "detail": "key lacks write scope"}),
            ApiError::ConceptNotFound(id) => {
                json!({"error": "concept_not_found", "concept_id": id, "detail": "no such concept in this key's org"})
            }
            // The client recognises no_producer by exactly this body, so it carries no extra fields.
            ApiError::NoProducer(shape) => json!({"error": "Not found", "shape": shape}),
            ApiError::ForwardUnreachable { shape, detail } => {
                json!({"error": "forward_failed", "shape": shape, "reason": "unreachable", "detail": detail})
            }
            ApiError::ForwardTimeout { shape, timeout_ms } => json!({
                "error": "forward_failed", "shape": shape, "reason": "timeout", "timeout_ms": timeout_ms,
                "detail": format!("the producer did not answer within {timeout_ms} ms"),
            }),
            ApiError::Internal(detail) => json!({"error": "internal", "detail": detail}),
        }
    }
}

impl From<rusqlite::Error> for ApiError {
    fn from(e: rusqlite::Error) -> Self {
        tracing::error!("ledger database: {e}");
        ApiError::Internal(format!("database: {e}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status(), axum::Json(self.body())).into_response()
    }
}
