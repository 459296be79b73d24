//! A concept's recent usage rows: the one direct REST read the concept tools make, since no
//! concept-db shape serves them (anchor: usage-history-direct). concept-db is found through
//! discovery's `vesselCapability` and read at `GET /concepts/:id/usage` on the attachment's
//! request path. Whatever stops the read, the aggregate the caller already has stands, and the
//! section says why the rows are missing.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use serde_json::{Value, json};

use super::render::{line, or_dash, push_skipped, read_list, read_text, read_time};
use metabob_net::attachment::Attachment;
use metabob_net::{Request, Url};

/// The whole read's budget: rows are a convenience beside an aggregate already in hand.
const HISTORY_BUDGET: Duration = Duration::from_secs(3);
/// Vessels of a `vesselCapability` answer looked at, whatever it lists.
const MAX_VESSELS: usize = 20;

/// Why the rows are missing, and where they were to come from when that was known.
struct Unavailable {
    at: Option<String>,
    why: String,
}

impl Unavailable {
    fn at(at: &Url, why: impl Into<String>) -> Self {
        Unavailable {
            at: Some(at.redacted()),
            why: why.into(),
        }
    }
}

/// The `Recent usage` section: the rows, or the line saying why there are none.
pub async fn section(att: &Attachment, id: &str, limit: u32) -> String {
    match recent(att, id, limit).await {
        Ok(rows) => render(&rows),
        Err(u) => {
            let whence = match &u.at {
                Some(at) => format!("recent rows come from concept-db directly at {at}: "),
                None => "recent rows come from concept-db directly: ".into(),
            };
            format!(
                "Recent usage: unavailable — {whence}{}; the aggregate above is complete.",
                line(&u.why, 400)
            )
        }
    }
}

async fn recent(
    att: &Attachment,
    id: &str,
    limit: u32,
) -> Result<(Vec<UsageRow>, usize), Unavailable> {
    let endpoint = locate(att).await?;
    let discovery = att
        .config()
        .discovery
        .as_deref()
        .and_then(|d| Url::parse(d).ok());
    if not_dialled(&endpoint, discovery.as_ref()) {
        return Err(Unavailable::at(
            &endpoint,
            "not dialled: a private address advertised for a host other than discovery's is almost never reachable from here",
        ));
    }
    // The id goes into a path: only what an id is made of, so it cannot reach another route.
    let safe = id.len() <= 200
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if !safe {
        return Err(Unavailable::at(
            &endpoint,
            "the concept id is not one a URL path can carry",
        ));
    }
    let url = endpoint.join(&format!("/concepts/{id}/usage?limit={limit}"));
    let key = att.config().api_key.clone().unwrap_or_default();
    let req = Request::get(url)
        .header("authorization", format!("ApiKey {key}"))
        .budget(HISTORY_BUDGET);
    let resp = att
        .net()
        .send(req)
        .await
        .map_err(|e| Unavailable::at(&endpoint, e.to_string()))?;
    let body = resp.json().unwrap_or(Value::Null);
    if !(200..300).contains(&resp.status) {
        let token = read_text(body.get("error"), 60);
        let detail = read_text(body.get("detail"), 200);
        let why = format!("HTTP {} {}", resp.status, or_dash(&token));
        let why = if detail.is_empty() {
            why
        } else {
            format!("{why}: {detail}")
        };
        return Err(Unavailable::at(&endpoint, why));
    }
    let Some(list) = body.get("usage").and_then(Value::as_array) else {
        return Err(Unavailable::at(&endpoint, "the answer holds no usage list"));
    };
    Ok(read_list(list, limit as usize, UsageRow::read))
}

/// concept-db's address from discovery: a vessel's public endpoint, else its endpoint.
async fn locate(att: &Attachment) -> Result<Url, Unavailable> {
    let pointer = json!({"type": "vesselCapability", "shape": "conceptUsageStats"});
    let unavailable = |why: String| Unavailable { at: None, why };
    let body = att
        .resolve(pointer)
        .await
        .and_then(|r| r.ok("vesselCapability"))
        .map_err(|e| {
            unavailable(format!(
                "discovery could not say where concept-db is: {}",
                metabob_wire::report::with_hint(&e)
            ))
        })?;
    let vessels = body.get("vessels").and_then(Value::as_array);
    vessels
        .into_iter()
        .flatten()
        .take(MAX_VESSELS)
        .find_map(|v| {
            let public = v.get("public_endpoint").and_then(Value::as_str);
            let endpoint = public
                .filter(|s| !s.trim().is_empty())
                .or_else(|| v.get("endpoint").and_then(Value::as_str))?;
            Url::parse(endpoint).ok()
        })
        .ok_or_else(|| unavailable("discovery names no concept-db vessel with an endpoint".into()))
}

/// Whether an advertised endpoint is left alone (anchor: private-address): a private address
/// (RFC 1918, CGNAT, link-local, IPv6 unique-local and link-local) names a host on the
/// producer's own network, which a client elsewhere almost never reaches; when discovery
/// itself is on that host, the client evidently does reach it.
pub fn not_dialled(endpoint: &Url, discovery: Option<&Url>) -> bool {
    is_private(&endpoint.host) && discovery.is_none_or(|d| d.host != endpoint.host)
}

/// An IP literal in a private range. A name is never private here: telling would take a lookup.
fn is_private(host: &str) -> bool {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => private_v4(v4),
        Ok(IpAddr::V6(v6)) => v6
            .to_ipv4_mapped()
            .map_or_else(|| private_v6(v6), private_v4),
        Err(_) => false,
    }
}

fn private_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    // is_private covers 10/8, 172.16/12 and 192.168/16; CGNAT is 100.64/10.
    ip.is_private() || ip.is_link_local() || (a == 100 && (64..128).contains(&b))
}

fn private_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    // fc00::/7 unique-local, fe80::/10 link-local.
    (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80
}

/// One usage row, bounded.
struct UsageRow {
    outcome: String,
    at: Option<String>,
    trace: String,
    activity: String,
    task: String,
}

impl UsageRow {
    fn read(v: &Value) -> Option<UsageRow> {
        let outcome = read_text(v.get("outcome"), 40);
        if outcome.is_empty() {
            return None;
        }
        Some(UsageRow {
            outcome,
            at: read_time(v.get("created_at")),
            trace: read_text(v.get("trace_id"), 120),
            activity: read_text(v.get("activity_id"), 120),
            task: read_text(v.get("task_id"), 120),
        })
    }
}

fn render((rows, skipped): &(Vec<UsageRow>, usize)) -> String {
    let mut out = match rows.len() {
        0 => "Recent usage: none recorded.\n".to_string(),
        n => format!("Recent usage (newest first, {n}):\n"),
    };
    for r in rows {
        let _ = writeln!(
            out,
            "- {} at {} · trace {} · activity {} · task {}",
            r.outcome,
            r.at.as_deref().unwrap_or("?"),
            or_dash(&r.trace),
            or_dash(&r.activity),
            or_dash(&r.task)
        );
    }
    push_skipped(&mut out, *skipped, "usage rows");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).expect("a test URL")
    }

    #[test]
    fn private_addresses_elsewhere_are_not_dialled() {
        let discovery = url("https://ledger.example");
        for private in [
            "http://10.1.2.3:8080",
            "http://172.16.0.1",
            "http://172.31.255.255",
            "http://192.168.1.10:9000",
            "http://100.64.0.1",
            "http://100.127.255.254",
            "http://169.254.10.1",
            "http://[fd12:3456::1]:8080",
            "http://[fc00::1]",
            "http://[fe80::1]",
            "http://[::ffff:10.0.0.1]",
        ] {
            assert!(not_dialled(&url(private), Some(&discovery)), "{private}");
            assert!(not_dialled(&url(private), None), "{private}");
        }
        for public in [
            "http://127.0.0.1:9000",
            "http://[::1]:9000",
            "http://8.8.8.8",
            "http://172.32.0.1",
            "http://100.63.255.255",
            "http://100.128.0.1",
            "http://192.169.0.1",
            "http://[2001:db8::1]",
            "https://concept-db.internal",
            "http://10.example",
        ] {
            assert!(!not_dialled(&url(public), Some(&discovery)), "{public}");
        }
    }

    #[test]
    fn a_private_address_on_discoverys_own_host_is_dialled() {
        let discovery = url("http://10.0.0.5:7000");
        assert!(!not_dialled(&url("http://10.0.0.5:7001"), Some(&discovery)));
        assert!(not_dialled(&url("http://10.0.0.6:7001"), Some(&discovery)));
        let v6 = url("http://[fd00::5]:7000");
        assert!(!not_dialled(&url("http://[fd00::5]:9"), Some(&v6)));
    }

    #[test]
    fn rows_render_bounded_and_skip_what_cannot_be_read() {
        let rows = vec![
            json!({"outcome": "success", "created_at": "2025-01-02T03:04:05.000Z", "trace_id": "t\n1"}),
            json!({"outcome": 5}),
        ];
        let out = render(&read_list(&rows, 10, UsageRow::read));
        assert_eq!(
            out,
            "Recent usage (newest first, 1):\n- success at 2025-01-02T03:04:05.000Z · trace t 1 · activity — · task —\n(1 usage rows in the answer could not be read and are not shown.)\n"
        );
    }
}
