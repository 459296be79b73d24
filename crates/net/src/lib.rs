//! metabob-net: the one HTTP path every substrate request takes (see SPEC.md §Network): proxy
//! selection from the environment, trust, budgets and retries, and the named causes a failure
//! carries; configuration lookup (`config`), the attachment to a ledger (`attachment`), and the
//! connection server every HTTP server here runs on (`serve`).
//!
//! Must not depend on: any crate of ours but metabob-wire and metabob-process; no store, no git,
//! no MCP.

pub mod attachment;
mod cause;
mod client;
pub mod config;
mod proxy;
pub mod serve;
mod tls;
mod url;

pub use cause::{BadProxy, NetCause, NetError, Portal, Target};
pub use client::{
    DEFAULT_CONNECT_BUDGET, DEFAULT_RESPONSE_BUDGET, MAX_BODY_BYTES, Method, NetClient,
    RETRY_DELAYS, Request, Response, Retry,
};
pub use proxy::{ProxyDiagnosis, Route, RouteReason};
pub use tls::TlsInfo;
pub use tls::TlsWitness;
pub use tls::git_ca_bundle;
pub use url::{Malformed, Scheme, Url, UrlError};
