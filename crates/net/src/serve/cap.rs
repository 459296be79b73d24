//! The bound on open connections, and the file-descriptor limit it is drawn from.
//!
//! A server out of descriptors refuses everyone, keyed clients too, until idle connections time
//! out; a client that keeps opening sockets would hold it there. So connections are counted
//! against a cap below the descriptor limit. At the cap, the connection that has sat idle
//! longest (no request in flight) is closed to make room, so a new client always gets in while
//! any connection is merely held open; only when every connection is running a request does
//! accepting wait for one to finish.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

/// Descriptors a server keeps free beyond its connections and what it holds at start: a few
/// outgoing requests, files opened later, a store connection reopened.
pub const RESERVED_FDS: u64 = 32;

/// Descriptors this process holds now; where that cannot be read, a guess of a small server's.
pub fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd")
        .or_else(|_| std::fs::read_dir("/dev/fd"))
        .map(|dir| dir.count() as u64)
        .unwrap_or(64)
}
/// The cap's ceiling when the descriptor limit is far above it.
pub const MAX_CONNECTIONS: u64 = 16_384;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, as far as the process may, and returns
/// the soft limit now in force.
pub fn raise_fd_limit() -> u64 {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        let (Some(soft), hard) = (limit.current, limit.maximum) else {
            return MAX_CONNECTIONS * 4;
        };
        let want = hard.unwrap_or(u64::MAX).min(1 << 20);
        if want > soft {
            let raised = rustix::process::Rlimit {
                current: Some(want),
                maximum: hard,
            };
            match setrlimit(Resource::Nofile, raised) {
                Ok(()) => {
                    tracing::debug!("raised the open-file limit from {soft} to {want}");
                    return want;
                }
                Err(e) => tracing::debug!("could not raise the open-file limit {soft}: {e}"),
            }
        }
        soft
    }
    #[cfg(not(unix))]
    {
        MAX_CONNECTIONS * 4
    }
}

/// The default cap for a descriptor limit of `fds` when the rest of the process needs
/// `reserve` descriptors: what remains, at least 1 and at most [`MAX_CONNECTIONS`].
pub fn default_cap(fds: u64, reserve: u64) -> usize {
    fds.saturating_sub(reserve).clamp(1, MAX_CONNECTIONS) as usize
}

/// One open connection as the table knows it.
struct Slot {
    /// Requests it is running now.
    busy: Arc<AtomicUsize>,
    /// When it last finished a request (or opened), in ms on the table's clock.
    idle_since: Arc<AtomicU64>,
    /// Told to close the connection when it is shed for a newer one.
    shed: Arc<Notify>,
    /// Told to, and not closed yet: it still holds its descriptor.
    shedding: bool,
}

/// The open connections, oldest first.
pub(super) struct Table {
    cap: usize,
    started: Instant,
    inner: Mutex<(u64, BTreeMap<u64, Slot>)>,
    /// Signalled when a connection ends or finishes a request: room may have come free.
    freed: Notify,
}

/// A connection's place in the table; leaving the table when dropped.
pub(super) struct Admitted {
    table: Arc<Table>,
    id: u64,
    pub busy: Arc<AtomicUsize>,
    idle_since: Arc<AtomicU64>,
    pub shed: Arc<Notify>,
}

impl Admitted {
    /// A request starts on this connection; the returned guard ends it when dropped (once its
    /// answer has been written).
    pub fn request(&self) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy {
            table: self.table.clone(),
            busy: self.busy.clone(),
            idle_since: self.idle_since.clone(),
        }
    }
}

/// One request in flight on a connection.
pub(super) struct Busy {
    table: Arc<Table>,
    busy: Arc<AtomicUsize>,
    idle_since: Arc<AtomicU64>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.idle_since
            .store(self.table.now_ms(), Ordering::Release);
        self.busy.fetch_sub(1, Ordering::AcqRel);
        self.table.freed.notify_one();
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.table.lock().1.remove(&self.id);
        self.table.freed.notify_one();
    }
}

impl Table {
    pub fn new(cap: usize) -> Arc<Table> {
        Arc::new(Table {
            cap: cap.max(1),
            started: Instant::now(),
            inner: Mutex::new((0, BTreeMap::new())),
            freed: Notify::new(),
        })
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, BTreeMap<u64, Slot>)> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns once a new connection would have room: at once below the cap, or at the cap
    /// while some connection is idle (it can be shed); otherwise when a connection ends or a
    /// request finishes. A connection being shed still counts until it has closed, so the
    /// open descriptors stay within one of the cap however fast clients connect.
    pub async fn room(&self) {
        loop {
            let freed = self.freed.notified();
            {
                let table = self.lock();
                let open = table.1.len();
                if open < self.cap || (open == self.cap && table.1.values().any(idle)) {
                    return;
                }
            }
            freed.await;
        }
    }

    /// Takes a place for a connection just accepted, shedding the one idle longest at the cap;
    /// `None` when every connection is busy (the new one is then closed).
    pub fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let mut table = self.lock();
        if table.1.len() >= self.cap {
            let longest_idle = table
                .1
                .iter()
                .filter(|(_, s)| idle(s))
                .min_by_key(|(id, s)| (s.idle_since.load(Ordering::Acquire), **id))
                .map(|(id, _)| *id)?;
            if let Some(slot) = table.1.get_mut(&longest_idle) {
                slot.shedding = true;
                slot.shed.notify_one();
            }
        }
        let id = table.0;
        table.0 += 1;
        let slot = Slot {
            busy: Arc::new(AtomicUsize::new(0)),
            idle_since: Arc::new(AtomicU64::new(self.now_ms())),
            shed: Arc::new(Notify::new()),
            shedding: false,
        };
        let admitted = Admitted {
            table: self.clone(),
            id,
            busy: slot.busy.clone(),
            idle_since: slot.idle_since.clone(),
            shed: slot.shed.clone(),
        };
        table.1.insert(id, slot);
        Some(admitted)
    }
}

fn idle(slot: &Slot) -> bool {
    !slot.shedding && slot.busy.load(Ordering::Acquire) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_the_reserve_and_stays_in_bounds() {
        assert_eq!(default_cap(256, 64), 192);
        assert_eq!(default_cap(10, 64), 1);
        assert_eq!(default_cap(1 << 20, 64), MAX_CONNECTIONS as usize);
    }

    #[test]
    fn at_the_cap_the_oldest_idle_connection_is_shed_and_busy_ones_are_kept() {
        let table = Table::new(2);
        let first = table.admit().expect("room");
        let second = table.admit().expect("room");
        let _running = first.request();
        // The first is busy, so the second (idle) goes; it counts until it has closed.
        let third = table.admit().expect("an idle one is shed");
        assert!(table.lock().1[&second.id].shedding);
        assert!(!table.lock().1[&first.id].shedding);
        drop(second);
        assert_eq!(table.lock().1.len(), 2);
        let _also = third.request();
        // Every connection is busy: nothing is shed and the newcomer is refused.
        assert!(table.admit().is_none());
        drop(first);
        assert!(table.admit().is_some());
    }

    #[test]
    fn a_connection_that_just_answered_outlasts_one_that_never_asked() {
        let table = Table::new(2);
        let silent = table.admit().expect("room");
        let working = table.admit().expect("room");
        std::thread::sleep(std::time::Duration::from_millis(5));
        drop(working.request());
        table.admit().expect("the silent one is shed");
        assert!(table.lock().1[&silent.id].shedding);
        assert!(!table.lock().1[&working.id].shedding);
    }
}
