//! One PostgreSQL connection of the ledger (anchor: pg-pipeline), driven on the thread that
//! uses it, whose unread statements travel with the next round trip.
//!
//! Each statement used to be its own round trip: send, sleep until the backend answers, wake.
//! On a host whose cores the backends share, those sleeps and wake-ups were most of a write's
//! cost, and the backends sat idle waiting for the next statement. A statement whose answer the
//! caller does not read (an index row, a link, `BEGIN`) now waits in a queue and goes out
//! together with the next statement that is read, or with the `COMMIT`: PostgreSQL answers them
//! in order, and the first failure among them is the round trip's answer.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::Poll;

use futures_core::Stream;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Statement};

use super::{Arg, Row};
use crate::errors::{ApiError, StoreError};

/// Statement texts one connection keeps prepared; past this the cache starts over (searches build
/// their text from the query's shape, so the set of texts is bounded but large).
const MAX_PREPARED: usize = 512;

type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<T, tokio_postgres::Error>> + 'a>>;
/// Prepared statements by text, then by the kinds of their parameters (a null binds as its
/// column's kind, so one text may be prepared for more than one).
type Prepared = HashMap<String, Vec<(Vec<Type>, Statement)>>;
type Driver = Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send>>;

/// What reads and writes the socket: the connection's half of tokio-postgres, polled by
/// whichever thread waits on an answer, so that no other thread is woken for a statement.
struct Io {
    runtime: tokio::runtime::Runtime,
    /// `None` once the connection ended; the client then answers every request with an error.
    driver: Option<Driver>,
}

/// A statement sent with the next round trip, its answer read only for its error.
enum Queued {
    Batch(String),
    Statement(Statement, Vec<Arg>),
}

impl Queued {
    fn send<'a>(&'a self, client: &'a Client) -> Answer<'a, ()> {
        match self {
            Queued::Batch(sql) => Box::pin(client.batch_execute(sql)),
            Queued::Statement(stmt, args) => Box::pin(async move {
                let params: Vec<_> = args.iter().map(Arg::pg).collect();
                client.execute(stmt, &params).await.map(drop)
            }),
        }
    }
}

/// One PostgreSQL connection, used by one thread at a time (a pool lends it out whole), with its
/// prepared statements and the statements waiting for the next round trip.
pub struct PgConn {
    client: Client,
    io: RefCell<Io>,
    prepared: RefCell<Prepared>,
    queued: RefCell<Vec<Queued>>,
}

impl PgConn {
    /// Connects with `config`; the connection's I/O runs on a runtime of its own, on the calling
    /// thread, as the synchronous client does.
    pub fn connect(config: &tokio_postgres::Config) -> Result<PgConn, StoreError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(StoreError::Runtime)?;
        let (client, connection) = runtime
            .block_on(config.connect(tokio_postgres::NoTls))
            .map_err(StoreError::Connect)?;
        Ok(PgConn {
            client,
            io: RefCell::new(Io {
                runtime,
                driver: Some(Box::pin(connection)),
            }),
            prepared: RefCell::default(),
            queued: RefCell::default(),
        })
    }

    /// Whether the next lease can have it: still connected, and nothing left queued (a queued
    /// statement would go out in the next lease's transaction).
    pub fn reusable(&self) -> bool {
        !self.client.is_closed() && self.queued.borrow().is_empty()
    }

    /// Waits on this thread for `work`, reading and writing the socket meanwhile.
    fn drive<T>(&self, work: impl Future<Output = T>) -> T {
        let mut work = pin!(work);
        let io = &mut *self.io.borrow_mut();
        let Io { runtime, driver } = io;
        runtime.block_on(poll_fn(|cx| {
            // The work first: what it sends is then written out by the driver in this same pass.
            let out = work.as_mut().poll(cx);
            if let Some(d) = driver.as_mut()
                && let Poll::Ready(end) = d.as_mut().poll(cx)
            {
                if let Err(e) = end {
                    tracing::warn!("ledger database connection ended: {e}");
                }
                *driver = None;
            }
            out
        }))
    }

    /// Sends every queued statement and then `last`, and waits for all their answers: the first
    /// queued failure if there is one (what came after it in the transaction failed for it),
    /// else `last`'s answer.
    fn round_trip<T>(
        &self,
        last: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, ApiError> {
        let queued = std::mem::take(&mut *self.queued.borrow_mut());
        if queued.is_empty() {
            return Ok(self.drive(last)?);
        }
        let mut sent: Vec<Option<Answer<'_, ()>>> =
            queued.iter().map(|q| Some(q.send(&self.client))).collect();
        let mut last = pin!(last);
        let mut answer = None;
        let mut failed = None;
        self.drive(poll_fn(|cx| {
            // In queue order, so they go out ahead of `last`; PostgreSQL answers in that order.
            for slot in &mut sent {
                if let Some(f) = slot
                    && let Poll::Ready(r) = f.as_mut().poll(cx)
                {
                    *slot = None;
                    if let Err(e) = r {
                        failed.get_or_insert(e);
                    }
                }
            }
            if answer.is_none()
                && let Poll::Ready(r) = last.as_mut().poll(cx)
            {
                answer = Some(r);
            }
            if answer.is_some() && sent.iter().all(Option::is_none) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }));
        match (failed, answer) {
            (Some(e), _) => Err(e.into()),
            (None, Some(r)) => Ok(r?),
            (None, None) => Err(ApiError::Internal("a round trip ended unanswered".into())),
        }
    }

    pub(super) fn statement(&self, sql: &str, args: &[Arg]) -> Result<Statement, ApiError> {
        // Looked up by the borrowed text: a statement run again allocates nothing to find itself.
        let same = |types: &[Type]| types.iter().cloned().eq(args.iter().map(Arg::pg_type));
        if let Some((_, s)) = self
            .prepared
            .borrow()
            .get(sql)
            .and_then(|kinds| kinds.iter().find(|(types, _)| same(types)))
        {
            return Ok(s.clone());
        }
        let types: Vec<Type> = args.iter().map(Arg::pg_type).collect();
        // Preparing reads nothing the queued statements write, so they keep waiting.
        let stmt = self.drive(
            self.client
                .prepare_typed(&super::dollar_placeholders(sql), &types),
        )?;
        let mut cache = self.prepared.borrow_mut();
        if cache.len() >= MAX_PREPARED {
            cache.clear();
        }
        cache
            .entry(sql.to_string())
            .or_default()
            .push((types, stmt.clone()));
        Ok(stmt)
    }

    pub(super) fn execute(&self, sql: &str, args: &[Arg]) -> Result<u64, ApiError> {
        let stmt = self.statement(sql, args)?;
        let params = params(args);
        self.round_trip(self.client.execute(&stmt, &params))
    }

    /// Queues one statement for the next round trip.
    pub(super) fn execute_deferred(&self, sql: &str, args: &[Arg]) -> Result<(), ApiError> {
        let stmt = self.statement(sql, args)?;
        self.queued
            .borrow_mut()
            .push(Queued::Statement(stmt, args.to_vec()));
        Ok(())
    }

    pub(super) fn query<T>(
        &self,
        sql: &str,
        args: &[Arg],
        mut f: impl FnMut(&Row<'_>) -> Result<T, ApiError>,
    ) -> Result<Vec<T>, ApiError> {
        let stmt = self.statement(sql, args)?;
        let params = params(args);
        let rows = self.round_trip(self.client.query(&stmt, &params))?;
        rows.iter().map(|r| f(&Row::Pg(r))).collect()
    }

    /// The rows of one query through `f` until it answers `false`; the rest are read off the
    /// socket and dropped, never kept.
    pub(super) fn query_until(
        &self,
        sql: &str,
        args: &[Arg],
        mut f: impl FnMut(&Row<'_>) -> Result<bool, ApiError>,
    ) -> Result<(), ApiError> {
        let stmt = self.statement(sql, args)?;
        let rows = self.round_trip(self.client.query_raw(&stmt, args.iter().map(Arg::pg)))?;
        let mut rows = pin!(rows);
        self.drive(poll_fn(|cx| {
            loop {
                return match rows.as_mut().poll_next(cx) {
                    Poll::Ready(Some(Ok(r))) => match f(&Row::Pg(&r)) {
                        Ok(true) => continue,
                        Ok(false) => Poll::Ready(Ok(())),
                        Err(e) => Poll::Ready(Err(e)),
                    },
                    Poll::Ready(Some(Err(e))) => Poll::Ready(Err(e.into())),
                    Poll::Ready(None) => Poll::Ready(Ok(())),
                    Poll::Pending => Poll::Pending,
                };
            }
        }))
    }

    /// Statements with no parameters, sent in one round trip (transaction control, DDL).
    pub fn batch(&self, sql: &str) -> Result<(), ApiError> {
        self.round_trip(self.client.batch_execute(sql))
    }

    /// [`PgConn::batch`] sent with the next round trip.
    pub fn batch_deferred(&self, sql: &str) {
        self.queued
            .borrow_mut()
            .push(Queued::Batch(sql.to_string()));
    }

    /// Ends the transaction undone. What was queued is dropped unsent: it would be undone too.
    pub fn rollback(&self) -> Result<(), ApiError> {
        self.queued.borrow_mut().clear();
        self.batch("ROLLBACK")
    }
}

fn params(args: &[Arg]) -> Vec<&(dyn ToSql + Sync)> {
    args.iter().map(Arg::pg).collect()
}
