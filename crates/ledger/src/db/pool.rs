//! The pools of connections lent to requests (readers on both stores, writers on PostgreSQL),
//! each org held to its share of the readers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::budget::{Budget, disarm};
use super::pg::open_pg;
use super::sqlite::open_reader;
use super::{Backend, Inner, lock};
use crate::errors::ApiError;
use crate::sql::{PgConn, Sql};

/// A connection a pool lends out.
pub(super) enum Handle {
    Lite(Connection),
    Pg(PgConn),
}

impl Handle {
    pub(super) fn sql(&self) -> Sql<'_> {
        match self {
            Handle::Lite(c) => Sql::Lite(c),
            Handle::Pg(c) => Sql::Pg(c),
        }
    }
}

/// Connections and one permit per connection: a request holds a permit for as long as it holds
/// a connection, so waiting for one is waiting on the permits, which can be given up when the
/// budget runs out.
pub(super) struct Pool {
    pub(super) idle: Mutex<Vec<Handle>>,
    pub(super) permits: Arc<Semaphore>,
    pub(super) size: usize,
    /// The most connections one org's reads may hold at once: all but one (when there are two
    /// or more), so however many one org opens, one is left for every other org.
    share: usize,
    /// Each org's share, created at its first read; one small entry per org that has read.
    shares: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Pool {
    pub(super) fn new(idle: Vec<Handle>) -> Pool {
        let size = idle.len().max(1);
        Pool {
            idle: Mutex::new(idle),
            permits: Arc::new(Semaphore::new(size)),
            size,
            share: if size > 1 { size - 1 } else { 1 },
            shares: Mutex::default(),
        }
    }

    pub(super) fn share_of(&self, org: &str) -> Arc<Semaphore> {
        lock(&self.shares)
            .entry(org.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.share)))
            .clone()
    }
}

/// Which pool a lease goes back to.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    Reader,
    Writer,
}

/// A connection lent to one request; back in its pool (its deadline removed) when dropped, even
/// if the work panicked, and only then are its permits released. The lease lives on the
/// blocking thread, so a request whose caller went away still counts against the pool and its
/// org's share until its work has stopped. A PostgreSQL connection whose work did not finish
/// cleanly is closed instead of kept, since its session may be left inside a transaction.
pub(super) struct Lease {
    pub(super) conn: Option<Handle>,
    pub(super) kind: Kind,
    pub(super) clean: bool,
    pub(super) inner: Arc<Inner>,
    pub(super) _permit: OwnedSemaphorePermit,
    pub(super) _share: Option<OwnedSemaphorePermit>,
}

impl Lease {
    pub(super) fn sql(&self) -> Sql<'_> {
        self.conn
            .as_ref()
            .expect("a lease holds its connection until it is dropped")
            .sql()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        match &conn {
            Handle::Lite(c) => disarm(c),
            Handle::Pg(c) if !self.clean || !c.reusable() => return,
            Handle::Pg(_) => {}
        }
        if let Some(pool) = self.inner.pool(self.kind) {
            lock(&pool.idle).push(conn);
        }
    }
}

impl Inner {
    pub(super) fn pool(&self, kind: Kind) -> Option<&Pool> {
        match (kind, &self.backend) {
            (Kind::Reader, _) => Some(&self.readers),
            (Kind::Writer, Backend::Pg { writers, .. }) => Some(writers),
            (Kind::Writer, Backend::Lite { .. }) => None,
        }
    }

    /// An idle connection of the pool; a fresh one if a lease was ever lost or closed, so the
    /// pool keeps its size.
    pub(super) fn take(&self, kind: Kind) -> Result<Handle, ApiError> {
        if let Some(conn) = self.pool(kind).and_then(|p| lock(&p.idle).pop()) {
            return Ok(conn);
        }
        let fresh = match &self.backend {
            Backend::Lite { path, .. } => open_reader(path).map(Handle::Lite),
            Backend::Pg { url, .. } => open_pg(url).map(Handle::Pg),
        };
        fresh.map_err(|e| {
            tracing::error!("{e}");
            ApiError::Database
        })
    }
}

/// A permit of `permits`, waited for no longer than `budget` allows.
pub(super) async fn acquire(
    permits: &Arc<Semaphore>,
    budget: Budget,
) -> Result<OwnedSemaphorePermit, ApiError> {
    tokio::time::timeout_at(budget.deadline.into(), permits.clone().acquire_owned())
        .await
        .map_err(|_| budget.exceeded())?
        .map_err(|_| ApiError::Internal("the connection pool is closed".into()))
}
