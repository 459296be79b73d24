//! The named network causes: one variant per way the network can fail a request, each printed
//! as a single line that begins with its token so every surface carries the same words. What a
//! person can do about a cause is its [`Hint`], apart from the line, except for
//! `proxy_auth_required`, whose advice is part of the line
//! (SPEC.md §Named network causes).

use std::fmt;

use metabob_wire::report::Hint;

use super::proxy::Route;
use super::tls::TlsInfo;
use super::url::{Url, UrlError};

/// Where a connection was headed, as the causes name it: `host:port`, an IPv6 host in brackets.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// An IPv6 literal is kept without its brackets.
    pub host: String,
    pub port: u16,
}

impl Target {
    pub fn new(host: impl Into<String>, port: u16) -> Target {
        Target {
            host: host.into(),
            port,
        }
    }
}

impl From<&Url> for Target {
    fn from(url: &Url) -> Target {
        Target::new(url.host.clone(), url.port)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// What came back where a tunnel or an HTTP answer was expected (`blocked_by_portal`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Portal {
    /// The proxy answered CONNECT with bytes that are not HTTP.
    ConnectNotHttp { target: Target },
    /// The proxy said yes to CONNECT and then sent a page instead of a tunnel.
    PageAfterConnect { target: Target },
    /// The proxy answered CONNECT with another status and a page of its own.
    ConnectPage { target: Target, status: u16 },
    /// The tunnel opened, and then what answered inside it was not TLS.
    NotTlsInTunnel { target: Target },
    /// The target's answer is not HTTP.
    NotHttp { target: Target },
}

impl fmt::Display for Portal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Portal::ConnectNotHttp { target } => write!(
                f,
                "the proxy answered CONNECT {target} with something that is not HTTP"
            ),
            Portal::PageAfterConnect { target } => write!(
                f,
                "the proxy accepted CONNECT {target} and then sent a page of its own instead of a tunnel"
            ),
            Portal::ConnectPage { target, status } => write!(
                f,
                "the proxy answered CONNECT {target} with {status} and a page of its own"
            ),
            Portal::NotTlsInTunnel { target } => write!(
                f,
                "the proxy opened a tunnel to {target} and then answered with something that is not TLS"
            ),
            Portal::NotHttp { target } => write!(f, "the answer from {target} is not HTTP"),
        }
    }
}

/// A proxy setting this client cannot use (`proxy_unsupported`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadProxy {
    /// A scheme other than http or https, such as `socks5`.
    Scheme { scheme: String },
    /// A setting that does not parse, as written but with its credentials masked.
    Unparseable { setting: String },
}

impl fmt::Display for BadProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadProxy::Scheme { scheme } => f.write_str(scheme),
            BadProxy::Unparseable { setting } => write!(f, "unparseable {setting}"),
        }
    }
}

// anchor: net-causes
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetCause {
    /// The proxy answered 407; `schemes` come from its Proxy-Authenticate headers.
    ProxyAuthRequired {
        schemes: Vec<String>,
        had_credentials: bool,
    },
    /// The proxy refused CONNECT to this non-443 port.
    ProxyPortBlocked(u16),
    /// A request through a proxy got a non-JSON 4xx that the proxy itself probably produced.
    /// The client never decides this alone; discovery's bootstrap does, knowing what it expected.
    ProxyRefused {
        proxy: String,
    },
    /// The proxy setting has a scheme other than http/https, or does not parse.
    ProxyUnsupported(BadProxy),
    /// The served chain ends at an issuer nothing in the trust store vouches for.
    TlsIntercepted {
        issuer: String,
    },
    /// A trusted chain, but for another name.
    TlsNameMismatch {
        host: String,
    },
    /// Any other handshake failure.
    TlsFailed(Target),
    /// The first hop's name does not resolve.
    DnsFailed {
        host: String,
    },
    /// The connect budget ran out on the way to the first hop.
    ConnectTimeout(Target),
    ConnectRefused(Target),
    /// The first hop closed the connection before a complete answer.
    ConnectionReset {
        host: String,
    },
    ResponseTimeout {
        host: String,
        ms: u64,
    },
    BlockedByPortal(Portal),
    /// The answer's body is larger than any answer this client reads.
    ResponseTooLarge {
        host: String,
        limit: usize,
    },
    /// The proxy could not reach the target (5xx to CONNECT), or any other failure.
    AnchorUnreachable(Target),
    /// The address does not parse, so nothing was dialled; to the caller this is the same
    /// `anchor_unreachable` as an address that does not answer. `address` is the text that
    /// failed, when the line names it.
    BadAddress {
        address: Option<String>,
        // Boxed: every refusal carries a NetCause, and this rare one is the largest.
        error: Box<UrlError>,
    },
}

impl NetCause {
    pub fn token(&self) -> &'static str {
        match self {
            NetCause::ProxyAuthRequired { .. } => "proxy_auth_required",
            NetCause::ProxyPortBlocked(_) => "proxy_port_blocked",
            NetCause::ProxyRefused { .. } => "proxy_refused",
            NetCause::ProxyUnsupported(_) => "proxy_unsupported",
            NetCause::TlsIntercepted { .. } => "tls_intercepted",
            NetCause::TlsNameMismatch { .. } => "tls_name_mismatch",
            NetCause::TlsFailed(_) => "tls_failed",
            NetCause::DnsFailed { .. } => "dns_failed",
            NetCause::ConnectTimeout(_) => "connect_timeout",
            NetCause::ConnectRefused(_) => "connect_refused",
            NetCause::ConnectionReset { .. } => "connection_reset",
            NetCause::ResponseTimeout { .. } => "response_timeout",
            NetCause::BlockedByPortal(_) => "blocked_by_portal",
            NetCause::ResponseTooLarge { .. } => "response_too_large",
            NetCause::AnchorUnreachable(_) | NetCause::BadAddress { .. } => "anchor_unreachable",
        }
    }
}

impl fmt::Display for NetCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.token();
        match self {
            NetCause::ProxyAuthRequired {
                schemes,
                had_credentials,
            } => {
                let list = if schemes.is_empty() {
                    "unknown".to_string()
                } else {
                    schemes.join(", ")
                };
                write!(f, "{t}({list}): ")?;
                // The way out of a login the proxy wants is in the line itself: which way it is,
                // is the cause (SPEC.md §Named network causes).
                let basic = schemes.iter().any(|s| s.eq_ignore_ascii_case("basic"));
                if basic && *had_credentials {
                    f.write_str("the proxy rejected the credentials in the proxy URL")
                } else if basic {
                    f.write_str(
                        "the proxy wants a login; put it in the proxy URL, as in HTTPS_PROXY=http://user:password@proxy:3128",
                    )
                } else {
                    f.write_str(
                        "this process cannot speak that scheme; run a local authenticating relay (px or cntlm style) and point HTTPS_PROXY at it",
                    )
                }
            }
            NetCause::ProxyPortBlocked(port) => {
                write!(f, "{t}({port}): the proxy only tunnels to port 443")
            }
            NetCause::ProxyRefused { proxy } => write!(
                f,
                "{t}: the proxy {proxy} turned the request away itself (a non-JSON 4xx), before it reached the substrate"
            ),
            NetCause::ProxyUnsupported(what) => write!(
                f,
                "{t}({what}): only http:// and https:// proxies are supported"
            ),
            NetCause::TlsIntercepted { issuer } => write!(
                f,
                "{t}({issuer}): the certificate chain is signed by an issuer this process does not trust"
            ),
            NetCause::TlsNameMismatch { host } => write!(
                f,
                "{t}({host}): the server's trusted certificate is for a different name"
            ),
            NetCause::TlsFailed(target) => write!(f, "{t}({target}): the TLS handshake failed"),
            NetCause::DnsFailed { host } => write!(f, "{t}({host}): the name does not resolve"),
            NetCause::ConnectTimeout(target) => write!(
                f,
                "{t}({target}): no connection within the connect budget: the host is down, restarting or unreachable from here"
            ),
            NetCause::ConnectRefused(target) => {
                write!(f, "{t}({target}): nothing is accepting connections there")
            }
            NetCause::ConnectionReset { host } => write!(
                f,
                "{t}({host}): the connection closed before a complete answer arrived"
            ),
            NetCause::ResponseTimeout { host, ms } => write!(
                f,
                "{t}({host}, {ms}): connected, but no complete answer within {ms} ms"
            ),
            NetCause::BlockedByPortal(what) => write!(f, "{t}: {what}"),
            NetCause::ResponseTooLarge { host, limit } => write!(
                f,
                "{t}({host}): the answer is larger than {} MiB, more than any answer this client reads; nothing of it was used",
                limit >> 20
            ),
            NetCause::AnchorUnreachable(target) => {
                write!(f, "{t}({target}): the target could not be reached")
            }
            NetCause::BadAddress { address, error } => {
                f.write_str(t)?;
                match address {
                    Some(a) => write!(f, "({a}: {error})")?,
                    None => write!(f, "({error})")?,
                }
                f.write_str(": the target could not be reached")
            }
        }
    }
}

impl std::error::Error for NetCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NetCause::BadAddress { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

impl Hint for NetCause {
    fn hint(&self) -> Option<String> {
        match self {
            NetCause::ProxyAuthRequired {
                schemes,
                had_credentials: true,
            } if schemes.iter().any(|s| s.eq_ignore_ascii_case("basic")) => {
                Some("check the user and password".into())
            }
            NetCause::ProxyPortBlocked(port) => Some(format!(
                "serve the anchor on 443 or ask for port {port} to be allowed"
            )),
            NetCause::ProxyUnsupported(_) => Some("fix HTTPS_PROXY / HTTP_PROXY".into()),
            NetCause::TlsIntercepted { .. } => Some(
                "if that is your organisation's inspection CA, name its PEM file in METABOB_EXTRA_CA_CERTS"
                    .into(),
            ),
            NetCause::ConnectTimeout(_) => {
                Some("where it is reachable only through a proxy, set HTTPS_PROXY".into())
            }
            _ => None,
        }
    }
}

/// A failed request: the cause, the route it took and what TLS saw, for reports.
#[derive(Clone, Debug)]
pub struct NetError {
    pub cause: NetCause,
    pub route: Route,
    pub tls: Option<TlsInfo>,
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.cause.fmt(f)
    }
}

// The line is the cause's own, so the chain goes on from what the cause keeps rather than
// repeating the cause as a link of its own.
impl std::error::Error for NetError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.source()
    }
}

impl Hint for NetError {
    fn hint(&self) -> Option<String> {
        self.cause.hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metabob_wire::report::with_hint;

    fn target() -> Target {
        Target::new("h", 443)
    }

    #[test]
    fn every_line_starts_with_its_token() {
        let causes = [
            NetCause::ProxyAuthRequired {
                schemes: vec!["Basic".into()],
                had_credentials: false,
            },
            NetCause::ProxyPortBlocked(8443),
            NetCause::ProxyRefused {
                proxy: "http://***@p:3128".into(),
            },
            NetCause::ProxyUnsupported(BadProxy::Scheme {
                scheme: "socks5".into(),
            }),
            NetCause::TlsIntercepted {
                issuer: "Corp CA".into(),
            },
            NetCause::TlsNameMismatch { host: "h".into() },
            NetCause::TlsFailed(target()),
            NetCause::DnsFailed { host: "h".into() },
            NetCause::ConnectTimeout(target()),
            NetCause::ConnectRefused(target()),
            NetCause::ConnectionReset { host: "h".into() },
            NetCause::ResponseTimeout {
                host: "h".into(),
                ms: 5000,
            },
            NetCause::BlockedByPortal(Portal::NotHttp { target: target() }),
            NetCause::AnchorUnreachable(target()),
            NetCause::BadAddress {
                address: Some("ftp://h".into()),
                error: Box::new(UrlError::UnsupportedScheme {
                    scheme: "ftp".into(),
                }),
            },
        ];
        for c in causes {
            let line = with_hint(&c);
            assert!(line.starts_with(c.token()), "{line}");
            assert!(!line.contains('\n'), "{line}");
        }
    }

    #[test]
    fn a_target_brackets_an_ipv6_host() {
        assert_eq!(Target::new("::1", 443).to_string(), "[::1]:443");
        assert_eq!(
            NetCause::ConnectRefused(Target::new("h", 8443)).to_string(),
            "connect_refused(h:8443): nothing is accepting connections there"
        );
    }

    #[test]
    fn the_advice_is_the_hint_and_the_line_joins_it_as_before() {
        let timeout = NetCause::ConnectTimeout(target());
        assert!(!timeout.to_string().contains("HTTPS_PROXY"));
        assert_eq!(
            with_hint(&timeout),
            "connect_timeout(h:443): no connection within the connect budget: the host is down, \
             restarting or unreachable from here; where it is reachable only through a proxy, set \
             HTTPS_PROXY"
        );
        assert_eq!(
            with_hint(&NetCause::TlsIntercepted {
                issuer: "Corp CA".into()
            }),
            "tls_intercepted(Corp CA): the certificate chain is signed by an issuer this process \
             does not trust; if that is your organisation's inspection CA, name its PEM file in \
             METABOB_EXTRA_CA_CERTS"
        );
        assert_eq!(
            with_hint(&NetCause::ProxyPortBlocked(8443)),
            "proxy_port_blocked(8443): the proxy only tunnels to port 443; serve the anchor on 443 \
             or ask for port 8443 to be allowed"
        );
        assert_eq!(
            with_hint(&NetCause::ProxyUnsupported(BadProxy::Unparseable {
                setting: "http://***@:1".into()
            })),
            "proxy_unsupported(unparseable http://***@:1): only http:// and https:// proxies are \
             supported; fix HTTPS_PROXY / HTTP_PROXY"
        );
        let error = NetError {
            cause: timeout.clone(),
            route: Route::direct(crate::RouteReason::NoneConfigured),
            tls: None,
        };
        assert_eq!(with_hint(&error), with_hint(&timeout));
    }

    #[test]
    fn a_bad_address_keeps_the_url_error_as_its_source() {
        let bad = NetCause::BadAddress {
            address: None,
            error: Box::new(UrlError::Invalid(crate::url::Malformed::EmptyHost)),
        };
        assert_eq!(
            bad.to_string(),
            "anchor_unreachable(invalid URL: the host is empty): the target could not be reached"
        );
        assert_eq!(metabob_wire::report::causes(&bad).count(), 2);
        assert_eq!(metabob_wire::report::line(&bad), bad.to_string());
    }

    #[test]
    fn auth_advice_depends_on_scheme_and_credentials() {
        let none = NetCause::ProxyAuthRequired {
            schemes: vec!["Basic".into()],
            had_credentials: false,
        };
        assert!(none.to_string().starts_with("proxy_auth_required(Basic): "));
        assert!(none.to_string().contains("user:password@"));
        assert_eq!(none.hint(), None);
        let given = NetCause::ProxyAuthRequired {
            schemes: vec!["Basic".into()],
            had_credentials: true,
        };
        assert!(given.to_string().contains("rejected"));
        assert_eq!(
            with_hint(&given),
            "proxy_auth_required(Basic): the proxy rejected the credentials in the proxy URL; \
             check the user and password"
        );
        let ntlm = NetCause::ProxyAuthRequired {
            schemes: vec!["NTLM".into()],
            had_credentials: true,
        };
        assert!(ntlm.to_string().contains("cntlm"));
        assert_eq!(ntlm.hint(), None);
    }
}
