//! `attach --check` and `doctor`: the attachment run once, as the server runs it, then one
//! read that discovery answers itself (SPEC.md §attach --check and doctor).

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{Value, json};

use super::{Attachment, AttachmentState, ClientClaim};
use crate::config::{self, Config};
use crate::{NetClient, Url};
use metabob_process::env::Env;
use metabob_process::guard::Guard;
use metabob_wire::report::with_hint;

/// The read that proves discovery serves this key.
const CHECK_SHAPE: &str = "vesselRegistry";

#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub config: ConfigHop,
    pub proxy: ProxyHop,
    pub tls: String,
    pub state: AttachmentState,
    pub resolve: Option<ResolveHop>,
    pub attached: bool,
    /// The one line: `attached`, or the named cause.
    pub result: String,
}

#[derive(Debug, Serialize)]
pub struct ConfigHop {
    pub file: Option<String>,
    pub key: Option<String>,
    pub anchor: Option<String>,
    pub source: String,
    pub identity_endpoint: Option<String>,
    pub warnings: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct ProxyHop {
    pub route: String,
    pub https_proxy: Option<String>,
    pub http_proxy: Option<String>,
    pub no_proxy: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct ResolveHop {
    pub shape: &'static str,
    pub ok: bool,
    /// The hop's words as the report prints them: what discovery answered, or the failed
    /// read's line and hint. A report line, so text by design.
    #[serde(rename = "detail")]
    pub line: String,
}

impl CheckReport {
    /// Exit 0 only when attached and the read resolved.
    pub fn ok(&self) -> bool {
        self.attached && self.resolve.as_ref().is_some_and(|r| r.ok)
    }
}

/// Loads configuration from `env` and runs the check (anchor: attach_check). Writes nothing.
pub async fn attach_check(mut env: Env) -> CheckReport {
    let config = config::load(&mut env);
    let net = NetClient::from_env(&env);
    let claim = ClientClaim::from_env(&env, env.cwd());
    // The check writes nothing, so its guard needs no known secrets.
    let attachment = Attachment::new(
        config.clone(),
        net.clone(),
        claim,
        Guard::new(&Env::default(), None),
    );
    let state = attachment.attempt().await;

    let resolve = if state.attached() {
        Some(
            match attachment.resolve(json!({ "type": CHECK_SHAPE })).await {
                Ok(r) if (200..300).contains(&r.status) => {
                    let vessels = r.body.get("vessels").and_then(Value::as_array);
                    let shapes: usize = vessels
                        .map(|vs| {
                            vs.iter()
                                .filter_map(|v| v.get("shapes").and_then(Value::as_array))
                                .map(Vec::len)
                                .sum()
                        })
                        .unwrap_or(0);
                    ResolveHop {
                        shape: CHECK_SHAPE,
                        ok: true,
                        line: format!(
                            "{} vessel(s), {shapes} shape(s) advertised",
                            vessels.map_or(0, Vec::len)
                        ),
                    }
                }
                Ok(r) => ResolveHop {
                    shape: CHECK_SHAPE,
                    ok: false,
                    line: format!("discovery answered HTTP {}", r.status),
                },
                Err(e) => ResolveHop {
                    shape: CHECK_SHAPE,
                    ok: false,
                    line: with_hint(&e),
                },
            },
        )
    } else {
        None
    };

    let route = anchor_route(&config, &net);
    let diag = net.proxy_diagnosis();
    let tls = match (&state.network.tls, config.discovery.as_deref()) {
        (Some(t), _) if t.authorized => {
            format!(
                "verified ({})",
                t.issuer.as_deref().unwrap_or("issuer not reported")
            )
        }
        (Some(t), _) => format!(
            "not trusted: issued by {}",
            t.issuer.as_deref().unwrap_or("an unknown issuer")
        ),
        (None, Some(d)) if d.starts_with("https:") => "not reached".into(),
        (None, Some(_)) => "plain http".into(),
        (None, None) => "no anchor".into(),
    };
    let attached = state.attached();
    let result = match (&state.cause, &resolve) {
        (Some(c), _) => with_hint(c),
        (None, Some(r)) if !r.ok => {
            format!("attached, but the {CHECK_SHAPE} read failed: {}", r.line)
        }
        _ => "attached".into(),
    };
    CheckReport {
        config: ConfigHop {
            file: config.file.as_ref().map(|p| p.display().to_string()),
            key: config.key_hint(),
            anchor: config.discovery.clone(),
            source: config
                .anchor_source
                .map_or("none", |s| s.as_str())
                .to_string(),
            identity_endpoint: config.identity_endpoint.clone(),
            warnings: config.warnings.clone(),
        },
        proxy: ProxyHop {
            route,
            https_proxy: diag.https_proxy,
            http_proxy: diag.http_proxy,
            no_proxy: diag.no_proxy,
        },
        tls,
        state,
        resolve,
        attached,
        result,
    }
}

fn anchor_route(config: &Config, net: &NetClient) -> String {
    let Some(d) = config.discovery.as_deref() else {
        return "no anchor".into();
    };
    match Url::parse(d) {
        Ok(url) => match net.route_for(&url) {
            Ok(route) => route.to_string(),
            Err(cause) => with_hint(&cause),
        },
        Err(e) => format!("the anchor {d} is not a usable URL: {e}"),
    }
}

/// The human report: one line per hop.
pub fn render_text(r: &CheckReport) -> String {
    let mut out = String::new();
    let s = &r.state;
    let line = |out: &mut String, hop: &str, text: &str| {
        let _ = writeln!(out, "{hop:<10} {text}");
    };
    line(
        &mut out,
        "config",
        &format!(
            "file {}; key {}; anchor {} ({})",
            r.config
                .file
                .as_deref()
                .unwrap_or("none (environment only)"),
            r.config.key.as_deref().unwrap_or("not set"),
            r.config.anchor.as_deref().unwrap_or("none"),
            r.config.source
        ),
    );
    let mut proxy = r.proxy.route.clone();
    if !r.proxy.no_proxy.is_empty() {
        let _ = write!(proxy, "; NO_PROXY in force: {}", r.proxy.no_proxy.join(","));
    }
    line(&mut out, "proxy", &proxy);
    line(&mut out, "tls", &r.tls);
    let status = metabob_wire::text::wire_name(&s.bootstrap.status);
    let boot = match (&s.bootstrap.identity_endpoint, &s.bootstrap.detail) {
        (Some(i), _) => format!("{status}: advertises identity {i}"),
        (None, Some(d)) => format!("{status}: {d}"),
        (None, None) => status,
    };
    line(&mut out, "bootstrap", &boot);
    line(
        &mut out,
        "identity",
        &format!(
            "{} (source {}; advertised {}; tried [{}])",
            s.identity.endpoint.as_deref().unwrap_or("none"),
            metabob_wire::text::wire_name(&s.identity.source),
            s.identity.advertised.as_deref().unwrap_or("none"),
            s.identity.tried.join(", ")
        ),
    );
    let org = if s.auth.status == super::AuthStatus::Authenticated {
        format!(
            "org {}; key {}; user {}; scopes {}",
            s.auth.org_id.as_deref().unwrap_or("?"),
            s.auth.key_id.as_deref().unwrap_or("not reported"),
            s.auth
                .account_id
                .as_deref()
                .or(s.auth.user_id.as_deref())
                .unwrap_or("not reported"),
            s.auth
                .scopes
                .as_ref()
                .map(|v| format!("[{}]", v.join(", ")))
                .unwrap_or_else(|| "not reported by identity".into())
        )
    } else if s.auth.status == super::AuthStatus::Pending {
        "not run".into()
    } else {
        metabob_wire::text::wire_name(&s.auth.status)
    };
    line(&mut out, "org check", &org);
    let resolve = match &r.resolve {
        Some(h) => format!("{}: {}", h.shape, h.line),
        None => "skipped (not attached)".into(),
    };
    line(&mut out, "resolve", &resolve);
    line(&mut out, "result", &r.result);
    out
}
