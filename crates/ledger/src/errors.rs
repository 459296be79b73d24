//! The ledger's two error families: what an operator sees (`LedgerError`, CLI and startup) and
//! what a client sees on the wire (`ApiError`, always a JSON body with a fixed status).

use std::path::PathBuf;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use metabob_wire::report::{self, Hint};

/// A failure of `ledger serve` or `ledger key …`, reported as one line; what to do about it is
/// its [`Hint`].
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
    #[error("no HOME in the environment")]
    NoHome,
    /// A flag or a file refused by a check of this crate: the words are written where the
    /// check is, and no other error lies behind them.
    #[error("{0}")]
    Usage(String),
    #[error("no key with id {key_id}")]
    UnknownKey { key_id: String },
    /// A `--producer SHAPE=URL` whose URL does not parse.
    #[error("--producer {spec:?}: {source}")]
    ProducerUrl {
        spec: String,
        #[source]
        source: metabob_net::UrlError,
    },
    /// `ledger restore --from` names a file that cannot be read.
    #[error("--from {}: {source}", path.display())]
    BackupUnreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The store could not be reached or readied; `at` never shows a password.
    #[error("ledger store {at}: {source}")]
    Store {
        at: String,
        #[source]
        source: StoreError,
    },
    /// Blocking work (opening the store, the first start, closing it) that did not return.
    #[error("{what} failed: {source}")]
    Task {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    #[error("ledger store: {0}")]
    Api(#[from] ApiError),
    #[error("{0}")]
    Tls(#[from] metabob_net::serve::TlsFileError),
}

impl Hint for LedgerError {
    fn hint(&self) -> Option<String> {
        match self {
            LedgerError::NoHome => Some("pass --data DIR".into()),
            LedgerError::UnknownKey { .. } => {
                Some("`metabob-mcp ledger key list` shows the ids".into())
            }
            LedgerError::BackupUnreadable { .. } => {
                Some("name a file `ledger backup` wrote".into())
            }
            LedgerError::Store { source, .. } => source.hint(),
            LedgerError::Api(e) => e.hint(),
            _ => None,
        }
    }
}

/// What went wrong with a store, under [`LedgerError::Store`] which names it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not a PostgreSQL connection URL ({0})")]
    PgUrl(#[source] tokio_postgres::Error),
    /// tokio-postgres names only the step ("error connecting to server"); why is its source.
    #[error("cannot connect")]
    Connect(#[source] tokio_postgres::Error),
    /// The connection's own I/O runtime could not start: the process is out of threads or file
    /// descriptors.
    #[error("cannot start the connection's I/O")]
    Runtime(#[source] std::io::Error),
    /// The SQLite file's schema could not be brought up to date.
    #[error("bringing the schema up to date")]
    Schema(#[source] ApiError),
    /// The same on PostgreSQL, whose client says only "db error": the server's own words went
    /// to the log.
    #[error("bringing the schema up to date")]
    PgSchema(#[source] ApiError),
    /// `ledger backup` waited its time for a file another connection held exclusively.
    #[error("the file stayed locked for {secs} s")]
    Locked { secs: u64 },
    /// The copy did not pass SQLite's integrity check. The advice stays in the line, joined
    /// with a comma: the line says nothing was written, and "try again" finishes that thought.
    #[error(
        "the copy failed its check ({check}, journal {mode}); nothing was written to the \
         target, try again"
    )]
    CheckFailed { check: String, mode: String },
}

impl Hint for StoreError {
    fn hint(&self) -> Option<String> {
        match self {
            StoreError::PgUrl(_) => Some("write postgres://USER@HOST:PORT/DATABASE".into()),
            StoreError::Connect(_) => {
                Some("is PostgreSQL running there and the database created?".into())
            }
            StoreError::PgSchema(_) => Some(LOG_HAS_IT.into()),
            StoreError::Locked { .. } => Some("try the backup again".into()),
            StoreError::Runtime(_) => Some("raise the process's thread or open-file limit".into()),
            StoreError::Schema(_) | StoreError::CheckFailed { .. } => None,
        }
    }
}

/// Where a failure's cause is when the answer cannot say it.
const LOG_HAS_IT: &str = "the server's log has the cause";

/// Why a pointer did not reach its producer.
#[derive(Debug, thiserror::Error)]
pub enum ForwardCause {
    #[error("producer URL {url}: {source}")]
    BadUrl {
        url: String,
        #[source]
        source: metabob_net::UrlError,
    },
    #[error(transparent)]
    Net(#[from] metabob_net::NetError),
}

// The producer's network cause keeps its advice (a proxy to set, a CA to name) on the body's line.
impl Hint for ForwardCause {
    fn hint(&self) -> Option<String> {
        match self {
            ForwardCause::BadUrl { source, .. } => source.hint(),
            ForwardCause::Net(e) => e.hint(),
        }
    }
}

/// Which search bound a `query` went over (SPEC.md §The embedded ledger).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryBound {
    /// Bytes of query text.
    Bytes,
    /// Searchable words.
    Terms,
}

impl QueryBound {
    pub fn as_str(self) -> &'static str {
        match self {
            QueryBound::Bytes => "bytes",
            QueryBound::Terms => "terms",
        }
    }

    fn detail(self, got: usize, max: usize) -> String {
        match self {
            QueryBound::Bytes => {
                format!("query: {got} bytes; the ledger searches at most {max} bytes of query text")
            }
            QueryBound::Terms => {
                format!("query: {got} words; the ledger searches at most {max} words at once")
            }
        }
    }
}

/// An answer other than success, with the status and JSON body the wire format fixes. Every
/// error the HTTP surface gives, axum's own refusals included, is one of these, so every error
/// status has the one body shape `{"error": token, "detail": text, …}`. No variant carries the
/// database's own text: that goes to the log.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A missing or malformed field; the detail names which, in the words of the check that
    /// refused it (the caller reads them in the answer's `detail`).
    #[error("bad_request: {0}")]
    BadRequest(String),
    /// A search query over one of its bounds.
    #[error("query_too_large: {}", bound.detail(*got, *max))]
    QueryTooLarge {
        bound: QueryBound,
        got: usize,
        max: usize,
    },
    #[error("key_rejected: {0}")]
    KeyRejected(&'static str),
    #[error("forbidden: key lacks write scope")]
    Forbidden,
    #[error("concept_not_found: {id}")]
    ConceptNotFound { id: String },
    #[error("no_producer({shape})")]
    NoProducer { shape: String },
    /// No route has this path.
    #[error("not_found: no route for {method} {path}")]
    RouteNotFound { method: String, path: String },
    /// The path exists, the method is not one it answers.
    #[error("method_not_allowed: {method} {path}")]
    MethodNotAllowed { method: String, path: String },
    /// The body is larger than the ledger reads; `declared` when Content-Length said so upfront.
    #[error("payload_too_large: more than {max_bytes} bytes")]
    PayloadTooLarge {
        max_bytes: usize,
        declared: Option<u64>,
    },
    /// One of a row's texts is over what every reader reads (`metabob_wire::row::RowTexts`).
    #[error("row_too_large: {field} is {bytes} bytes, at most {max_bytes}")]
    RowTooLarge {
        field: &'static str,
        bytes: usize,
        max_bytes: usize,
    },
    /// The store has no space left for the write: nothing was written, reads go on.
    #[error("store_full: the ledger's store has no space left")]
    StoreFull,
    /// The body did not arrive within the idle timeout (a half-sent request).
    #[error("request_timeout: the body did not arrive within {timeout_ms} ms")]
    RequestTimeout { timeout_ms: u64 },
    /// The request's database work ran past its time budget and was stopped.
    #[error("request_budget_exceeded: the database work did not finish within {budget_ms} ms")]
    BudgetExceeded { budget_ms: u64 },
    /// SQLite reported its work interrupted. The database layer turns this into `BudgetExceeded`
    /// with the budget that ran out; the variant exists so that no string is matched to tell.
    #[error("request_budget_exceeded: the database work was interrupted")]
    Interrupted,
    /// Boxed, so that every `Result<_, ApiError>` stays small.
    #[error("forward_failed({shape}): unreachable: {cause}")]
    ForwardUnreachable {
        shape: String,
        #[source]
        cause: Box<ForwardCause>,
    },
    #[error("forward_failed({shape}): timeout after {timeout_ms} ms")]
    ForwardTimeout { shape: String, timeout_ms: u64 },
    /// Another replica's write held what this one needed in a cycle, and retrying did not
    /// get through (PostgreSQL's deadlock or serialization refusal).
    #[error("request_contended: a concurrent write held what this one needed")]
    Contended,
    /// The database failed; what it said is in the server's log, never in the answer.
    #[error("internal: database failure")]
    Database,
    /// An answer could not be turned into JSON: a fault of this crate.
    #[error("internal: {what}: the answer did not serialize")]
    Serialize {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// A blocking task that did not return (it panicked, a bug). The caller hears only that
    /// the work did not finish, since a panic message may quote anything.
    #[error("internal: the {what} did not finish")]
    TaskFailed {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    /// A fault of this crate's own (a row just written that does not read back, say), worded
    /// where it is found; no other error lies behind it.
    #[error("internal: {0}")]
    Internal(String),
    /// Any other refusal produced below the handlers (the last line of `routes::json_errors`).
    #[error("{}", status_token(*.0))]
    Status(StatusCode),
}

/// `Payload Too Large` → `payload_too_large`: the token for a status no variant names.
fn status_token(status: StatusCode) -> String {
    status
        .canonical_reason()
        .unwrap_or("error")
        .to_ascii_lowercase()
        .replace([' ', '-'], "_")
}

impl ApiError {
    pub fn bad(field: impl Into<String>) -> Self {
        ApiError::BadRequest(field.into())
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) | ApiError::QueryTooLarge { .. } => StatusCode::BAD_REQUEST,
            ApiError::KeyRejected(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden => StatusCode::FORBIDDEN,
            ApiError::ConceptNotFound { .. }
            | ApiError::NoProducer { .. }
            | ApiError::RouteNotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::PayloadTooLarge { .. } | ApiError::RowTooLarge { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            ApiError::RequestTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::BudgetExceeded { .. } | ApiError::Interrupted | ApiError::Contended => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::ForwardUnreachable { .. } | ApiError::ForwardTimeout { .. } => {
                StatusCode::BAD_GATEWAY
            }
            ApiError::StoreFull => StatusCode::INSUFFICIENT_STORAGE,
            ApiError::Database
            | ApiError::Internal(_)
            | ApiError::Serialize { .. }
            | ApiError::TaskFailed { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Status(status) => *status,
        }
    }

    // anchor: api-error-body
    pub fn body(&self) -> Value {
        match self {
            ApiError::BadRequest(field) => json!({"error": "bad_request", "detail": field}),
            ApiError::QueryTooLarge { bound, got, max } => json!({
                "error": "query_too_large", "bound": bound.as_str(), "max": max,
                "detail": bound.detail(*got, *max),
            }),
            ApiError::KeyRejected(why) => json!({"error": "key_rejected", "detail": why}),
            ApiError::Forbidden => json!({"error": "forbidden", "detail": "key lacks write scope"}),
            ApiError::ConceptNotFound { id } => {
                json!({"error": "concept_not_found", "concept_id": id, "detail": "no such concept in this key's org"})
            }
            // The client recognises no_producer by exactly this body, so it carries no extra fields.
            ApiError::NoProducer { shape } => json!({"error": "Not found", "shape": shape}),
            ApiError::RouteNotFound { method, path } => json!({
                "error": "not_found",
                "detail": format!("no route for {method} {}", shorten(path)),
            }),
            ApiError::MethodNotAllowed { method, path } => json!({
                "error": "method_not_allowed",
                "detail": format!("{} does not answer {method}; the Allow header lists what it does", shorten(path)),
            }),
            ApiError::StoreFull => json!({
                "error": "store_full",
                "detail": "the ledger's store has no space left and nothing was written; free disk space where its data lives (the --data directory, or the PostgreSQL server's data directory), and writes resume; reads go on meanwhile",
            }),
            ApiError::RowTooLarge {
                field,
                bytes,
                max_bytes,
            } => json!({
                "error": "row_too_large", "field": field, "bytes": bytes, "max_bytes": max_bytes,
                "detail": format!(
                    "{field} is {bytes} bytes; a row's {field} holds at most {max_bytes}, what every reader reads: split or shorten it"
                ),
            }),
            ApiError::PayloadTooLarge {
                max_bytes,
                declared,
            } => {
                let size = match declared {
                    Some(n) => format!("{n} bytes"),
                    None => format!("more than {max_bytes} bytes"),
                };
                json!({
                    "error": "payload_too_large", "max_bytes": max_bytes,
                    "detail": format!("the body is {size}; the ledger reads at most {max_bytes}"),
                })
            }
            ApiError::RequestTimeout { timeout_ms } => json!({
                "error": "request_timeout", "timeout_ms": timeout_ms,
                "detail": format!("the request body did not arrive within {timeout_ms} ms"),
            }),
            ApiError::BudgetExceeded { budget_ms } => json!({
                "error": "request_budget_exceeded", "budget_ms": budget_ms,
                "detail": format!(
                    "the request's database work did not finish within {budget_ms} ms and was stopped; nothing was written"
                ),
            }),
            ApiError::Interrupted => json!({
                "error": "request_budget_exceeded",
                "detail": "the request's database work was stopped; nothing was written",
            }),
            ApiError::ForwardUnreachable { shape, cause } => {
                let detail = report::with_hint(cause.as_ref());
                json!({"error": "forward_failed", "shape": shape, "reason": "unreachable", "detail": detail})
            }
            ApiError::ForwardTimeout { shape, timeout_ms } => json!({
                "error": "forward_failed", "shape": shape, "reason": "timeout", "timeout_ms": timeout_ms,
                "detail": format!("the producer did not answer within {timeout_ms} ms"),
            }),
            ApiError::Contended => json!({
                "error": "request_contended",
                "detail": "a concurrent write held what this one needed; nothing was written; try again",
            }),
            ApiError::Database => json!({
                "error": "internal",
                "detail": "the ledger's database failed; the server's log has the cause",
            }),
            ApiError::Internal(detail) => json!({"error": "internal", "detail": detail}),
            ApiError::Serialize { what, source } => json!({
                "error": "internal",
                "detail": format!("{what}: the answer did not serialize: {source}"),
            }),
            // Not `report::with_hint`: the join error's words (a panic message) stay in the log.
            ApiError::TaskFailed { what, .. } => json!({
                "error": "internal",
                "detail": report::join(format!("the {what} did not finish"), self.hint().as_deref()),
            }),
            ApiError::Status(status) => json!({
                "error": status_token(*status),
                "detail": status.canonical_reason().unwrap_or("refused"),
            }),
        }
    }

    /// Whether the request body may be left unread: then the connection cannot carry another
    /// request and is closed after this answer.
    fn closes_connection(&self) -> bool {
        matches!(
            self,
            ApiError::PayloadTooLarge { .. } | ApiError::RequestTimeout { .. }
        )
    }
}

impl Hint for ApiError {
    fn hint(&self) -> Option<String> {
        match self {
            ApiError::TaskFailed { .. } => Some(LOG_HAS_IT.into()),
            ApiError::ForwardUnreachable { cause, .. } => cause.hint(),
            _ => None,
        }
    }
}

/// A request path as an error detail shows it: at most 200 bytes of what the caller sent.
fn shorten(path: &str) -> String {
    const MAX: usize = 200;
    if path.len() <= MAX {
        return path.to_string();
    }
    let mut end = MAX;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &path[..end])
}

impl From<rusqlite::Error> for ApiError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::OperationInterrupted) => return ApiError::Interrupted,
            Some(rusqlite::ErrorCode::DiskFull) => {
                tracing::error!("ledger database: {e}");
                return ApiError::StoreFull;
            }
            _ => {}
        }
        // The database's words go to the operator, never to the caller.
        tracing::error!("ledger database: {e}");
        ApiError::Database
    }
}

impl From<tokio_postgres::Error> for ApiError {
    fn from(e: tokio_postgres::Error) -> Self {
        use tokio_postgres::error::SqlState;
        match e.code() {
            Some(c) if *c == SqlState::QUERY_CANCELED => return ApiError::Interrupted,
            Some(c) if *c == SqlState::DISK_FULL => {
                tracing::error!("ledger database: {e}");
                return ApiError::StoreFull;
            }
            Some(c)
                if *c == SqlState::T_R_DEADLOCK_DETECTED
                    || *c == SqlState::T_R_SERIALIZATION_FAILURE =>
            {
                return ApiError::Contended;
            }
            // PostgreSQL text cannot hold U+0000, which SQLite stores; the caller learns why.
            Some(c)
                if *c == SqlState::CHARACTER_NOT_IN_REPERTOIRE
                    || *c == SqlState::UNTRANSLATABLE_CHARACTER =>
            {
                return ApiError::bad(
                    "a text field holds a NUL byte (U+0000), which this ledger's store cannot keep",
                );
            }
            _ => {}
        }
        // The client library's own text is only "db error"; the server's words are in the cause.
        match e.as_db_error() {
            Some(db) => tracing::error!("ledger database: {}: {}", db.code().code(), db.message()),
            None => tracing::error!("ledger database: {e}"),
        }
        ApiError::Database
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status(), axum::Json(self.body())).into_response();
        if self.closes_connection() {
            resp.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        resp
    }
}
