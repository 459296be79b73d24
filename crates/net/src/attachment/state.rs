//! The attachment's state object and its named causes (SPEC.md §Attachment).

use std::fmt;

use serde::Serialize;

use crate::config::{AnchorSource, Missing};
use crate::{NetCause, Portal, ProxyDiagnosis, Response};
use metabob_wire::report::Hint;

/// Why keyed calls are refused. `Display` is the line the named-causes table gives each cause
/// (SPEC.md §Named causes),
/// and the [`Hint`] what to do about it where that table leaves the advice out of the line; a
/// refusal carries both ([`metabob_wire::report::with_hint`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Cause {
    /// The missing input, already phrased with the lookup order.
    NotConfigured {
        missing: Missing,
        line: String,
    },
    /// Discovery did not answer `/bootstrap`.
    AnchorUnreachable {
        discovery: String,
        why: NoBootstrap,
    },
    /// A portal, block page or other non-substrate answer where JSON was expected.
    BlockedByPortal {
        url: String,
        answer: NotSubstrate,
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

/// Why discovery gave no usable answer to `GET /bootstrap`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoBootstrap {
    /// No answer: what the network did instead.
    Net(NetCause),
    /// Discovery answered in JSON, with this error status.
    Status(u16),
}

/// What answered where the substrate's JSON was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotSubstrate {
    /// The network's own account: a proxy's page, a reply that is not HTTP, or not TLS.
    Net(Portal),
    /// An HTTP answer whose body is not a JSON object.
    Answer { status: u16, body: Body },
}

impl fmt::Display for NotSubstrate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotSubstrate::Net(portal) => portal.fmt(f),
            NotSubstrate::Answer { status, body } => write!(f, "HTTP {status}, {body}"),
        }
    }
}

/// What an answer's body was, when it was not the JSON object expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    Html,
    Empty,
    NotJson { bytes: usize },
}

impl Body {
    /// The body of `resp`, which was not the JSON object expected.
    pub fn of(resp: &Response) -> Body {
        if resp.is_html() {
            Body::Html
        } else if resp.body.is_empty() {
            Body::Empty
        } else {
            Body::NotJson {
                bytes: resp.body.len(),
            }
        }
    }
}

impl fmt::Display for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Body::Html => f.write_str("an HTML page"),
            Body::Empty => f.write_str("an empty body"),
            Body::NotJson { bytes } => write!(f, "{bytes} bytes that are not a JSON object"),
        }
    }
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
            Cause::AnchorUnreachable {
                why: NoBootstrap::Net(net),
                ..
            } => Some(net),
            Cause::IdentityUnreachable { net, .. } => net.as_ref(),
            _ => None,
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::NotConfigured { line, .. } => f.write_str(line),
            Cause::AnchorUnreachable { discovery, why } => {
                write!(
                    f,
                    "anchor_unreachable: discovery {discovery} did not answer GET /bootstrap"
                )?;
                match why {
                    NoBootstrap::Net(n) => write!(f, " — {n}")?,
                    NoBootstrap::Status(status) => write!(f, " (answered HTTP {status})")?,
                }
                // Nothing listens there: most often no ledger was started yet, so how to start
                // one is part of this line (SPEC.md §Named causes).
                if matches!(
                    why,
                    NoBootstrap::Net(
                        NetCause::ConnectRefused(_)
                            | NetCause::DnsFailed { .. }
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
            Cause::BlockedByPortal { url, answer } => write!(
                f,
                "blocked_by_portal: {url} answered with a page that is not the substrate's \
                 ({answer})"
            ),
            Cause::ProxyRefused { proxy, status } => write!(
                f,
                "proxy_refused: GET /bootstrap through the proxy {proxy} got a non-JSON HTTP \
                 {status}"
            ),
            // The advice stays in this line, ahead of the network cause: as a hint it would move
            // behind the cause, and a refusal's words are not to change with where they live.
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
            // The way to a key stays a sentence of this line, as the snapshots of `attach
            // --check` show it; a hint would join it with "; " instead.
            Cause::KeyRejected { identity, status } => write!(
                f,
                "key_rejected: the substrate's identity ({identity}) rejected the API key (HTTP \
                 {status}). Use a key \
                 of this substrate (`metabob-mcp ledger key create` on a local ledger)"
            ),
            // The line names both addresses and what to set (SPEC.md §Named causes).
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

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.net().map(|n| n as &(dyn std::error::Error + 'static))
    }
}

impl Hint for Cause {
    fn hint(&self) -> Option<String> {
        match self {
            Cause::BlockedByPortal { .. } => {
                Some("sign in to the network's portal or fix the proxy, then retry".into())
            }
            Cause::ProxyRefused { .. } => Some(
                "the proxy itself may have refused it: allow the discovery host, or add it to \
                 NO_PROXY"
                    .into(),
            ),
            _ => self.net().and_then(Hint::hint),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Target;
    use metabob_wire::report::{line, with_hint};

    #[test]
    fn a_refusal_with_its_hint_reads_as_the_line_always_did() {
        let portal = Cause::BlockedByPortal {
            url: "http://d".into(),
            answer: NotSubstrate::Answer {
                status: 200,
                body: Body::Html,
            },
        };
        assert_eq!(
            with_hint(&portal),
            "blocked_by_portal: http://d answered with a page that is not the substrate's (HTTP \
             200, an HTML page); sign in to the network's portal or fix the proxy, then retry"
        );
        let proxy = Cause::ProxyRefused {
            proxy: "http://***@p:3128".into(),
            status: 403,
        };
        assert_eq!(
            with_hint(&proxy),
            "proxy_refused: GET /bootstrap through the proxy http://***@p:3128 got a non-JSON \
             HTTP 403; the proxy itself may have refused it: allow the discovery host, or add it \
             to NO_PROXY"
        );
        let refused = Cause::AnchorUnreachable {
            discovery: "http://d:1".into(),
            why: NoBootstrap::Net(NetCause::ConnectRefused(Target::new("d", 1))),
        };
        assert_eq!(refused.hint(), None);
        assert_eq!(
            with_hint(&refused),
            "anchor_unreachable: discovery http://d:1 did not answer GET /bootstrap — \
             connect_refused(d:1): nothing is accepting connections there; is the ledger \
             running? Start one with `metabob-mcp ledger serve`, or check the URL \
             (DISCOVERY_ENDPOINT or metabob.discoveryEndpoint)"
        );
        let status = Cause::AnchorUnreachable {
            discovery: "http://d:1".into(),
            why: NoBootstrap::Status(500),
        };
        assert_eq!(
            status.to_string(),
            "anchor_unreachable: discovery http://d:1 did not answer GET /bootstrap (answered \
             HTTP 500)"
        );
    }

    #[test]
    fn the_network_cause_is_the_source_and_brings_its_hint() {
        let intercepted = Cause::IdentityUnreachable {
            advertised: None,
            tried: vec![],
            net: Some(NetCause::TlsIntercepted {
                issuer: "Corp CA".into(),
            }),
        };
        // The line names the network cause already, so the chain adds nothing to it.
        assert_eq!(line(&intercepted), intercepted.to_string());
        assert!(
            with_hint(&intercepted)
                .ends_with("does not trust; if that is your organisation's inspection CA, name its PEM file in METABOB_EXTRA_CA_CERTS")
        );
        assert_eq!(
            std::error::Error::source(&intercepted).map(ToString::to_string),
            intercepted.net().map(ToString::to_string)
        );
    }
}
