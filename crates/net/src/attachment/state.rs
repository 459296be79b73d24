//! The attachment's state object and its named causes (SPEC.md §Attachment).

use std::fmt;

use serde::Serialize;

use crate::config::{AnchorSource, Missing};
use crate::{NetCause, ProxyDiagnosis};

/// Why keyed calls are refused. `Display` is the one line a substrate tool returns.
#[derive(Clone, Debug, PartialEq)]
pub enum Cause {
    /// The missing input, already phrased with the lookup order.
    NotConfigured {
        missing: Missing,
        line: String,
    },
    /// Discovery did not answer `/bootstrap`; `net` is what the network did.
    AnchorUnreachable {
        discovery: String,
        net: Option<NetCause>,
        detail: Option<String>,
    },
    /// A portal, block page or other non-substrate answer where JSON was expected.
    BlockedByPortal {
        url: String,
        detail: String,
    },
    /// `/bootstrap` through a proxy answered a non-JSON 4xx: the proxy itself may have refused.
    ProxyRefused {
        proxy: String,
        status: u16,
    },
    IdentityUnreachable {
        advertised: Option<String>,
        tried: Vec<String>,
        net: Option<NetCause>,
    },
    KeyRejected {
        identity: String,
        status: u16,
    },
    /// `/bootstrap` reached over https advertised an identity over plain http, where the key
    /// would cross in clear: it is never dialled.
    IdentityInsecure {
        discovery: String,
        advertised: String,
    },
}

impl Cause {
    pub fn token(&self) -> &'static str {
        match self {
            Cause::NotConfigured { .. } => "not_configured",
            Cause::AnchorUnreachable { .. } => "anchor_unreachable",
            Cause::BlockedByPortal { .. } => "blocked_by_portal",
            Cause::ProxyRefused { .. } => "proxy_refused",
            Cause::IdentityUnreachable { .. } => "identity_unreachable",
            Cause::KeyRejected { .. } => "key_rejected",
            Cause::IdentityInsecure { .. } => "identity_insecure",
        }
    }

    /// Causes that can clear by themselves, so the long-running server tries again.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Cause::AnchorUnreachable { .. }
                | Cause::IdentityUnreachable { .. }
                | Cause::BlockedByPortal { .. }
        )
    }

    /// The network cause behind this one, when the network produced no answer.
    pub fn net(&self) -> Option<&NetCause> {
        match self {
            Cause::AnchorUnreachable { net, .. } | Cause::IdentityUnreachable { net, .. } => {
                net.as_ref()
            }
            _ => None,
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::NotConfigured { line, .. } => f.write_str(line),
            Cause::AnchorUnreachable {
                discovery,
                net,
                detail,
            } => {
                write!(
                    f,
                    "anchor_unreachable: discovery {discovery} did not answer GET /bootstrap"
                )?;
                if let Some(n) = net {
                    write!(f, " — {n}")?;
                } else if let Some(d) = detail {
                    write!(f, " ({d})")?;
                }
                // Nothing listens there: most often no ledger was started yet.
                if matches!(
                    net,
                    Some(
                        NetCause::ConnectRefused(_)
                            | NetCause::DnsFailed(_)
                            | NetCause::ConnectTimeout(_)
                    )
                ) {
                    f.write_str(
                        "; is the ledger running? Start one with `metabob-mcp ledger serve`, or \
                         check the URL (DISCOVERY_ENDPOINT or metabob.discoveryEndpoint)",
                    )?;
                }
                Ok(())
            }
            Cause::BlockedByPortal { url, detail } => write!(
                f,
                "blocked_by_portal: {url} answered with a page that is not the substrate's \
                 ({detail}); sign in to the network's portal or fix the proxy, then retry"
            ),
            Cause::ProxyRefused { proxy, status } => write!(
                f,
                "proxy_refused: GET /bootstrap through the proxy {proxy} got a non-JSON HTTP \
                 {status}; the proxy itself may have refused it: allow the discovery host, or \
                 add it to NO_PROXY"
            ),
            Cause::IdentityUnreachable {
                advertised,
                tried,
                net,
            } => {
                write!(
                    f,
                    "identity_unreachable(advertised={}, tried=[{}]): no identity endpoint \
                     answered; set IDENTITY_ENDPOINT or metabob.identityEndpoint to one that does",
                    advertised.as_deref().unwrap_or("none"),
                    tried.join(", ")
                )?;
                if let Some(n) = net {
                    write!(f, " — {n}")?;
                }
                Ok(())
            }
            Cause::KeyRejected { identity, status } => write!(
                f,
                "key_rejected: the substrate's identity ({identity}) rejected the API key (HTTP \
                 {status}). Use a key \
                 of this substrate (`metabob-mcp ledger key create` on a local ledger)"
            ),
            Cause::IdentityInsecure {
                discovery,
                advertised,
            } => write!(
                f,
                "identity_insecure: discovery {discovery} was reached over https but advertises \
                 identity {advertised} over plain http, so the API key was not sent there; set \
                 IDENTITY_ENDPOINT to identity's https address, or give the ledger an https \
                 --public-url"
            ),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Anchor {
    pub discovery: Option<String>,
    pub source: AnchorSource,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BootstrapStatus {
    Ok,
    Unreachable,
    NotSubstrate,
    Skipped,
}

#[derive(Clone, Debug, Serialize)]
pub struct Bootstrap {
    pub status: BootstrapStatus,
    #[serde(rename = "identityEndpoint", skip_serializing_if = "Option::is_none")]
    pub identity_endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdentitySource {
    Explicit,
    /// The ledger advertised itself; used at the address discovery was reached at.
    Reached,
    Bootstrap,
    RehostedH1,
    None,
}

#[derive(Clone, Debug, Serialize)]
pub struct Identity {
    pub endpoint: Option<String>,
    pub source: IdentitySource,
    pub advertised: Option<String>,
    pub tried: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthStatus {
    Pending,
    Authenticated,
    KeyRejected,
    IdentityUnreachable,
    NotConfigured,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Auth {
    pub status: AuthStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub org_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// `None` when identity answered the flat form, which reports no scopes.
    pub scopes: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Auth {
    pub fn pending() -> Self {
        Auth {
            status: AuthStatus::Pending,
            org_id: None,
            key_id: None,
            account_id: None,
            user_id: None,
            scopes: None,
            detail: None,
        }
    }
}

/// The network diagnosis reported with the state.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    pub proxy: ProxyReport,
    pub anchor_route: Option<String>,
    pub cause: Option<String>,
    pub cause_line: Option<String>,
    pub tls: Option<TlsReport>,
}

/// The proxies in force, credentials redacted.
#[derive(Clone, Debug, Serialize)]
pub struct ProxyReport {
    pub https_proxy: Option<String>,
    pub http_proxy: Option<String>,
    pub no_proxy: Vec<String>,
}

impl From<ProxyDiagnosis> for ProxyReport {
    fn from(d: ProxyDiagnosis) -> Self {
        ProxyReport {
            https_proxy: d.https_proxy,
            http_proxy: d.http_proxy,
            no_proxy: d.no_proxy,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct TlsReport {
    pub host: String,
    pub authorized: bool,
    pub issuer: Option<String>,
}

/// One typed object describing an attachment attempt (anchor: AttachmentState). It never
/// carries the key.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentState {
    pub anchor: Anchor,
    pub bootstrap: Bootstrap,
    pub identity: Identity,
    pub auth: Auth,
    #[serde(serialize_with = "cause_token")]
    pub cause: Option<Cause>,
    pub message: Option<String>,
    /// Always "none": this process is a client and advertises nothing.
    pub advertised: &'static str,
    pub network: Network,
    pub started_at: String,
    pub settled_at: Option<String>,
    pub last_checked_at: Option<String>,
    #[serde(skip)]
    pub settled_ms: Option<i64>,
}

fn cause_token<S: serde::Serializer>(c: &Option<Cause>, s: S) -> Result<S::Ok, S::Error> {
    match c {
        Some(c) => s.serialize_str(c.token()),
        None => s.serialize_none(),
    }
}

impl AttachmentState {
    pub fn attached(&self) -> bool {
        self.auth.status == AuthStatus::Authenticated && self.cause.is_none()
    }
}
