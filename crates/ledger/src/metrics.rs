//! `GET /metrics` (SPEC.md §Metrics): the ledger's counters and histograms, kept as requests
//! run, and its gauges, read from the store at scrape time, in the OpenMetrics text format that
//! Prometheus scrapes.
//!
//! What a scrape may see: the process-wide families (requests, writes, batches, takes, claims,
//! readers) are counts with no org or repository in them. The task and cell gauges are per org
//! and are read only for the orgs the scraper may see: the scraping key's own, or, keyless on a
//! loopback listener, every org (the host's own operator, who could open the store anyway).
//!
//! Every label value that is text is a [`LabelText`], which escapes it: an org's name is
//! whatever its creator typed, a repository's path whatever a write key recorded a finding
//! under, and a route, though a pattern of the router's, goes the same way.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde_json::Value;

use super::board::BoardRequest;
use super::db::DbStats;
use super::errors::ApiError;
use super::resolve::Shared;
use metabob_wire::board::Board;
use metabob_wire::text::parse_rfc3339_ms;
use metabob_wire::verdict::{VERDICT_SHAPE, Verdict, VerdictKind};

/// What `/metrics` answers with: OpenMetrics text, which Prometheus asks for and parses.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// How recent a cell's last claim or renewal must be for a cell that holds nothing to count as
/// `idle` rather than gone: a quarter of an hour, past any renewal interval a cell uses.
pub const RECENT_CELL_MS: i64 = 15 * 60_000;
/// The most orgs one keyless scrape reads the board of, the first by name: a bound on a
/// scrape's work, far above the orgs one ledger serves.
pub const MAX_SCRAPED_ORGS: i64 = 100;

/// A label value that is text, written escaped as the text format wants it between its quotes:
/// `\` as `\\`, `"` as `\"` and a newline as `\n`, the three escapes OpenMetrics (and the
/// Prometheus text format) define; every other character stands for itself. `prometheus-client`'s
/// text encoder writes a value as it is given (its `String` impl escapes nothing), so this is the
/// one place a value is escaped, and it is escaped once. Only the text encoder is used: the
/// crate's protobuf one would want the value unescaped.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct LabelText(String);

impl EncodeLabelValue for LabelText {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        let mut rest = self.0.as_str();
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..at])?;
            encoder.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        encoder.write_str(rest)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: LabelText,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: LabelText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    org: LabelText,
    repo: LabelText,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CellLabels {
    org: LabelText,
    state: &'static str,
}

fn duration_histogram() -> Histogram {
    // 1 ms to about 16 s: a request's budget is 10 s by default.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// The counters and histograms the routes feed; the store's own (writes, batches) are in
/// [`DbStats`], owned by the store.
pub struct Metrics {
    http_requests: Family<HttpLabels, Counter>,
    http_duration: Family<RouteLabel, Histogram, fn() -> Histogram>,
    takes: Family<OutcomeLabel, Counter>,
    claims: Family<OutcomeLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            http_requests: Family::default(),
            http_duration: Family::new_with_constructor(duration_histogram),
            takes: Family::default(),
            claims: Family::default(),
        }
    }
}

/// The word a take's answer is counted under.
pub fn take_outcome(answer: Result<&Value, &ApiError>) -> &'static str {
    match answer {
        Ok(body) => match body.pointer("/taken/outcome").and_then(Value::as_str) {
            Some("claimed") => "claimed",
            Some("renewed") => "renewed",
            _ => "nothing_free",
        },
        Err(e) if e.status().is_client_error() => "refused",
        Err(_) => "failed",
    }
}

/// The word a `concept_create_write` answer is counted under as a claim row, if its concept is
/// one.
fn claim_outcome(answer: &Value) -> Option<&'static str> {
    let concept = answer.get("concept")?;
    if concept.get("shape").and_then(Value::as_str) != Some(VERDICT_SHAPE) {
        return None;
    }
    match Verdict::read(concept).ok()??.kind {
        VerdictKind::Claimed => Some("claimed"),
        VerdictKind::Withdrawn => Some("released"),
        VerdictKind::Failed => Some("failed"),
        _ => None,
    }
}

impl Metrics {
    /// Counts a take once its write has been answered.
    pub fn count_take(&self, answer: Result<&Value, &ApiError>) {
        let outcome = take_outcome(answer);
        self.takes.get_or_create(&OutcomeLabel { outcome }).inc();
        if matches!(outcome, "claimed" | "renewed") {
            self.claims
                .get_or_create(&OutcomeLabel { outcome: "claimed" })
                .inc();
        }
    }

    /// Counts a write's answer when it wrote a claim row (a cell's own claim, renewal or
    /// give-back on the read-back path).
    pub fn count_concept(&self, answer: &Value) {
        if let Some(outcome) = claim_outcome(answer) {
            self.claims.get_or_create(&OutcomeLabel { outcome }).inc();
        }
    }

    fn count_request(&self, route: String, status: u16, seconds: f64) {
        let route = LabelText(route);
        self.http_duration
            .get_or_create(&RouteLabel {
                route: route.clone(),
            })
            .observe(seconds);
        self.http_requests
            .get_or_create(&HttpLabels { route, status })
            .inc();
    }

    /// The exposition of one scrape: the shared families, then the gauges read for `seen`.
    pub fn render(
        &self,
        db: &DbStats,
        readers_busy: usize,
        seen: &[(String, Board)],
        now: i64,
    ) -> String {
        let mut registry = Registry::default();
        // Registered per scrape: each family is a handle on the shared counts, and the gauges
        // are this scrape's reading, so nothing stale can linger in them.
        registry.register(
            "metabob_http_requests",
            "HTTP requests answered, by route pattern and status",
            self.http_requests.clone(),
        );
        registry.register(
            "metabob_http_request_duration_seconds",
            "Time from a request's arrival to its answer, by route pattern",
            self.http_duration.clone(),
        );
        registry.register(
            "metabob_takes",
            "Atomic takes (taskTake_write) by outcome",
            self.takes.clone(),
        );
        registry.register(
            "metabob_claims",
            "Claim rows written: claimed (a claim or renewal), released, failed",
            self.claims.clone(),
        );
        registry.register(
            "metabob_writes",
            "Writes committed to the store",
            db.writes.clone(),
        );
        registry.register(
            "metabob_group_commit_batch_size",
            "Writes in each SQLite commit",
            db.batches.clone(),
        );
        let busy = Gauge::<i64>::default();
        busy.set(readers_busy as i64);
        registry.register(
            "metabob_readers_busy",
            "Reading connections lent out now",
            busy,
        );
        let tasks = Family::<TaskLabels, Gauge>::default();
        let cells = Family::<CellLabels, Gauge>::default();
        for (org, board) in seen {
            for repo in &board.repositories {
                for (state, n) in repo.counts() {
                    tasks
                        .get_or_create(&TaskLabels {
                            org: LabelText(org.clone()),
                            repo: LabelText(repo.repository.clone()),
                            state,
                        })
                        .set(n as i64);
                }
            }
            let (mut working, mut idle) = (0, 0);
            for cell in &board.cells {
                let beat = cell.last_heartbeat.as_deref().and_then(parse_rfc3339_ms);
                if !cell.holding.is_empty() {
                    working += 1;
                } else if beat.is_some_and(|b| now - b <= RECENT_CELL_MS) {
                    idle += 1;
                }
            }
            for (state, n) in [("working", working), ("idle", idle)] {
                cells
                    .get_or_create(&CellLabels {
                        org: LabelText(org.clone()),
                        state,
                    })
                    .set(n);
            }
        }
        registry.register(
            "metabob_tasks",
            "Tasks on the board (as `task list` shows them), by org, repository and state",
            tasks,
        );
        registry.register(
            "metabob_cells",
            "Cells holding a live claim (working) or holding none with a claim or renewal in \
             the last 15 minutes (idle), by org",
            cells,
        );
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
}

/// The board of each org in `orgs`, read as `task list` reads it.
pub async fn boards(
    s: &Shared,
    orgs: Vec<(String, String)>,
    now: i64,
) -> Result<Vec<(String, Board)>, ApiError> {
    let mut seen = Vec::with_capacity(orgs.len());
    for (id, name) in orgs {
        let org = id.clone();
        let board =
            s.db.read(&id, s.budget(), move |c| {
                BoardRequest::whole().board(c, &org, now)
            })
            .await?;
        seen.push((name, board));
    }
    Ok(seen)
}

/// The middleware that counts every request the router answers, under the route pattern it
/// matched (never the raw path, which a caller chooses) or `unmatched`.
pub async fn track(State(s): State<Shared>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_string();
    let started = Instant::now();
    let resp = next.run(req).await;
    s.metrics.count_request(
        route,
        resp.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    resp
}
