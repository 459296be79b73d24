//! `POST /resolve`: the one ingress. Decides which shapes the ledger answers itself, which go to
//! a producer named at start, and which nothing produces; and which need a write scope.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Map, Value, json};

use super::concepts::{
    self, CreateConcept, Graph, Link, RecordUsage, Search, Sequence, UsageStats,
};
use super::db::{Budget, Db};
use super::errors::ApiError;
use super::goals;
use super::input::Fields;
use super::keys::KeyIdentity;

/// Every shape the ledger answers itself, as advertised in `vesselRegistry`.
// anchor: LEDGER_SHAPES
pub const LEDGER_SHAPES: &[&str] = &[
    "vesselRegistry",
    "vesselCapability",
    "conceptSearch",
    "conceptGraph",
    "concept_create_write",
    "conceptLink_write",
    "conceptUsage_write",
    "conceptUsageStats",
    "conceptSequence",
    "goalDispatchAsync",
    "goalWalkState",
    "executionTraceList",
    "activityExecutionTrace",
    "goal_verification_label_write",
    "taskBoard",
    "taskTake_write",
];

pub const LEDGER_VESSEL_ID: &str = "metabob-ledger";

/// The server's shared state.
pub struct Ledger {
    pub db: Db,
    pub public_url: String,
    /// shape → producer URL, from `--producer`.
    pub producers: BTreeMap<String, String>,
    pub forward_timeout: Duration,
    /// Whether `taskTake_write` is served (`ledger serve --no-take` says no).
    pub take: bool,
    /// Each request's time budget for its database work (`METABOB_LEDGER_REQUEST_BUDGET_MS`).
    pub request_budget_ms: u64,
    /// How long a connection may sit idle or take to send a request (`METABOB_LEDGER_IDLE_TIMEOUT_MS`).
    pub idle_timeout: Duration,
    /// `POST /resolve` requests served since start, reported by `/health`.
    pub resolves: AtomicU64,
    pub forwarder: super::forward::Forwarder,
}

pub type Shared = Arc<Ledger>;

/// An answer to hand back as it is: status and JSON body, or a producer's raw bytes.
pub enum Answer {
    Json(StatusCode, Value),
    Raw {
        status: u16,
        content_type: Option<String>,
        body: Vec<u8>,
    },
}

impl Ledger {
    /// A fresh budget for one request's database work.
    pub fn budget(&self) -> Budget {
        Budget::start(self.request_budget_ms)
    }

    /// Whether the ledger answers `shape` itself: one of its own, not handed to a producer (only
    /// goal board shapes can be, `parse_producers`), and not the take when it is turned off.
    fn serves(&self, shape: &str) -> bool {
        LEDGER_SHAPES.contains(&shape)
            && !self.producers.contains_key(shape)
            && (self.take || shape != crate::ledger::claims::TAKE_SHAPE)
    }

    fn ledger_vessel(&self) -> Value {
        let shapes: Vec<&str> = LEDGER_SHAPES
            .iter()
            .copied()
            .filter(|s| self.serves(s))
            .collect();
        json!({
            "vessel_id": LEDGER_VESSEL_ID,
            "endpoint": self.public_url,
            "public_endpoint": self.public_url,
            "protocol": "http",
            "resolve_endpoint": format!("{}/resolve", self.public_url),
            "shapes": shapes,
        })
    }

    /// One vessel per distinct producer URL, numbered in the order of the first shape (by name)
    /// routed to each, so the ids are stable for the same command line.
    fn producer_vessels(&self) -> Vec<(String, Value)> {
        let mut by_url: Vec<(String, Vec<String>)> = Vec::new();
        for (shape, url) in &self.producers {
            match by_url.iter_mut().find(|(u, _)| u == url) {
                Some((_, shapes)) => shapes.push(shape.clone()),
                None => by_url.push((url.clone(), vec![shape.clone()])),
            }
        }
        by_url
            .into_iter()
            .enumerate()
            .map(|(i, (url, shapes))| {
                let vessel = json!({
                    "vessel_id": format!("producer-{}", i + 1),
                    "endpoint": url,
                    "public_endpoint": url,
                    "protocol": "http",
                    "resolve_endpoint": url,
                    "shapes": shapes,
                });
                (url, vessel)
            })
            .collect()
    }

    // anchor: vessel-registry
    fn registry(&self) -> Value {
        let mut vessels = vec![self.ledger_vessel()];
        vessels.extend(self.producer_vessels().into_iter().map(|(_, v)| v));
        json!({ "vessels": vessels })
    }

    fn capability(&self, shape: &str) -> Value {
        let mut vessels = Vec::new();
        if self.serves(shape) {
            vessels.push(self.ledger_vessel());
        }
        if let Some(url) = self.producers.get(shape) {
            vessels.extend(
                self.producer_vessels()
                    .into_iter()
                    .filter(|(u, _)| u == url)
                    .map(|(_, v)| v),
            );
        }
        json!({ "shape": shape, "vessels": vessels })
    }
}

/// Resolves one pointer for an authenticated key.
// anchor: dispatch
pub async fn dispatch(
    ledger: &Ledger,
    budget: Budget,
    key: KeyIdentity,
    body: &[u8],
    auth_header: Option<String>,
) -> Result<Answer, ApiError> {
    let body: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("body: not JSON ({e})")))?;
    let pointer: Map<String, Value> = match body.get("pointer") {
        Some(Value::Object(m)) => m.clone(),
        _ => return Err(ApiError::bad("pointer: required object")),
    };
    let p = Fields::new(&pointer, "");
    let shape = p
        .req_str("type")
        .map_err(|_| ApiError::bad("pointer.type: required non-empty string"))?
        .to_string();
    if crate::shapes::is_write(&shape) && !key.can_write() {
        return Err(ApiError::Forbidden);
    }
    let claim = concepts::client_claim(&pointer)?;
    let org = key.org_id.clone();
    let ok = |v| Ok(Answer::Json(StatusCode::OK, v));
    match shape.as_str() {
        "vesselRegistry" => ok(ledger.registry()),
        "vesselCapability" => ok(ledger.capability(p.req_str("shape")?)),
        "conceptSearch" => {
            let req = Search::parse(&p)?;
            ok(ledger
                .db
                .read(&key.org_id, budget, move |c| req.run(c, &org))
                .await?)
        }
        "conceptGraph" => {
            let req = Graph::parse(&p)?;
            ok(ledger
                .db
                .read(&key.org_id, budget, move |c| req.run(c, &org))
                .await?)
        }
        "conceptUsageStats" => {
            let req = UsageStats::parse(&p)?;
            ok(ledger
                .db
                .read(&key.org_id, budget, move |c| req.run(c, &org))
                .await?)
        }
        "conceptSequence" => {
            let req = Sequence::parse(&p)?;
            ok(ledger
                .db
                .read(&key.org_id, budget, move |c| req.run(c, &org))
                .await?)
        }
        "concept_create_write" => {
            let req = CreateConcept::parse(&p, claim)?;
            Ok(Answer::Json(
                StatusCode::CREATED,
                ledger.db.write(budget, move |w| req.run(w, &org)).await?,
            ))
        }
        "conceptLink_write" => {
            let req = Link::parse(&p, claim)?;
            let linked = ledger.db.write(budget, move |w| req.run(w, &org)).await?;
            let status = if linked.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(Answer::Json(status, linked.body))
        }
        "conceptUsage_write" => {
            let req = RecordUsage::parse(&p, claim)?;
            Ok(Answer::Json(
                StatusCode::CREATED,
                ledger.db.write(budget, move |w| req.run(w, &org)).await?,
            ))
        }
        crate::ledger::claims::TAKE_SHAPE if ledger.serves(&shape) => {
            let req = super::take::TakeRequest::parse(&p, claim)?;
            ok(ledger.db.write(budget, move |w| req.run(w, &org)).await?)
        }
        "taskBoard" => {
            let req = super::board::BoardRequest::parse(&p)?;
            let now = crate::util::now_ms();
            ok(ledger
                .db
                .read(&key.org_id, budget, move |c| req.run(c, &org, now))
                .await?)
        }
        goal if goals::GOAL_SHAPES.contains(&goal) && ledger.serves(goal) => {
            goals::resolve(ledger, budget, &key, goal, &pointer, claim).await
        }
        other => match ledger.producers.get(other) {
            Some(url) => {
                let pointer = Value::Object(pointer.clone());
                ledger
                    .forwarder
                    .forward(other, url, &pointer, auth_header, ledger.forward_timeout)
                    .await
            }
            None => Err(ApiError::NoProducer(other.to_string())),
        },
    }
}
