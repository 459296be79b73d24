//! The one ingress: `resolve(pointer)` through discovery (SPEC.md §The one ingress).

use std::time::Duration;

use serde_json::{Value, json};

use super::Attachment;
use crate::{NetCause, Request, Retry, Url};
use metabob_wire::report::Hint;
use metabob_wire::shapes::is_write;

/// Producer families, each with its client cap just above discovery's cut for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Discovery,
    Trace,
    Concept,
    Goal,
    Other,
}

impl Family {
    pub fn of(shape: &str) -> Family {
        match shape {
            "vesselRegistry" | "vesselCapability" => Family::Discovery,
            "activityExecutionTrace" | "executionTraceList" => Family::Trace,
            s if s.starts_with("concept") => Family::Concept,
            s if s.starts_with("goal") || s.starts_with("solicitation") => Family::Goal,
            _ => Family::Other,
        }
    }

    /// The client cap for a request of this family (anchor: resolve-timeouts).
    pub fn cap(self) -> Duration {
        Duration::from_secs(match self {
            Family::Discovery => 10,
            Family::Trace => 15,
            Family::Concept | Family::Other => 35,
            Family::Goal => 60,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Family::Discovery => "discovery",
            Family::Trace => "trace",
            Family::Concept => "concept",
            Family::Goal => "goal",
            Family::Other => "other",
        }
    }
}

/// Delays before a read cut at its producer's timeout is tried again.
const READ_RETRY_DELAYS: [Duration; 2] = [Duration::from_millis(500), Duration::from_millis(1500)];

/// How one pointer is sent. The default is the family's: its cap, and a read cut at its
/// producer's timeout tried again; a caller that must send once (the escape hatch) says so.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sending {
    /// Never retried, read or write.
    pub once: bool,
    /// The client cap in place of the family's.
    pub cap: Option<Duration>,
}

/// What discovery (or the producer behind it) answered.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub status: u16,
    pub body: Value,
}

/// A resolve that produced no producer answer, each with its one line.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The attachment is not authenticated.
    #[error(transparent)]
    Refused(#[from] super::GateRefusal),
    #[error("key_read_only: this key has scopes [{scopes}]; the {shape} write was not sent")]
    KeyReadOnly { scopes: String, shape: String },
    #[error(
        "no_producer({shape}): discovery found no producer for this shape, or a producer behind \
         a peer refused the request or lacks the item (a peer forward does not say which)"
    )]
    NoProducer { shape: String },
    #[error("producer_timeout({shape}, {ms}): the producer did not answer within {ms} ms")]
    ProducerTimeout { shape: String, ms: u64 },
    #[error("producer_unreachable({shape}): discovery could not reach the shape's producer")]
    ProducerUnreachable { shape: String },
    #[error("anchor_unreachable: discovery {discovery} did not answer POST /resolve — {net}")]
    Anchor {
        discovery: String,
        #[source]
        net: NetCause,
    },
    /// The pointer names no shape, so there is nowhere to send it.
    #[error("bad_pointer: the pointer has no type")]
    Untyped,
    /// The backstop found a known secret in a composed write: nothing was sent.
    #[error(transparent)]
    Outgoing(#[from] metabob_process::guard::GuardRefusal),
    /// The producer answered, but not with what the caller asked for.
    #[error("{shape} answered HTTP {status}: {said}")]
    Answer {
        shape: String,
        status: u16,
        /// The producer's own words (its `detail` or `error` field), which arrive as text; for
        /// a 2xx answer the caller cannot use, the caller's words for what it lacks.
        said: String,
    },
}

impl Hint for ResolveError {
    fn hint(&self) -> Option<String> {
        match self {
            ResolveError::Refused(refusal) => refusal.hint(),
            ResolveError::Anchor { net, .. } => net.hint(),
            // The guard's refusal and discovery's named failures say in their line what was not
            // sent or who did not answer; there is nothing further to do here.
            _ => None,
        }
    }
}

impl ResolveError {
    /// The ledger stopped taking this process partway (anchor: is_detachment): the gate refused,
    /// discovery stopped answering, or the key was rejected. At a command's start the same
    /// conditions are "not attached", and a command says so the same way wherever it meets them.
    pub fn is_detachment(&self) -> bool {
        match self {
            ResolveError::Refused(_) | ResolveError::Anchor { .. } => true,
            ResolveError::Answer { status, .. } => matches!(status, 401 | 403),
            _ => false,
        }
    }

    /// The ledger answered that it cannot serve this now (anchor: is_unavailable): a gateway's
    /// 502 or 504, a 503 (a budget ran out, the store is contended), or a 507 (its store is
    /// full). Like an outage, it clears by itself; a cell waits it out.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, ResolveError::Answer { status, .. } if matches!(status, 502..=504 | 507))
    }
}

impl Resolved {
    /// The body of a 2xx answer; any other status as [`ResolveError::Answer`].
    pub fn ok(self, shape: &str) -> Result<Value, ResolveError> {
        if (200..300).contains(&self.status) {
            return Ok(self.body);
        }
        let said = self
            .body
            .get("detail")
            .or_else(|| self.body.get("error"))
            .and_then(Value::as_str)
            .unwrap_or("no detail")
            .to_string();
        Err(ResolveError::Answer {
            shape: shape.into(),
            status: self.status,
            said,
        })
    }
}

impl Attachment {
    /// Posts `{ pointer }` to discovery with the key (anchor: attachment-resolve). Refuses with
    /// the attachment's cause when not authenticated, and a write with a read-only key before
    /// anything is sent (anchor: read-only-key).
    pub async fn resolve(&self, pointer: Value) -> Result<Resolved, ResolveError> {
        self.resolve_with(pointer, Sending::default()).await
    }

    /// [`Attachment::resolve`] with the sending chosen by the caller.
    pub async fn resolve_with(
        &self,
        mut pointer: Value,
        how: Sending,
    ) -> Result<Resolved, ResolveError> {
        let shape = pointer
            .get("type")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or(ResolveError::Untyped)?
            .to_string();
        let state = self.gate().await.map_err(ResolveError::Refused)?;
        let write = is_write(&shape);
        if write {
            if let Some(scopes) = &state.auth.scopes
                && !scopes.iter().any(|s| s == "write" || s == "admin")
            {
                return Err(ResolveError::KeyReadOnly {
                    scopes: scopes.join(", "),
                    shape,
                });
            }
            let claim = self.claim();
            if claim.enabled
                && let Some(obj) = pointer.as_object_mut()
                && !obj.contains_key("client_claim")
            {
                obj.insert("client_claim".into(), json!(claim));
            }
            // The backstop over what this process composed (anchor: guard-outgoing-pointer).
            for warning in self.guard().check_pointer(&shape, &mut pointer)? {
                tracing::warn!("{warning}");
            }
        }
        let family = Family::of(&shape);
        let cap = how.cap.unwrap_or(family.cap());
        let once = how.once || write || family == Family::Trace;
        let result = self.send_resolve(&shape, cap, &pointer, once).await;
        self.record_family(
            family.name(),
            match &result {
                Ok(r) => {
                    if r.status < 400 {
                        "ok"
                    } else {
                        "error_status"
                    }
                }
                Err(ResolveError::NoProducer { .. }) => "no_producer",
                Err(ResolveError::ProducerTimeout { .. }) => "producer_timeout",
                Err(ResolveError::ProducerUnreachable { .. }) => "producer_unreachable",
                Err(_) => "anchor_unreachable",
            },
        );
        result
    }

    async fn send_resolve(
        &self,
        shape: &str,
        cap: Duration,
        pointer: &Value,
        once: bool,
    ) -> Result<Resolved, ResolveError> {
        let config = self.config();
        let discovery = config.discovery.clone().unwrap_or_default();
        let key = config.api_key.clone().unwrap_or_default();
        let url = Url::parse(&discovery)
            .map_err(|error| ResolveError::Anchor {
                discovery: discovery.clone(),
                net: NetCause::BadAddress {
                    address: None,
                    error: Box::new(error),
                },
            })?
            .join("/resolve");
        // Writes are never retried, and neither are trace reads: the producer keeps running a
        // query discovery cut.
        let retries: &[Duration] = if once { &[] } else { &READ_RETRY_DELAYS };
        let mut attempt = 0;
        loop {
            let req = Request::post_json(url.clone(), &json!({ "pointer": pointer }))
                .header("authorization", format!("ApiKey {key}"))
                .budget(cap)
                .retry(Retry::Never);
            let outcome = match self.net().send(req).await {
                Ok(resp) => classify(shape, resp.status, resp.json()),
                Err(e) => match e.cause {
                    NetCause::ResponseTimeout { .. } => Err(ResolveError::ProducerTimeout {
                        shape: shape.into(),
                        ms: cap.as_millis() as u64,
                    }),
                    net => Err(ResolveError::Anchor {
                        discovery: discovery.clone(),
                        net,
                    }),
                },
            };
            match outcome {
                Err(ResolveError::ProducerTimeout { .. }) if attempt < retries.len() => {
                    tokio::time::sleep(retries[attempt]).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }
}

/// Names discovery's own failures; passes every producer answer through
/// (anchor: classify_discovery_answer).
pub fn classify(shape: &str, status: u16, body: Option<Value>) -> Result<Resolved, ResolveError> {
    let body = body.unwrap_or(Value::Null);
    let error = body.get("error").and_then(Value::as_str);
    match (status, error) {
        (404, Some("Not found")) if body.get("shape").is_some() => Err(ResolveError::NoProducer {
            shape: shape.into(),
        }),
        (502, Some("forward_failed")) => {
            if body.get("reason").and_then(Value::as_str) == Some("timeout") {
                let ms = body.get("timeout_ms").and_then(Value::as_u64).unwrap_or(0);
                Err(ResolveError::ProducerTimeout {
                    shape: shape.into(),
                    ms,
                })
            } else {
                Err(ResolveError::ProducerUnreachable {
                    shape: shape.into(),
                })
            }
        }
        _ => Ok(Resolved { status, body }),
    }
}
