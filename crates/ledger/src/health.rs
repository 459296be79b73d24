//! `ledger health`: a ledger's `GET /health` asked over the one HTTP path, as a container
//! healthcheck or an operator asks it. Over HTTPS the certificate is checked against the same
//! trust as every client here, so a probe at the ledger's public name proves what a cell needs:
//! the name resolves, the port answers, the certificate verifies, the store is open.

use std::time::Duration;

use metabob_net::{NetCause, NetClient, Request, Retry, Url};
use metabob_process::env::Env;

/// How long the probe waits: under a healthcheck's usual timeout.
const BUDGET: Duration = Duration::from_secs(3);

/// Why a ledger is not healthy.
#[derive(Debug, thiserror::Error)]
pub enum Unhealthy {
    #[error("{url}: {source}")]
    BadUrl {
        url: String,
        source: metabob_net::UrlError,
    },
    #[error("{url}/health did not answer: {cause}")]
    NoAnswer {
        url: String,
        #[source]
        cause: NetCause,
    },
    #[error("{url}/health answered HTTP {status}, not the ledger's {{\"status\":\"ok\"}}")]
    NotOk { url: String, status: u16 },
}

/// No advice of its own: the line names the URL and what it did; the network's cause brings its.
impl metabob_wire::report::Hint for Unhealthy {
    fn hint(&self) -> Option<String> {
        match self {
            Unhealthy::NoAnswer { cause, .. } => cause.hint(),
            Unhealthy::BadUrl { .. } | Unhealthy::NotOk { .. } => None,
        }
    }
}

/// What a healthy ledger said.
#[derive(Debug)]
pub struct Healthy {
    pub version: String,
    /// Whether the answer came over verified TLS.
    pub tls: bool,
}

pub async fn probe(url: &str, env: &Env) -> Result<Healthy, Unhealthy> {
    let url = url.trim_end_matches('/');
    let parsed = Url::parse(url).map_err(|source| Unhealthy::BadUrl {
        url: url.to_string(),
        source,
    })?;
    let req = Request::get(parsed.join("/health"))
        .budget(BUDGET)
        .retry(Retry::Never);
    let resp = NetClient::from_env(env)
        .send(req)
        .await
        .map_err(|e| Unhealthy::NoAnswer {
            url: url.to_string(),
            cause: e.cause,
        })?;
    let body = resp.json().filter(|v| v["status"] == "ok");
    match body {
        Some(v) if resp.status == 200 => Ok(Healthy {
            version: v["version"].as_str().unwrap_or("unknown").to_string(),
            tls: resp.tls.as_ref().is_some_and(|t| t.authorized),
        }),
        _ => Err(Unhealthy::NotOk {
            url: url.to_string(),
            status: resp.status,
        }),
    }
}
