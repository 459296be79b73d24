//! The named network causes: one variant per way the network can fail a request, each printed
//! as a single line that begins with its token so every surface carries the same words.

use std::fmt;

use super::proxy::Route;
use super::tls::TlsInfo;

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
    ProxyUnsupported(String),
    /// The served chain ends at an issuer nothing in the trust store vouches for.
    TlsIntercepted(String),
    /// A trusted chain, but for another name.
    TlsNameMismatch(String),
    /// Any other handshake failure, with the target's host:port.
    TlsFailed(String),
    DnsFailed(String),
    ConnectTimeout(String),
    ConnectRefused(String),
    ConnectionReset(String),
    ResponseTimeout {
        host: String,
        ms: u64,
    },
    BlockedByPortal(String),
    /// The answer's body is larger than any answer this client reads.
    ResponseTooLarge {
        host: String,
        limit: usize,
    },
    AnchorUnreachable(String),
}

impl NetCause {
    pub fn token(&self) -> &'static str {
        match self {
            NetCause::ProxyAuthRequired { .. } => "proxy_auth_required",
            NetCause::ProxyPortBlocked(_) => "proxy_port_blocked",
            NetCause::ProxyRefused { .. } => "proxy_refused",
            NetCause::ProxyUnsupported(_) => "proxy_unsupported",
            NetCause::TlsIntercepted(_) => "tls_intercepted",
            NetCause::TlsNameMismatch(_) => "tls_name_mismatch",
            NetCause::TlsFailed(_) => "tls_failed",
            NetCause::DnsFailed(_) => "dns_failed",
            NetCause::ConnectTimeout(_) => "connect_timeout",
            NetCause::ConnectRefused(_) => "connect_refused",
            NetCause::ConnectionReset(_) => "connection_reset",
            NetCause::ResponseTimeout { .. } => "response_timeout",
            NetCause::BlockedByPortal(_) => "blocked_by_portal",
            NetCause::ResponseTooLarge { .. } => "response_too_large",
            NetCause::AnchorUnreachable(_) => "anchor_unreachable",
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
                let basic = schemes.iter().any(|s| s.eq_ignore_ascii_case("basic"));
                if basic && *had_credentials {
                    f.write_str("the proxy rejected the credentials in the proxy URL; check the user and password")
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
            NetCause::ProxyPortBlocked(port) => write!(
                f,
                "{t}({port}): the proxy only tunnels to port 443; serve the anchor on 443 or ask for port {port} to be allowed"
            ),
            NetCause::ProxyRefused { proxy } => write!(
                f,
                "{t}: the proxy {proxy} turned the request away itself (a non-JSON 4xx), before it reached the substrate"
            ),
            NetCause::ProxyUnsupported(what) => write!(
                f,
                "{t}({what}): only http:// and https:// proxies are supported; fix HTTPS_PROXY / HTTP_PROXY"
            ),
            NetCause::TlsIntercepted(issuer) => write!(
                f,
                "{t}({issuer}): the certificate chain is signed by an issuer this process does not trust; if that is your organisation's inspection CA, name its PEM file in METABOB_EXTRA_CA_CERTS"
            ),
            NetCause::TlsNameMismatch(host) => write!(
                f,
                "{t}({host}): the server's trusted certificate is for a different name"
            ),
            NetCause::TlsFailed(hp) => write!(f, "{t}({hp}): the TLS handshake failed"),
            NetCause::DnsFailed(host) => write!(f, "{t}({host}): the name does not resolve"),
            NetCause::ConnectTimeout(hp) => write!(
                f,
                "{t}({hp}): no connection within the connect budget: the host is down, restarting or unreachable from here (where it is reachable only through a proxy, set HTTPS_PROXY)"
            ),
            NetCause::ConnectRefused(hp) => {
                write!(f, "{t}({hp}): nothing is accepting connections there")
            }
            NetCause::ConnectionReset(host) => write!(
                f,
                "{t}({host}): the connection closed before a complete answer arrived"
            ),
            NetCause::ResponseTimeout { host, ms } => write!(
                f,
                "{t}({host}, {ms}): connected, but no complete answer within {ms} ms"
            ),
            NetCause::BlockedByPortal(detail) => write!(f, "{t}: {detail}"),
            NetCause::ResponseTooLarge { host, limit } => write!(
                f,
                "{t}({host}): the answer is larger than {} MiB, more than any answer this client reads; nothing of it was used",
                limit >> 20
            ),
            NetCause::AnchorUnreachable(hp) => {
                write!(f, "{t}({hp}): the target could not be reached")
            }
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

impl std::error::Error for NetError {}

#[cfg(test)]
mod tests {
    use super::*;

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
            NetCause::ProxyUnsupported("socks5".into()),
            NetCause::TlsIntercepted("Corp CA".into()),
            NetCause::TlsNameMismatch("h".into()),
            NetCause::TlsFailed("h:443".into()),
            NetCause::DnsFailed("h".into()),
            NetCause::ConnectTimeout("h:443".into()),
            NetCause::ConnectRefused("h:443".into()),
            NetCause::ConnectionReset("h".into()),
            NetCause::ResponseTimeout {
                host: "h".into(),
                ms: 5000,
            },
            NetCause::BlockedByPortal("a page".into()),
            NetCause::AnchorUnreachable("h:443".into()),
        ];
        for c in causes {
            let line = c.to_string();
            assert!(line.starts_with(c.token()), "{line}");
            assert!(!line.contains('\n'), "{line}");
        }
    }

    #[test]
    fn auth_advice_depends_on_scheme_and_credentials() {
        let none = NetCause::ProxyAuthRequired {
            schemes: vec!["Basic".into()],
            had_credentials: false,
        };
        assert!(none.to_string().starts_with("proxy_auth_required(Basic): "));
        assert!(none.to_string().contains("user:password@"));
        let given = NetCause::ProxyAuthRequired {
            schemes: vec!["Basic".into()],
            had_credentials: true,
        };
        assert!(given.to_string().contains("rejected"));
        let ntlm = NetCause::ProxyAuthRequired {
            schemes: vec!["NTLM".into()],
            had_credentials: true,
        };
        assert!(ntlm.to_string().contains("cntlm"));
    }
}
