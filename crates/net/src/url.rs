//! A small URL type for the two schemes this client speaks.
//!
//! The `url` crate would accept far more than a substrate address or a proxy setting can be,
//! and it normalises hosts in ways that make NO_PROXY matching and redaction harder to reason
//! about; a substrate URL is always `http(s)://[user[:pass]@]host[:port][/path][?query]`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::cause::Target;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("unsupported URL scheme {scheme}: only http and https are spoken")]
    UnsupportedScheme { scheme: String },
    #[error("invalid URL: {0}")]
    Invalid(#[from] Malformed),
}

/// What is wrong with a URL that does not parse. Nothing here holds a password: the input is
/// kept only with its credentials masked, and a bad escape in them is not quoted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// `input` has its credentials masked.
    #[error("{input:?} has no scheme")]
    NoScheme { input: String },
    #[error("the path contains whitespace")]
    PathWhitespace,
    #[error("unclosed '[' in the host")]
    UnclosedBracket,
    #[error("{host:?} is not an IPv6 address")]
    NotIpv6 { host: String },
    #[error("junk after the IPv6 host")]
    AfterIpv6,
    #[error("the host is empty")]
    EmptyHost,
    #[error("{host:?} is not a host name")]
    NotAHost { host: String },
    #[error("{port:?} is not a port")]
    NotAPort { port: String },
    #[error("a bad %-escape in the credentials")]
    BadEscape,
    #[error("credentials are not UTF-8")]
    CredentialsNotUtf8,
}

// Both say what is wrong with the text; neither has advice of its own to give.
impl metabob_wire::report::Hint for UrlError {}

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Url {
    pub scheme: Scheme,
    pub username: Option<String>,
    pub password: Option<String>,
    /// An IPv6 literal is kept without its brackets.
    pub host: String,
    pub port: u16,
    /// Path and query; always starts with '/'.
    pub path: String,
}

impl Url {
    pub fn parse(input: &str) -> Result<Url, UrlError> {
        let s = input.trim();
        let Some((scheme, rest)) = s.split_once("://") else {
            return Err(Malformed::NoScheme {
                input: metabob_process::guard::redact_url_credentials(s),
            }
            .into());
        };
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            other => {
                return Err(UrlError::UnsupportedScheme {
                    scheme: other.to_string(),
                });
            }
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(split);
        let path = match tail.chars().next() {
            None => "/".to_string(),
            Some('?') => format!("/{tail}"),
            Some(_) => tail.to_string(),
        };
        if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Malformed::PathWhitespace.into());
        }
        // The last '@' separates credentials: a password may itself contain an unencoded '@'.
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        let (username, password) = match userinfo {
            None => (None, None),
            Some(info) => {
                let (u, p) = match info.split_once(':') {
                    Some((u, p)) => (u, Some(p)),
                    None => (info, None),
                };
                (Some(percent_decode(u)?), p.map(percent_decode).transpose()?)
            }
        };
        let (host, port_str) = if let Some(after) = hostport.strip_prefix('[') {
            let Some((h, after)) = after.split_once(']') else {
                return Err(Malformed::UnclosedBracket.into());
            };
            if h.parse::<Ipv6Addr>().is_err() {
                return Err(Malformed::NotIpv6 {
                    host: h.to_string(),
                }
                .into());
            }
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or(Malformed::AfterIpv6)?),
            };
            (h.to_ascii_lowercase(), port)
        } else {
            match hostport.split_once(':') {
                Some((h, p)) => (h.to_ascii_lowercase(), Some(p)),
                None => (hostport.to_ascii_lowercase(), None),
            }
        };
        if host.is_empty() {
            return Err(Malformed::EmptyHost.into());
        }
        if host
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "/\\@[]<>\"".contains(c))
        {
            return Err(Malformed::NotAHost { host }.into());
        }
        let port =
            match port_str {
                None | Some("") => scheme.default_port(),
                Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                    Malformed::NotAPort {
                        port: p.to_string(),
                    }
                })?,
            };
        Ok(Url {
            scheme,
            username,
            password,
            host,
            port,
            path,
        })
    }

    /// The port when it differs from the scheme's default.
    pub fn explicit_port(&self) -> Option<u16> {
        (self.port != self.scheme.default_port()).then_some(self.port)
    }

    /// This URL with `path` appended to its own path (a trailing '/' on the base is dropped),
    /// so `https://h/api/` joined with `/bootstrap` is `https://h/api/bootstrap`.
    pub fn join(&self, path: &str) -> Url {
        let base = self.path.trim_end_matches('/');
        let sep = if path.starts_with('/') || path.starts_with('?') {
            ""
        } else {
            "/"
        };
        let mut joined = format!("{base}{sep}{path}");
        if !joined.starts_with('/') {
            joined.insert(0, '/');
        }
        Url {
            path: joined,
            ..self.clone()
        }
    }

    /// `scheme://host:port`, never with credentials.
    pub fn origin(&self) -> String {
        format!("{}://{}", self.scheme.as_str(), self.host_port())
    }

    /// `host:port`, an IPv6 host in brackets.
    pub fn host_port(&self) -> String {
        self.target().to_string()
    }

    /// Host and port, as the named causes carry them.
    pub fn target(&self) -> Target {
        Target::from(self)
    }

    pub fn bracketed_host(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        }
    }

    /// The Host header's value: the port only when it is not the scheme's default.
    pub fn host_header(&self) -> String {
        match self.explicit_port() {
            Some(p) => format!("{}:{p}", self.bracketed_host()),
            None => self.bracketed_host(),
        }
    }

    pub fn is_loopback(&self) -> bool {
        is_loopback_host(&self.host)
    }

    pub fn has_credentials(&self) -> bool {
        self.username.is_some() || self.password.is_some()
    }

    // anchor: redact-credentials
    /// The URL as it may appear in a log line or a report: its whole userinfo becomes `***`,
    /// and the rest passes the one redaction owner (a secret-named query parameter).
    pub fn redacted(&self) -> String {
        let creds = if self.has_credentials() {
            format!("{}@", metabob_process::guard::MASK)
        } else {
            String::new()
        };
        let port = self
            .explicit_port()
            .map(|p| format!(":{p}"))
            .unwrap_or_default();
        let path = if self.path == "/" {
            ""
        } else {
            self.path.as_str()
        };
        metabob_process::guard::redact_url_credentials(&format!(
            "{}://{creds}{}{port}{path}",
            self.scheme.as_str(),
            self.bracketed_host()
        ))
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

// Debug goes to logs as easily as Display does, so it must not show a password either.
impl fmt::Debug for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Url({})", self.redacted())
    }
}

pub(crate) fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    if h == "localhost" || h.ends_with(".localhost") {
        return true;
    }
    match h.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => v4.is_loopback(),
        Ok(IpAddr::V6(v6)) => {
            v6.is_loopback()
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4: Ipv4Addr| v4.is_loopback())
        }
        Err(_) => false,
    }
}

fn percent_decode(s: &str) -> Result<String, UrlError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            let byte = hex.and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(byte) = byte else {
                return Err(Malformed::BadEscape.into());
            };
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Malformed::CredentialsNotUtf8.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_defaults_and_paths() {
        let u = Url::parse("https://Ledger.Example/api?x=1#frag").expect("valid");
        assert_eq!(u.scheme, Scheme::Https);
        assert_eq!(u.host, "ledger.example");
        assert_eq!(u.port, 443);
        assert_eq!(u.path, "/api?x=1");
        assert_eq!(u.explicit_port(), None);
        let u = Url::parse("http://h:8080").expect("valid");
        assert_eq!(
            (u.port, u.path.as_str(), u.explicit_port()),
            (8080, "/", Some(8080))
        );
        assert_eq!(Url::parse("http://h?q").expect("valid").path, "/?q");
    }

    #[test]
    fn parses_ipv6_and_credentials() {
        let u = Url::parse("http://us%40er:p@ss@[::1]:3128/").expect("valid");
        assert_eq!(u.host, "::1");
        assert_eq!(u.port, 3128);
        assert_eq!(u.username.as_deref(), Some("us@er"));
        assert_eq!(u.password.as_deref(), Some("p@ss"));
        assert_eq!(u.host_port(), "[::1]:3128");
        assert_eq!(u.origin(), "http://[::1]:3128");
        assert!(u.is_loopback());
        assert_eq!(
            Url::parse("https://[2001:db8::1]").expect("valid").port,
            443
        );
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(
            Url::parse("socks5://p:1080"),
            Err(UrlError::UnsupportedScheme {
                scheme: "socks5".into()
            })
        );
        for bad in [
            "proxy:3128",
            "http://",
            "http://h:99999",
            "http://h:x",
            "http://[::1",
            "http://a b",
        ] {
            assert!(
                matches!(Url::parse(bad), Err(UrlError::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn redaction_hides_credentials_everywhere() {
        let u = Url::parse("http://user:secret@proxy:3128").expect("valid");
        assert_eq!(u.redacted(), "http://***@proxy:3128");
        assert_eq!(u.to_string(), "http://***@proxy:3128");
        assert!(!format!("{u:?}").contains("secret"));
        assert_eq!(
            Url::parse("https://h/x").expect("valid").to_string(),
            "https://h/x"
        );
        assert_eq!(
            metabob_process::guard::redact_url_credentials("http://u:pw@p:1"),
            "http://u:***@p:1"
        );
        assert_eq!(
            metabob_process::guard::redact_url_credentials("u:pw@p:1"),
            "u:***@p:1"
        );
    }

    #[test]
    fn join_and_loopback() {
        let base = Url::parse("https://h/api/").expect("valid");
        assert_eq!(base.join("/bootstrap").path, "/api/bootstrap");
        assert_eq!(
            Url::parse("https://h").expect("valid").join("resolve").path,
            "/resolve"
        );
        for h in ["127.0.0.1", "127.9.9.9", "localhost", "a.localhost", "::1"] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in ["10.0.0.1", "localhost.example", "::2"] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }
}
