//! One attachment attempt: bootstrap, identity choice, org check (SPEC.md §Attachment).

use std::time::Duration;

use serde_json::{Value, json};

use super::state::*;
use crate::config::{AnchorSource, Config};
use crate::url::Scheme;
use crate::{NetCause, NetClient, NetError, Request, Response, Retry, Url};
use metabob_process::clock::now_ms;
use metabob_wire::report::{Hint, with_hint};
use metabob_wire::text::rfc3339_ms;

const BOOTSTRAP_BUDGET: Duration = Duration::from_secs(5);
const IDENTITY_DIAL_BUDGET: Duration = Duration::from_secs(2);
const ORG_CHECK_BUDGET: Duration = Duration::from_secs(5);

/// What the org check proved about the key.
#[derive(Clone, Debug)]
pub struct OrgCheck {
    pub auth: Auth,
}

/// Runs one attempt, contacting each address at most once (anchor: attach).
pub async fn attach(config: &Config, net: &NetClient) -> AttachmentState {
    let started = now_ms();
    let mut state = AttachmentState {
        anchor: Anchor {
            discovery: config.discovery.clone(),
            source: config.anchor_source.unwrap_or(AnchorSource::None),
        },
        bootstrap: Bootstrap {
            status: BootstrapStatus::Skipped,
            identity_endpoint: None,
            detail: None,
        },
        identity: Identity {
            endpoint: None,
            source: IdentitySource::None,
            advertised: None,
            tried: Vec::new(),
        },
        auth: Auth::pending(),
        cause: None,
        message: None,
        advertised: "none",
        network: Network {
            proxy: net.proxy_diagnosis().into(),
            anchor_route: None,
            cause: None,
            cause_line: None,
            tls: None,
        },
        started_at: rfc3339_ms(started),
        settled_at: None,
        last_checked_at: None,
        settled_ms: None,
    };
    let result = run(config, net, &mut state).await;
    if let Err(cause) = result {
        if let Some(n) = cause.net() {
            state.network.cause = Some(n.token().to_string());
            state.network.cause_line = Some(with_hint(n));
        }
        // An anchor failure leaves the org check pending: it never ran.
        state.auth.status = match &cause {
            Cause::NotConfigured { .. } => AuthStatus::NotConfigured,
            Cause::KeyRejected { .. } => AuthStatus::KeyRejected,
            Cause::IdentityUnreachable { .. } => AuthStatus::IdentityUnreachable,
            _ if state.identity.endpoint.is_some() => AuthStatus::IdentityUnreachable,
            _ => AuthStatus::Pending,
        };
        state.message = Some(with_hint(&cause));
        state.cause = Some(cause);
    }
    let settled = now_ms();
    state.settled_at = Some(rfc3339_ms(settled));
    state.settled_ms = Some(settled);
    state
}

async fn run(config: &Config, net: &NetClient, state: &mut AttachmentState) -> Result<(), Cause> {
    if let (Some(missing), Some(line)) = (config.missing(), config.unattached_line()) {
        return Err(Cause::NotConfigured { missing, line });
    }
    let key = config
        .api_key
        .as_deref()
        .expect("missing() returned None, so a key is set");

    // 1. Bootstrap, when there is an anchor. An explicit identity alone can still attach.
    let mut advertised = None;
    let mut reached_self = None;
    if let Some(discovery) = &config.discovery {
        let url = parse_endpoint(discovery).map_err(|n| anchor_err(discovery, n))?;
        state.network.anchor_route = net.route_for(&url).ok().map(|r| r.to_string());
        let req = Request::get(url.join("/bootstrap"))
            .budget(BOOTSTRAP_BUDGET)
            .retry(Retry::IdempotentAndGateway);
        match net.send(req).await {
            Ok(resp) => {
                record_tls(state, &resp);
                let answer = read_bootstrap(discovery, &resp, state)?;
                reached_self = answer
                    .as_ref()
                    .and_then(|a| as_reached(&a.identity, a.discovery.as_deref(), &url));
                advertised = answer.map(|a| a.identity);
            }
            Err(e) => {
                record_tls_err(state, &e);
                state.bootstrap.status = BootstrapStatus::Unreachable;
                state.bootstrap.detail = Some(with_hint(&e));
                return Err(match e.cause {
                    NetCause::BlockedByPortal(portal) => {
                        state.bootstrap.status = BootstrapStatus::NotSubstrate;
                        Cause::BlockedByPortal {
                            url: discovery.clone(),
                            answer: NotSubstrate::Net(portal),
                        }
                    }
                    cause => anchor_err(discovery, cause),
                });
            }
        }
    }
    state.identity.advertised = advertised.clone();

    // 2. Choose the identity endpoint.
    let identity = if let Some(explicit) = &config.identity_endpoint {
        state.identity.source = IdentitySource::Explicit;
        explicit.clone()
    } else if let Some(reached) = reached_self {
        state.identity.source = IdentitySource::Reached;
        reached
    } else if let Some(adv) = advertised.clone() {
        if let Some(discovery) = config.discovery.as_deref().filter(|d| weaker(&adv, d)) {
            return Err(Cause::IdentityInsecure {
                discovery: discovery.to_string(),
                advertised: adv,
            });
        }
        choose_advertised(config, net, state, &adv).await?
    } else {
        return Err(Cause::IdentityUnreachable {
            advertised: None,
            tried: vec![],
            net: None,
        });
    };
    state.identity.endpoint = Some(identity.clone());
    if !state.identity.tried.contains(&identity) {
        state.identity.tried.push(identity.clone());
    }

    // 3. Prove the key.
    let check = org_check(net, &identity, key).await.map_err(|e| match e {
        OrgCheckError::Rejected(status) => Cause::KeyRejected {
            identity: identity.clone(),
            status,
        },
        OrgCheckError::Portal(answer) => Cause::BlockedByPortal {
            url: identity.clone(),
            answer,
        },
        OrgCheckError::Net(n) => Cause::IdentityUnreachable {
            advertised: advertised.clone(),
            tried: state.identity.tried.clone(),
            net: Some(n),
        },
        e @ (OrgCheckError::Status(_) | OrgCheckError::NoOrg) => {
            state.auth.detail = Some(e.to_string());
            Cause::IdentityUnreachable {
                advertised: advertised.clone(),
                tried: state.identity.tried.clone(),
                net: None,
            }
        }
    })?;
    state.auth = check.auth;
    state.last_checked_at = Some(rfc3339_ms(now_ms()));
    Ok(())
}

fn anchor_err(discovery: &str, cause: NetCause) -> Cause {
    Cause::AnchorUnreachable {
        discovery: discovery.to_string(),
        why: NoBootstrap::Net(cause),
    }
}

fn parse_endpoint(s: &str) -> Result<Url, NetCause> {
    Url::parse(s).map_err(|error| NetCause::BadAddress {
        address: Some(s.to_string()),
        error: Box::new(error),
    })
}

fn record_tls(state: &mut AttachmentState, resp: &Response) {
    if let Some(t) = &resp.tls {
        state.network.tls = Some(TlsReport {
            host: t.host.clone(),
            authorized: t.authorized,
            issuer: t.issuer.clone(),
        });
    }
}

fn record_tls_err(state: &mut AttachmentState, e: &NetError) {
    if let Some(t) = &e.tls {
        state.network.tls = Some(TlsReport {
            host: t.host.clone(),
            authorized: t.authorized,
            issuer: t.issuer.clone(),
        });
    }
}

/// What `/bootstrap` advertised: identity, and the address discovery gives for itself.
struct Advertised {
    identity: String,
    discovery: Option<String>,
}

/// Reads `/bootstrap`'s answer: the advertised identity endpoint, or why this is no substrate.
fn read_bootstrap(
    discovery: &str,
    resp: &Response,
    state: &mut AttachmentState,
) -> Result<Option<Advertised>, Cause> {
    let json = resp.json().filter(|_| !resp.is_html());
    match (resp.status, json) {
        (200..=299, Some(v)) if v.is_object() => {
            state.bootstrap.status = BootstrapStatus::Ok;
            let field = |name: &str| {
                v.get(name)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
            };
            let adv = field("identity_endpoint");
            state.bootstrap.identity_endpoint = adv.clone();
            Ok(adv.map(|identity| Advertised {
                identity,
                discovery: field("discovery_endpoint"),
            }))
        }
        (status, None) if (400..500).contains(&status) && resp.route.via.is_some() => {
            let proxy = resp.route.via.clone().unwrap_or_default();
            state.bootstrap.status = BootstrapStatus::NotSubstrate;
            state.bootstrap.detail = Some(format!(
                "HTTP {status}, not JSON, through the proxy {proxy}, which may have refused it"
            ));
            Err(Cause::ProxyRefused { proxy, status })
        }
        (status, None) | (status @ 200..=299, Some(_)) => {
            let answer = NotSubstrate::Answer {
                status,
                body: Body::of(resp),
            };
            state.bootstrap.status = BootstrapStatus::NotSubstrate;
            state.bootstrap.detail = Some(answer.to_string());
            Err(Cause::BlockedByPortal {
                url: discovery.to_string(),
                answer,
            })
        }
        (status, Some(_)) => {
            state.bootstrap.status = BootstrapStatus::Unreachable;
            state.bootstrap.detail = Some(format!("answered HTTP {status}"));
            Err(Cause::AnchorUnreachable {
                discovery: discovery.to_string(),
                why: NoBootstrap::Status(status),
            })
        }
    }
}

/// Step 2 for an advertised address: use it when it answers; otherwise the H1 rehost when it
/// applies (anchor: rehost-h1); otherwise identity_unreachable.
async fn choose_advertised(
    config: &Config,
    net: &NetClient,
    state: &mut AttachmentState,
    advertised: &str,
) -> Result<String, Cause> {
    state.identity.tried.push(advertised.to_string());
    let dial_err = match Url::parse(advertised) {
        Ok(url) => {
            let req = Request::get(url.join("/health"))
                .budget(IDENTITY_DIAL_BUDGET)
                .retry(Retry::Never);
            match net.send(req).await {
                Ok(_) => {
                    state.identity.source = IdentitySource::Bootstrap;
                    return Ok(advertised.to_string());
                }
                Err(e) => Some(e.cause),
            }
        }
        Err(_) => None,
    };
    if let Some(rehosted) = config
        .discovery
        .as_deref()
        .and_then(|d| rehost(advertised, d))
    {
        tracing::warn!(
            "identity {advertised} advertised by /bootstrap does not answer; trying {rehosted} \
             on discovery's host (interim H1 rehost)"
        );
        state.identity.source = IdentitySource::RehostedH1;
        return Ok(rehosted);
    }
    Err(Cause::IdentityUnreachable {
        advertised: Some(advertised.to_string()),
        tried: state.identity.tried.clone(),
        net: dial_err,
    })
}

// anchor: as-reached
/// When `/bootstrap` advertises identity on discovery's own origin (the embedded ledger serves
/// both), the address discovery was reached at, with identity's path: the advertised one names
/// the server as it sees itself, which behind a port map, a proxy or a container network is
/// not how this client reaches it.
pub fn as_reached(identity: &str, discovery_self: Option<&str>, reached: &Url) -> Option<String> {
    let identity = Url::parse(identity).ok()?;
    let own = Url::parse(discovery_self?).ok()?;
    if identity.origin() != own.origin() {
        return None;
    }
    // Identity at discovery's own path is wherever discovery was reached, path prefix and all.
    let path = if identity.path.trim_end_matches('/') == own.path.trim_end_matches('/') {
        &reached.path
    } else {
        &identity.path
    };
    Some(format!(
        "{}{}",
        reached.origin(),
        path.trim_end_matches('/')
    ))
}

// anchor: weaker-scheme
/// Whether `identity` would carry the key in clear where discovery was reached over TLS.
fn weaker(identity: &str, discovery: &str) -> bool {
    let (Ok(identity), Ok(discovery)) = (Url::parse(identity), Url::parse(discovery)) else {
        return false;
    };
    discovery.scheme == Scheme::Https && identity.scheme != Scheme::Https
}

/// The same port on discovery's host at discovery's published-port offset, for an advertised
/// loopback or single-label container address on an 8xxx port.
pub fn rehost(advertised: &str, discovery: &str) -> Option<String> {
    let adv = Url::parse(advertised).ok()?;
    let disc = Url::parse(discovery).ok()?;
    let single_label = !adv.host.contains('.') && !adv.host.contains(':');
    if !(adv.is_loopback() || single_label) || !(8000..=8999).contains(&adv.port) {
        return None;
    }
    let port = i32::from(adv.port) + (i32::from(disc.port) - 8100);
    let port = u16::try_from(port).ok().filter(|p| *p != 0)?;
    let mut out = disc.clone();
    out.port = port;
    let origin = out.origin();
    (origin != Url::parse(advertised).ok()?.origin()).then_some(origin)
}

/// Why the org check proved nothing about the key.
#[derive(Debug, thiserror::Error)]
pub enum OrgCheckError {
    #[error("identity answered HTTP {0}: it rejected the key")]
    Rejected(u16),
    #[error("identity answered with a page that is not the substrate's ({0})")]
    Portal(NotSubstrate),
    #[error(transparent)]
    Net(#[from] NetCause),
    #[error("org check answered HTTP {0}")]
    Status(u16),
    #[error("org check answered without an org")]
    NoOrg,
}

impl Hint for OrgCheckError {
    fn hint(&self) -> Option<String> {
        match self {
            OrgCheckError::Net(n) => n.hint(),
            _ => None,
        }
    }
}

/// Proves the key against identity in both forms (anchor: org-check). Through a proxy only the
/// header goes: an inspecting proxy logs bodies where it masks the Authorization header.
pub async fn org_check(
    net: &NetClient,
    identity: &str,
    key: &str,
) -> Result<OrgCheck, OrgCheckError> {
    let url = Url::parse(identity)
        .map_err(|error| NetCause::BadAddress {
            address: Some(identity.to_string()),
            error: Box::new(error),
        })?
        .join("/v1/auth/resolve");
    let direct = net.route_for(&url).map(|r| r.via.is_none()).unwrap_or(true);
    let body = if direct {
        json!({ "impulse": { "type": "authentication", "pointer": { "type": "apiKey", "apiKey": key } } })
    } else {
        json!({})
    };
    let req = Request::post_json(url, &body)
        .header("authorization", format!("ApiKey {key}"))
        .budget(ORG_CHECK_BUDGET)
        .retry(Retry::Idempotent);
    let resp = net.send(req).await.map_err(|e| match e.cause {
        NetCause::BlockedByPortal(portal) => OrgCheckError::Portal(NotSubstrate::Net(portal)),
        c => OrgCheckError::Net(c),
    })?;
    if resp.status == 401 || resp.status == 403 {
        return Err(OrgCheckError::Rejected(resp.status));
    }
    let Some(v) = resp.json().filter(|v| v.is_object() && !resp.is_html()) else {
        return Err(OrgCheckError::Portal(NotSubstrate::Answer {
            status: resp.status,
            body: Body::of(&resp),
        }));
    };
    if !(200..300).contains(&resp.status) {
        return Err(OrgCheckError::Status(resp.status));
    }
    let s = |a: &str, b: &str| {
        v.get(a)
            .or_else(|| v.get(b))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let org_id = s("orgId", "org_id");
    if org_id.is_none() {
        return Err(OrgCheckError::NoOrg);
    }
    let scopes = v.get("scopes").and_then(Value::as_array).map(|a| {
        a.iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect::<Vec<_>>()
    });
    Ok(OrgCheck {
        auth: Auth {
            status: AuthStatus::Authenticated,
            org_id,
            key_id: s("keyId", "key_id"),
            account_id: s("accountId", "account_id"),
            user_id: s("userId", "user_id"),
            scopes,
            detail: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::rehost;

    #[test]
    fn rehost_moves_loopback_and_container_names_to_discoverys_host() {
        assert_eq!(
            rehost("http://127.0.0.1:8101", "http://127.0.0.1:18100").as_deref(),
            Some("http://127.0.0.1:18101")
        );
        assert_eq!(
            rehost("http://substrate-live:8101", "http://hub.lan:26100").as_deref(),
            Some("http://hub.lan:26101")
        );
        assert_eq!(
            rehost("http://id.example.com:8101", "http://hub.lan:26100"),
            None
        );
        assert_eq!(
            rehost("http://127.0.0.1:9101", "http://127.0.0.1:18100"),
            None
        );
    }
}
