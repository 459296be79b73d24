//! `POST /resolve`: the one ingress. Decides which shapes the ledger answers itself, which go to
//! a producer named at start, and which nothing produces; and which need a write scope.

use metabob_wire::shapes::LEDGER_SHAPES;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Map, Value, json};

use super::concepts::{
    self, CreateConcept, Graph, Link, RecordUsage, Search, Sequence, UsageStats,
};
use super::db::{Budget, Db, Writer};
use super::errors::ApiError;
use super::goals;
use super::input::Fields;
use super::keys::{KeyIdentity, authenticate};

pub const LEDGER_VESSEL_ID: &str = "metabob-ledger";

/// The server's shared state.
pub struct Ledger {
    pub db: Db,
    pub public_url: String,
    /// shape → producer URL, from `--producer`.
    pub producers: BTreeMap<String, String>,
    pub forward_timeout: Duration,
    /// Whether the shapes of [`ONE_WRITE_SHAPES`] are served (`ledger serve --no-take` says
    /// no).
    pub take: bool,
    /// Each request's time budget for its database work (`METABOB_LEDGER_REQUEST_BUDGET_MS`).
    pub request_budget_ms: u64,
    /// How long a connection may sit idle or take to send a request (`METABOB_LEDGER_IDLE_TIMEOUT_MS`).
    pub idle_timeout: Duration,
    /// `POST /resolve` requests served since start, reported by `/health`.
    pub resolves: AtomicU64,
    pub forwarder: super::forward::Forwarder,
    /// Keys the store accepted lately (`keys::KeyCache`).
    pub keys: super::keys::KeyCache,
    /// What `/metrics` reports (`metrics::Metrics`).
    pub metrics: super::metrics::Metrics,
    /// Whether `/metrics` answers without a key: only on a loopback listener.
    pub metrics_keyless: bool,
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

    /// The key's identity: believed from the cache, or checked on a reader and then cached.
    pub async fn check_key(
        &self,
        budget: Budget,
        raw_key: String,
    ) -> Result<KeyIdentity, ApiError> {
        if let Some(key) = self.keys.get(&raw_key) {
            return Ok(key);
        }
        let (raw, key) = self
            .db
            .read_unscoped(budget, move |c| {
                authenticate(c, &raw_key).map(|k| (raw_key, k))
            })
            .await?;
        self.keys.put(&raw, &key);
        Ok(key)
    }

    /// Whether the ledger answers `shape` itself: one of its own, not handed to a producer (only
    /// goal board shapes can be, `parse_producers`), and not one of [`ONE_WRITE_SHAPES`] when
    /// they are turned off.
    fn serves(&self, shape: &str) -> bool {
        LEDGER_SHAPES.contains(&shape)
            && !self.producers.contains_key(shape)
            && (self.take || !ONE_WRITE_SHAPES.contains(&shape))
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

/// The ledger's own shapes that do in one write what a substrate without them is sent as
/// several requests: the atomic take, and the verdict with its link and credit. `--no-take`
/// serves neither, as such a substrate, so cells use the requests they replace.
const ONE_WRITE_SHAPES: &[&str] = &[
    metabob_wire::claims::TAKE_SHAPE,
    metabob_wire::verdict::VERDICT_WRITE_SHAPE,
];

/// The writes the ledger makes itself with one concept-store transaction: each checks its key
/// on the writer, in the same hop as the write (anchor: OWN_WRITES).
const OWN_WRITES: &[&str] = &[
    "concept_create_write",
    "conceptLink_write",
    "conceptUsage_write",
    metabob_wire::verdict::VERDICT_WRITE_SHAPE,
    metabob_wire::claims::TAKE_SHAPE,
    metabob_wire::task_action::TASK_ACTION_SHAPE,
];

/// A request body's pointer and its shape, or the 400 that names what is wrong.
fn read_pointer(body: &[u8]) -> Result<(Map<String, Value>, String), ApiError> {
    let body: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("body: not JSON ({e})")))?;
    // Taken out of the body, not copied: a write's pointer is most of its bytes.
    let pointer: Map<String, Value> = match body {
        Value::Object(mut b) => match b.remove("pointer") {
            Some(Value::Object(m)) => m,
            _ => return Err(ApiError::bad("pointer: required object")),
        },
        _ => return Err(ApiError::bad("pointer: required object")),
    };
    let shape = Fields::new(&pointer, "")
        .req_str("type")
        .map_err(|_| ApiError::bad("pointer.type: required non-empty string"))?
        .to_string();
    Ok((pointer, shape))
}

/// Resolves one pointer for the key `raw_key` (anchor: dispatch). The key is checked first,
/// before anything in the body is weighed; for the ledger's own writes the check runs on the
/// writer, just before the write, which saves every write a trip to the reader pool.
pub async fn dispatch(
    ledger: &Ledger,
    budget: Budget,
    raw_key: String,
    body: &[u8],
    auth_header: Option<String>,
) -> Result<Answer, ApiError> {
    let read = match read_pointer(body) {
        Ok((pointer, shape)) if OWN_WRITES.contains(&shape.as_str()) && ledger.serves(&shape) => {
            return own_write_on_writer(ledger, budget, raw_key, pointer, shape).await;
        }
        other => other,
    };
    let key = ledger.check_key(budget, raw_key).await?;
    let (pointer, shape) = read?;
    let p = Fields::new(&pointer, "");
    if metabob_wire::shapes::is_write(&shape) && !key.can_write() {
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
            if req.reads_text() {
                ledger.db.index_text(budget).await?;
            }
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
        metabob_wire::related::RELATED_SHAPE => {
            let req = super::related::RelatedRequest::parse(&p)?;
            ok(ledger
                .db
                .read(&key.org_id, budget, move |c| req.run(c, &org))
                .await?)
        }
        "taskBoard" => {
            let req = super::board::BoardRequest::parse(&p)?;
            let now = metabob_process::clock::now_ms();
            ok(ledger
                .db
                .read(&key.org_id, budget, move |c| req.run(c, &org, now))
                .await?)
        }
        metabob_wire::depends::READY_SHAPE => {
            let req = super::take::ReadyRequest::parse(&p)?;
            let now = metabob_process::clock::now_ms();
            ok(ledger
                .db
                .read(&key.org_id, budget, move |c| req.run(c, &org, now))
                .await?)
        }
        metabob_wire::task_action::TASK_HISTORY_SHAPE => {
            let req = super::task_actions::HistoryRequest::parse(&p)?;
            let now = metabob_process::clock::now_ms();
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
            None => Err(ApiError::NoProducer {
                shape: other.to_string(),
            }),
        },
    }
}

/// One of [`OWN_WRITES`] for `key`, on the writer: the scope, then the pointer's fields, then the
/// write, so a caller hears about its key before its input, as for every other shape.
fn own_write(
    w: &mut Writer,
    key: &KeyIdentity,
    shape: &str,
    pointer: &Map<String, Value>,
) -> Result<(StatusCode, Value), ApiError> {
    if !key.can_write() {
        return Err(ApiError::Forbidden);
    }
    let p = Fields::new(pointer, "");
    let claim = concepts::client_claim(pointer)?;
    let org = &key.org_id;
    match shape {
        "concept_create_write" => Ok((
            StatusCode::CREATED,
            CreateConcept::parse(&p, claim)?.run(w, org)?,
        )),
        "conceptLink_write" => {
            let linked = Link::parse(&p, claim)?.run(w, org)?;
            let status = if linked.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok((status, linked.body))
        }
        "conceptUsage_write" => Ok((
            StatusCode::CREATED,
            RecordUsage::parse(&p, claim)?.run(w, org)?,
        )),
        metabob_wire::verdict::VERDICT_WRITE_SHAPE => Ok((
            StatusCode::CREATED,
            super::verdict_write::VerdictWrite::parse(&p, claim)?.run(w, org)?,
        )),
        metabob_wire::task_action::TASK_ACTION_SHAPE => Ok((
            StatusCode::OK,
            super::task_actions::ActionRequest::parse(&p, claim)?.run(
                w,
                org,
                key.label.as_deref(),
            )?,
        )),
        _ => Ok((
            StatusCode::OK,
            super::take::TakeRequest::parse(&p, claim)?.run(w, org)?,
        )),
    }
}

/// Runs one of [`OWN_WRITES`] with its key checked on the writer.
async fn own_write_on_writer(
    ledger: &Ledger,
    budget: Budget,
    raw_key: String,
    pointer: Map<String, Value>,
    shape: String,
) -> Result<Answer, ApiError> {
    // A key the cache believes needs no check on the writer; one it does not is checked there,
    // in the same hop as the write, and believed from then on.
    let cached = ledger.keys.get(&raw_key);
    let presented = raw_key.clone();
    let take = shape == metabob_wire::claims::TAKE_SHAPE;
    let written = ledger
        .db
        .write(budget, move |w| {
            let (key, checked) = match &cached {
                Some(key) => (key.clone(), None),
                None => {
                    let key = authenticate(w.sql(), &presented)?;
                    (key.clone(), Some(key))
                }
            };
            let (status, body) = own_write(w, &key, &shape, &pointer)?;
            Ok((status, body, checked))
        })
        .await;
    // Counted once the write is answered: only what was committed (or refused) counts.
    if take {
        ledger
            .metrics
            .count_take(written.as_ref().map(|(_, body, _)| body));
    }
    let (status, body, checked) = written?;
    if !take {
        ledger.metrics.count_concept(&body);
    }
    if let Some(key) = checked {
        ledger.keys.put(&raw_key, &key);
    }
    Ok(Answer::Json(status, body))
}
