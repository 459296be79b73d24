//! The whole-store gap read, cached per attachment (SPEC.md §path_activity): the store has no path
//! filter, so every check reads all of it; agents that check before each edit share one read.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::row::Gap;
use metabob_net::attachment::{Attachment, ResolveError, Sending};
use metabob_process::env::Env;
use metabob_wire::row::read_rows;

/// The store answers at most this many rows; an answer this long may have been cut.
pub const READ_LIMIT: u64 = 1_000_000;
/// The read's client cap.
const READ_CAP: Duration = Duration::from_secs(30);
const FRESH: Duration = Duration::from_secs(5 * 60);
const STALE: Duration = Duration::from_secs(30 * 60);

/// Which gaps a read asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Open,
    Closed,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Open => "open",
            Status::Closed => "closed",
        }
    }
}

/// One read of the store.
#[derive(Debug)]
pub struct Snapshot {
    pub gaps: Vec<Gap>,
    /// As many rows as the limit: the store may hold more.
    pub truncated: bool,
    pub read_at: Instant,
    /// When it was read, as wall time for the reply.
    pub read_ms: i64,
}

#[derive(Default)]
struct Slot {
    last: Mutex<Option<Arc<Snapshot>>>,
    /// Held while a read runs, so callers that arrive meanwhile wait for it and share it.
    reading: Arc<tokio::sync::Mutex<()>>,
}

/// The cache (anchor: gap_cache): fresh for 5 minutes, then served stale for up to 30 while one
/// background read refreshes it. `METABOB_GAP_FRESH_MS` and `METABOB_GAP_STALE_MS` override the
/// two windows.
pub struct GapCache {
    open: Arc<Slot>,
    closed: Arc<Slot>,
    fresh: Duration,
    stale: Duration,
}

fn window(env: &Env, name: &str, default: Duration) -> Duration {
    env.get(name)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(default, Duration::from_millis)
}

impl GapCache {
    pub fn new(env: &Env) -> GapCache {
        GapCache {
            open: Arc::default(),
            closed: Arc::default(),
            fresh: window(env, "METABOB_GAP_FRESH_MS", FRESH),
            stale: window(env, "METABOB_GAP_STALE_MS", STALE),
        }
    }

    fn slot(&self, status: Status) -> &Arc<Slot> {
        match status {
            Status::Open => &self.open,
            Status::Closed => &self.closed,
        }
    }

    fn usable(&self, slot: &Slot, within: Duration) -> Option<Arc<Snapshot>> {
        let last = slot.last.lock().ok()?.clone()?;
        (last.read_at.elapsed() < within).then_some(last)
    }

    /// The open gaps already read, if a read is recent enough to serve; never starts one. For the
    /// tools that add gap lines without reading the store themselves.
    pub fn peek(&self) -> Option<Arc<Snapshot>> {
        self.usable(&self.open, self.stale)
    }

    /// The gaps of `status`: from the cache when fresh; stale within the stale window while one
    /// background read refreshes it; otherwise from a read this call shares with any other.
    pub async fn get(
        &self,
        att: &Attachment,
        status: Status,
    ) -> Result<Arc<Snapshot>, ResolveError> {
        let slot = self.slot(status);
        if let Some(s) = self.usable(slot, self.fresh) {
            return Ok(s);
        }
        if let Some(stale) = self.usable(slot, self.stale) {
            if let Ok(guard) = slot.reading.clone().try_lock_owned() {
                let (slot, att) = (Arc::clone(slot), att.clone());
                tokio::spawn(async move {
                    match read(&att, status).await {
                        Ok(s) => {
                            store(&slot, s);
                        }
                        Err(e) => tracing::warn!("the gap store's background refresh failed: {e}"),
                    }
                    drop(guard);
                });
            }
            return Ok(stale);
        }
        let _reading = slot.reading.lock().await;
        if let Some(s) = self.usable(slot, self.fresh) {
            return Ok(s);
        }
        let s = read(att, status).await?;
        Ok(store(slot, s))
    }
}

fn store(slot: &Slot, s: Snapshot) -> Arc<Snapshot> {
    let s = Arc::new(s);
    if let Ok(mut last) = slot.last.lock() {
        *last = Some(Arc::clone(&s));
    }
    s
}

/// `substrateGap` for the whole store (anchor: read_gaps).
async fn read(att: &Attachment, status: Status) -> Result<Snapshot, ResolveError> {
    let pointer = json!({
        "type": "substrateGap",
        "status": status.as_str(),
        "limit": READ_LIMIT,
        "include_held": true,
    });
    let how = Sending {
        once: false,
        cap: Some(READ_CAP),
    };
    let body = att.resolve_with(pointer, how).await?.ok("substrateGap")?;
    let rows = match &body {
        Value::Array(rows) => rows.as_slice(),
        other => other
            .get("gaps")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .ok_or_else(|| ResolveError::Answer {
                shape: "substrateGap".into(),
                status: 200,
                said: "the answer holds no gaps list".into(),
            })?,
    };
    Ok(Snapshot {
        truncated: rows.len() as u64 >= READ_LIMIT,
        gaps: read_rows(rows, "gap store", Gap::read),
        read_at: Instant::now(),
        read_ms: metabob_process::clock::now_ms(),
    })
}
