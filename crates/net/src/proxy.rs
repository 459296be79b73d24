//! Choosing, per request, whether to go direct or through which proxy, from the environment
//! snapshot alone. Nothing here touches the network.

use std::fmt;
use std::net::Ipv4Addr;

use super::cause::{BadProxy, NetCause};
use super::url::{Scheme, Url, UrlError};
use metabob_process::env::Env;
use metabob_process::guard::redact_url_credentials;

/// Why a request goes where it goes; `attach --check` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteReason {
    Proxy,
    Loopback,
    NoProxy {
        /// The NO_PROXY entry that matched, as written.
        entry: String,
    },
    NoneConfigured,
    /// Only HTTPS_PROXY is set and the target is plain http, which it does not cover.
    HttpProxyUnset,
}

impl fmt::Display for RouteReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteReason::Proxy => f.write_str("through a proxy"),
            RouteReason::Loopback => f.write_str("direct (loopback)"),
            RouteReason::NoProxy { entry } => write!(f, "direct (NO_PROXY entry {entry})"),
            RouteReason::NoneConfigured => f.write_str("direct (no proxy configured)"),
            RouteReason::HttpProxyUnset => {
                f.write_str("direct (HTTP_PROXY unset; HTTPS_PROXY covers https targets only)")
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The proxy, redacted; `None` when direct.
    pub via: Option<String>,
    pub reason: RouteReason,
}

impl Route {
    pub fn direct(reason: RouteReason) -> Route {
        Route { via: None, reason }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.via {
            Some(p) => write!(f, "via {p}"),
            None => self.reason.fmt(f),
        }
    }
}

/// What the proxy environment amounts to, redacted, for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyDiagnosis {
    pub https_proxy: Option<String>,
    pub http_proxy: Option<String>,
    /// Entries in force, including the loopback ones added whenever a proxy is set.
    pub no_proxy: Vec<String>,
}

/// One parsed NO_PROXY entry.
#[derive(Clone, Debug, PartialEq, Eq)]
enum NoProxyEntry {
    Any,
    /// A host name or IP literal; a name also covers its subdomains.
    Host {
        name: String,
    },
    HostPort {
        name: String,
        port: u16,
    },
    Cidr(Ipv4Addr, u8),
}

impl NoProxyEntry {
    fn parse(raw: &str) -> Option<NoProxyEntry> {
        let e = raw.trim().to_ascii_lowercase();
        if e.is_empty() {
            return None;
        }
        if e == "*" {
            return Some(NoProxyEntry::Any);
        }
        if let Some((ip, bits)) = e.split_once('/') {
            let ip = ip.parse::<Ipv4Addr>().ok()?;
            let bits = bits.parse::<u8>().ok().filter(|b| *b <= 32)?;
            return Some(NoProxyEntry::Cidr(ip, bits));
        }
        let e = e
            .trim_start_matches("*.")
            .trim_start_matches('.')
            .to_string();
        if let Some(rest) = e.strip_prefix('[') {
            let (host, after) = rest.split_once(']')?;
            let name = host.to_string();
            return Some(match after.strip_prefix(':').and_then(|p| p.parse().ok()) {
                Some(port) => NoProxyEntry::HostPort { name, port },
                None => NoProxyEntry::Host { name },
            });
        }
        // More than one ':' is a bare IPv6 literal, which cannot carry a port unbracketed.
        if e.matches(':').count() == 1 {
            let (host, port) = e.split_once(':')?;
            let name = host.to_string();
            return Some(match port.parse() {
                Ok(port) => NoProxyEntry::HostPort { name, port },
                Err(_) => NoProxyEntry::Host { name },
            });
        }
        Some(NoProxyEntry::Host { name: e })
    }

    fn matches(&self, host: &str, port: u16) -> bool {
        let host = host.trim_end_matches('.');
        match self {
            NoProxyEntry::Any => true,
            NoProxyEntry::Host { name } => host_matches(name, host),
            NoProxyEntry::HostPort { name, port: p } => *p == port && host_matches(name, host),
            NoProxyEntry::Cidr(net, bits) => match host.parse::<Ipv4Addr>() {
                Ok(ip) => {
                    let mask = if *bits == 0 {
                        0
                    } else {
                        u32::MAX << (32 - u32::from(*bits))
                    };
                    u32::from(ip) & mask == u32::from(*net) & mask
                }
                Err(_) => false,
            },
        }
    }
}

fn host_matches(entry: &str, host: &str) -> bool {
    host == entry
        || host
            .strip_suffix(entry)
            .is_some_and(|head| head.ends_with('.'))
}

/// Where one request's first hop is.
#[derive(Clone, Debug)]
pub(crate) enum Hop {
    Direct,
    Proxy(Url),
}

/// The proxy environment, read once when the client is built.
#[derive(Clone, Debug, Default)]
pub(crate) struct ProxySettings {
    https_proxy: Option<String>,
    http_proxy: Option<String>,
    /// (as written, parsed) for every entry in force.
    no_proxy: Vec<(String, NoProxyEntry)>,
}

/// The lowercase name first: curl and most tools let it win, and some CGI hosts poison the
/// uppercase HTTP_PROXY from a request header.
fn first_set<'a>(env: &'a Env, lower: &str, upper: &str) -> Option<&'a str> {
    env.get(lower)
        .or_else(|| env.get(upper))
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

impl ProxySettings {
    pub(crate) fn from_env(env: &Env) -> ProxySettings {
        let https_proxy = first_set(env, "https_proxy", "HTTPS_PROXY").map(String::from);
        let http_proxy = first_set(env, "http_proxy", "HTTP_PROXY").map(String::from);
        let mut no_proxy: Vec<(String, NoProxyEntry)> = first_set(env, "no_proxy", "NO_PROXY")
            .unwrap_or_default()
            .split([',', ' '])
            .filter_map(|raw| Some((raw.trim().to_string(), NoProxyEntry::parse(raw)?)))
            .collect();
        if https_proxy.is_some() || http_proxy.is_some() {
            for lo in ["localhost", "127.0.0.1", "::1"] {
                let entry = NoProxyEntry::Host {
                    name: lo.to_string(),
                };
                if !no_proxy.iter().any(|(_, e)| *e == entry) {
                    no_proxy.push((lo.to_string(), entry));
                }
            }
        }
        ProxySettings {
            https_proxy,
            http_proxy,
            no_proxy,
        }
    }

    // anchor: select-proxy
    pub(crate) fn select(&self, target: &Url) -> Result<(Hop, Route), NetCause> {
        if target.is_loopback() {
            return Ok((Hop::Direct, Route::direct(RouteReason::Loopback)));
        }
        let raw = match target.scheme {
            Scheme::Https => self.https_proxy.as_deref().or(self.http_proxy.as_deref()),
            Scheme::Http => self.http_proxy.as_deref(),
        };
        let Some(raw) = raw else {
            let reason = if target.scheme == Scheme::Http && self.https_proxy.is_some() {
                RouteReason::HttpProxyUnset
            } else {
                RouteReason::NoneConfigured
            };
            return Ok((Hop::Direct, Route::direct(reason)));
        };
        if let Some((written, _)) = self
            .no_proxy
            .iter()
            .find(|(_, e)| e.matches(&target.host, target.port))
        {
            return Ok((
                Hop::Direct,
                Route::direct(RouteReason::NoProxy {
                    entry: written.clone(),
                }),
            ));
        }
        let proxy = parse_proxy(raw)?;
        let route = Route {
            via: Some(proxy.redacted()),
            reason: RouteReason::Proxy,
        };
        Ok((Hop::Proxy(proxy), route))
    }

    pub(crate) fn diagnosis(&self) -> ProxyDiagnosis {
        let show = |raw: &Option<String>| {
            raw.as_deref().map(|r| {
                parse_proxy(r)
                    .map(|u| u.redacted())
                    .unwrap_or(redact_url_credentials(r))
            })
        };
        ProxyDiagnosis {
            https_proxy: show(&self.https_proxy),
            http_proxy: show(&self.http_proxy),
            no_proxy: self.no_proxy.iter().map(|(w, _)| w.clone()).collect(),
        }
    }
}

/// A proxy setting as a URL; one written without a scheme means http.
pub(crate) fn parse_proxy(raw: &str) -> Result<Url, NetCause> {
    let with_scheme = if raw.contains("://") {
        raw.to_string()
    } else {
        format!("http://{raw}")
    };
    Url::parse(&with_scheme).map_err(|e| {
        NetCause::ProxyUnsupported(match e {
            UrlError::UnsupportedScheme { scheme } => BadProxy::Scheme { scheme },
            UrlError::Invalid(_) => BadProxy::Unparseable {
                setting: redact_url_credentials(raw),
            },
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Env {
        Env::new(
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            "/",
        )
    }

    fn url(s: &str) -> Url {
        Url::parse(s).expect("test URL is valid")
    }

    fn route(vars: &[(&str, &str)], target: &str) -> Result<Route, NetCause> {
        ProxySettings::from_env(&env(vars))
            .select(&url(target))
            .map(|(_, r)| r)
    }

    #[test]
    fn no_proxy_entry_forms() {
        let m = |entry: &str, host: &str, port: u16| {
            NoProxyEntry::parse(entry)
                .expect("entry parses")
                .matches(host, port)
        };
        assert!(m("*", "anything.example", 1));
        assert!(m("hub.corp", "hub.corp", 443));
        assert!(m("hub.corp", "api.hub.corp", 443));
        assert!(m(".hub.corp", "api.hub.corp", 443));
        assert!(m(".hub.corp", "hub.corp", 443));
        assert!(m("*.hub.corp", "x.hub.corp", 443));
        assert!(!m("hub.corp", "myhub.corp", 443));
        assert!(m("hub.corp:8443", "hub.corp", 8443));
        assert!(!m("hub.corp:8443", "hub.corp", 443));
        assert!(m("10.0.0.0/8", "10.2.3.4", 80));
        assert!(!m("10.0.0.0/8", "11.2.3.4", 80));
        assert!(m("192.168.1.0/24", "192.168.1.77", 80));
        assert!(!m("192.168.1.0/24", "192.168.2.1", 80));
        assert!(!m("10.0.0.0/8", "ten.example", 80));
        assert!(m("0.0.0.0/0", "8.8.8.8", 80));
        assert!(m("::1", "::1", 80));
        assert!(m("[2001:db8::1]:443", "2001:db8::1", 443));
        assert!(m("HUB.Corp", "hub.corp", 1));
        assert_eq!(NoProxyEntry::parse("10.0.0.0/40"), None);
    }

    #[test]
    fn https_target_falls_back_to_http_proxy() {
        let r = route(&[("HTTP_PROXY", "http://p:3128")], "https://ledger.example").expect("ok");
        assert_eq!(r.via.as_deref(), Some("http://p:3128"));
        let r = route(
            &[("HTTPS_PROXY", "http://s:1"), ("HTTP_PROXY", "http://p:2")],
            "https://l.example",
        )
        .expect("ok");
        assert_eq!(r.via.as_deref(), Some("http://s:1"));
    }

    #[test]
    fn http_target_ignores_https_proxy() {
        let r = route(
            &[("HTTPS_PROXY", "http://s:1")],
            "http://ledger.example:18100",
        )
        .expect("ok");
        assert_eq!(r, Route::direct(RouteReason::HttpProxyUnset));
        let r = route(&[], "http://ledger.example").expect("ok");
        assert_eq!(r, Route::direct(RouteReason::NoneConfigured));
        let r = route(
            &[("HTTPS_PROXY", "http://s:1"), ("HTTP_PROXY", "http://p:2")],
            "http://l.example",
        )
        .expect("ok");
        assert_eq!(r.via.as_deref(), Some("http://p:2"));
    }

    #[test]
    fn lowercase_wins() {
        let vars = [
            ("HTTPS_PROXY", "http://upper:1"),
            ("https_proxy", "http://lower:2"),
        ];
        assert_eq!(
            route(&vars, "https://l.example")
                .expect("ok")
                .via
                .as_deref(),
            Some("http://lower:2")
        );
        let vars = [
            ("HTTP_PROXY", "http://p:1"),
            ("NO_PROXY", "l.example"),
            ("no_proxy", "other.example"),
        ];
        assert_eq!(
            route(&vars, "http://l.example").expect("ok").reason,
            RouteReason::Proxy
        );
    }

    #[test]
    fn loopback_always_direct_and_added_to_no_proxy() {
        let vars = [
            ("HTTP_PROXY", "http://p:1"),
            ("HTTPS_PROXY", "http://p:1"),
            ("NO_PROXY", ""),
        ];
        for t in [
            "http://127.0.0.1:9",
            "https://localhost",
            "http://[::1]:80",
            "http://ledger.localhost",
        ] {
            assert_eq!(
                route(&vars, t).expect("ok"),
                Route::direct(RouteReason::Loopback),
                "{t}"
            );
        }
        let d = ProxySettings::from_env(&env(&[
            ("HTTPS_PROXY", "http://u:pw@p:1"),
            ("NO_PROXY", "hub.corp"),
        ]))
        .diagnosis();
        assert_eq!(d.no_proxy, ["hub.corp", "localhost", "127.0.0.1", "::1"]);
        assert_eq!(d.https_proxy.as_deref(), Some("http://***@p:1"));
        assert!(
            ProxySettings::from_env(&env(&[]))
                .diagnosis()
                .no_proxy
                .is_empty()
        );
    }

    #[test]
    fn no_proxy_match_names_the_entry() {
        let vars = [
            ("HTTPS_PROXY", "http://p:1"),
            ("NO_PROXY", "a.example, .hub.corp"),
        ];
        assert_eq!(
            route(&vars, "https://api.hub.corp").expect("ok"),
            Route::direct(RouteReason::NoProxy {
                entry: ".hub.corp".into()
            })
        );
    }

    #[test]
    fn proxy_settings_parse() {
        assert_eq!(
            parse_proxy("proxy:3128").expect("ok").origin(),
            "http://proxy:3128"
        );
        assert_eq!(
            parse_proxy("socks5://p:1080"),
            Err(NetCause::ProxyUnsupported(BadProxy::Scheme {
                scheme: "socks5".into()
            }))
        );
        let err = route(&[("HTTPS_PROXY", "socks5h://p:1")], "https://l.example").expect_err("bad");
        assert_eq!(err.token(), "proxy_unsupported");
        assert!(
            matches!(parse_proxy("http://u:pw@:1"), Err(NetCause::ProxyUnsupported(BadProxy::Unparseable { setting })) if !setting.contains("pw"))
        );
    }
}
