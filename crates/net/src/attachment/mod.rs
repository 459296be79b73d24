//! The attachment (SPEC.md §Attachment): the anchor, the proven key, and the one ingress every
//! substrate request takes. CLI commands run one attempt; the long-running server keeps it alive
//! with the heartbeat and background re-attach.

pub mod attach;
pub mod check;
pub mod claim;
pub mod resolve;
pub mod state;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

pub use attach::attach;
pub use claim::{ClientClaim, vessel_id};
pub use resolve::{Family, ResolveError, Resolved, Sending};
pub use state::{AttachmentState, AuthStatus, Body, Cause, NoBootstrap, NotSubstrate};

use crate::NetClient;
use crate::config::Config;
use metabob_process::clock::now_ms;
use metabob_process::guard::Guard;
use metabob_wire::report::{self, Hint};
use metabob_wire::text::rfc3339_ms;

/// Background re-attach delays after a transient failure; the last one repeats.
const REATTACH_DELAYS: [Duration; 6] = [
    Duration::from_secs(5),
    Duration::from_secs(15),
    Duration::from_secs(30),
    Duration::from_secs(60),
    Duration::from_secs(120),
    Duration::from_secs(300),
];
/// The key-issuance heartbeat.
const HEARTBEAT: Duration = Duration::from_secs(300);
/// A call after a transient failure attempts again at once, but at most this often.
const ON_DEMAND_MIN_GAP_MS: i64 = 10_000;
/// A cause older than this says how old it is when echoed.
const STALE_CAUSE_MS: i64 = 60_000;

#[derive(Clone)]
pub struct Attachment {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    net: NetClient,
    claim: ClientClaim,
    /// The backstop every write's pointer passes at the one egress.
    guard: Guard,
    /// The last settled attempt; readers never see a half-reset state.
    settled: RwLock<Option<AttachmentState>>,
    /// Held while an attempt runs, so callers that arrive meanwhile wait for it.
    attempt: tokio::sync::Mutex<()>,
    attempts: AtomicU32,
    last_attempt_ms: AtomicI64,
    /// When the current cause was first found, for the "found … ago" suffix.
    cause_since_ms: AtomicI64,
    last_by_family: Mutex<BTreeMap<&'static str, String>>,
    /// Set for the long-running server, which logs each settled refusal once; one-shot
    /// commands print the cause in their report instead.
    long_running: AtomicBool,
}

/// Why the gate refused a substrate call (anchor: GateRefusal): the typed cause, for callers
/// that decide on it, and the line tools echo: the cause with its hint, then how old the cause
/// is once it is old.
#[derive(Clone, Debug, PartialEq)]
pub struct GateRefusal {
    pub cause: Cause,
    line: String,
}

impl std::fmt::Display for GateRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.line)
    }
}

impl std::error::Error for GateRefusal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.cause)
    }
}

// The line carries the cause's hint already, ahead of the cause's age, so nothing is added.
impl Hint for GateRefusal {}

impl Attachment {
    pub fn new(config: Config, net: NetClient, claim: ClientClaim, guard: Guard) -> Self {
        Attachment {
            inner: Arc::new(Inner {
                config,
                net,
                claim,
                guard,
                settled: RwLock::new(None),
                attempt: tokio::sync::Mutex::new(()),
                attempts: AtomicU32::new(0),
                last_attempt_ms: AtomicI64::new(0),
                cause_since_ms: AtomicI64::new(0),
                last_by_family: Mutex::new(BTreeMap::new()),
                long_running: AtomicBool::new(false),
            }),
        }
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn net(&self) -> &NetClient {
        &self.inner.net
    }

    pub fn claim(&self) -> &ClientClaim {
        &self.inner.claim
    }

    pub fn guard(&self) -> &Guard {
        &self.inner.guard
    }

    /// Runs one attempt from a fresh state and publishes it when it settles.
    pub async fn attempt(&self) -> AttachmentState {
        let _running = self.inner.attempt.lock().await;
        self.inner.last_attempt_ms.store(now_ms(), Ordering::SeqCst);
        let n = self.inner.attempts.fetch_add(1, Ordering::SeqCst) + 1;
        let state = attach(&self.inner.config, &self.inner.net).await;
        let previous = self.settled();
        let log = self.inner.long_running.load(Ordering::SeqCst);
        match (
            &state.cause,
            previous.as_ref().and_then(|p| p.cause.as_ref()),
        ) {
            (Some(c), Some(p)) if c.token() == p.token() => {}
            (Some(c), _) => {
                self.inner.cause_since_ms.store(now_ms(), Ordering::SeqCst);
                if log {
                    tracing::warn!(
                        "not attached ({}): {}",
                        if matches!(c, Cause::KeyRejected { .. }) {
                            "identity requirement"
                        } else {
                            "fail-visibly requirement"
                        },
                        report::with_hint(c)
                    );
                }
            }
            (None, Some(_)) if n > 1 && log => {
                tracing::info!(
                    "Attached on attempt {n}, after: {}",
                    previous.and_then(|p| p.message).unwrap_or_default()
                );
            }
            _ => {}
        }
        self.record_family(
            "attachment",
            state.cause.as_ref().map(|c| c.token()).unwrap_or("ok"),
        );
        *self
            .inner
            .settled
            .write()
            .expect("no writer panics while holding the lock") = Some(state.clone());
        state
    }

    /// The last settled attempt, if any (never waits).
    pub fn settled(&self) -> Option<AttachmentState> {
        self.inner
            .settled
            .read()
            .expect("no writer panics while holding the lock")
            .clone()
    }

    /// The settled state, waiting for an attempt in flight; runs the first attempt if none has.
    pub async fn current(&self) -> AttachmentState {
        {
            let _wait = self.inner.attempt.lock().await;
            if let Some(s) = self.settled() {
                return s;
            }
        }
        self.attempt().await
    }

    /// The gate every substrate call passes: the state when attached, else the refusal.
    /// After a transient failure, a call attempts again at once, at most every 10 s.
    pub async fn gate(&self) -> Result<AttachmentState, GateRefusal> {
        let mut state = self.current().await;
        if let Some(cause) = &state.cause {
            let since = now_ms() - self.inner.last_attempt_ms.load(Ordering::SeqCst);
            if cause.is_transient() && since >= ON_DEMAND_MIN_GAP_MS {
                state = self.attempt().await;
            }
        }
        match state.cause {
            None => Ok(state),
            Some(cause) => Err(GateRefusal {
                line: self.refusal_line(&cause),
                cause,
            }),
        }
    }

    /// The cause as tools echo it, with its hint; a cause found over a minute ago says how old
    /// it is.
    pub fn refusal_line(&self, cause: &Cause) -> String {
        let line = report::with_hint(cause);
        let since = self.inner.cause_since_ms.load(Ordering::SeqCst);
        let age = now_ms() - since;
        if since == 0 || age < STALE_CAUSE_MS {
            return line;
        }
        let retrying = if cause.is_transient() {
            "; retrying"
        } else {
            ""
        };
        format!(
            "{line} (found {} ago, at {}, after {} attempts{retrying})",
            human_age(age),
            rfc3339_ms(since),
            self.inner.attempts.load(Ordering::SeqCst)
        )
    }

    /// The long-running server's loop: re-attach after transient failures on the backoff
    /// schedule (anchor: reattach), then the heartbeat org check every five minutes.
    pub fn spawn_background(&self) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        this.inner.long_running.store(true, Ordering::SeqCst);
        tokio::spawn(async move {
            let mut failures = 0usize;
            loop {
                let state = this.attempt().await;
                match &state.cause {
                    None => {
                        failures = 0;
                        if this.heartbeat_until_lost().await == Lost::KeyRejected {
                            return;
                        }
                    }
                    Some(c) if c.is_transient() => {
                        let delay = REATTACH_DELAYS[failures.min(REATTACH_DELAYS.len() - 1)];
                        failures += 1;
                        tokio::time::sleep(delay).await;
                    }
                    Some(_) => return,
                }
            }
        })
    }

    /// Re-proves the key every heartbeat; returns when it is rejected (final) or when identity
    /// stopped answering (the caller re-attaches).
    async fn heartbeat_until_lost(&self) -> Lost {
        loop {
            tokio::time::sleep(HEARTBEAT).await;
            let Some(mut state) = self.settled() else {
                return Lost::Unreachable;
            };
            let (Some(identity), Some(key)) = (
                state.identity.endpoint.clone(),
                self.inner.config.api_key.clone(),
            ) else {
                return Lost::Unreachable;
            };
            let _running = self.inner.attempt.lock().await;
            match attach::org_check(&self.inner.net, &identity, &key).await {
                Ok(check) => {
                    state.auth = check.auth;
                    state.last_checked_at = Some(rfc3339_ms(now_ms()));
                    *self.inner.settled.write().expect("lock not poisoned") = Some(state);
                }
                Err(attach::OrgCheckError::Rejected(status)) => {
                    let cause = Cause::KeyRejected { identity, status };
                    tracing::warn!("the key was rejected at the heartbeat: {cause}");
                    self.inner.cause_since_ms.store(now_ms(), Ordering::SeqCst);
                    state.auth.status = AuthStatus::KeyRejected;
                    state.message = Some(report::with_hint(&cause));
                    state.cause = Some(cause);
                    *self.inner.settled.write().expect("lock not poisoned") = Some(state);
                    return Lost::KeyRejected;
                }
                Err(e) => {
                    tracing::debug!(
                        "heartbeat org check failed ({}); re-attaching",
                        report::line(&e)
                    );
                    return Lost::Unreachable;
                }
            }
        }
    }

    pub(crate) fn record_family(&self, family: &'static str, outcome: &str) {
        self.inner
            .last_by_family
            .lock()
            .expect("lock not poisoned")
            .insert(family, outcome.to_string());
    }

    /// The last outcome of the attachment and of each producer family.
    pub fn last_by_family(&self) -> BTreeMap<&'static str, String> {
        self.inner
            .last_by_family
            .lock()
            .expect("lock not poisoned")
            .clone()
    }
}

#[derive(PartialEq, Eq)]
enum Lost {
    KeyRejected,
    Unreachable,
}

fn human_age(ms: i64) -> String {
    let s = ms as f64 / 1000.0;
    if s < 3600.0 {
        format!("{:.1} min", s / 60.0)
    } else if s < 86_400.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.1} d", s / 86_400.0)
    }
}
