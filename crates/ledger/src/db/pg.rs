//! The PostgreSQL store (SPEC.md §PostgreSQL store): its connections, and each read's and
//! write's own transaction bounded by the request's budget.

use std::time::Duration;

use super::pool::Lease;
use super::schema::migrate_sql;
use super::{Budget, Writer, run_caught};
use crate::errors::{ApiError, LedgerError, StoreError};
use crate::sql::{PgConn, Sql};
use metabob_process::guard::redact_url_credentials;

/// How long opening a PostgreSQL connection may take before the ledger says it cannot.
const PG_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens one connection to the PostgreSQL store.
pub(super) fn open_pg(url: &str) -> Result<PgConn, LedgerError> {
    let fail = |source: StoreError| LedgerError::Store {
        at: redact_url_credentials(url),
        source,
    };
    let mut config: tokio_postgres::Config =
        (url.parse()).map_err(|e| fail(StoreError::PgUrl(e)))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(PG_CONNECT_TIMEOUT);
    }
    config.application_name("metabob-ledger");
    PgConn::connect(&config).map_err(fail)
}

/// Connections a replica writes through on PostgreSQL. Each write is its own transaction, and
/// PostgreSQL flushes the commits that arrive together with one sync, so these many writes in
/// flight share a flush as SQLite's batch does.
pub(super) const PG_WRITERS: usize = 16;
/// How often a write PostgreSQL refused for a deadlock or serialization conflict is run again.
const PG_WRITE_ATTEMPTS: usize = 3;

/// Runs `f` on a PostgreSQL connection inside one transaction opened by `begin`, with the
/// budget's remaining time as the statement timeout: PostgreSQL cancels a statement still
/// running at the deadline, which the budget answers as exceeded. Committed on `Ok`. The
/// `BEGIN` goes out with `f`'s first statement ([`Sql::execute_deferred`]), so a transaction
/// costs no round trip of its own.
pub(super) fn pg_bounded<'c, T>(
    sql: Sql<'c>,
    budget: Budget,
    begin: &str,
    f: impl FnOnce(Sql<'c>) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let Sql::Pg(c) = sql else {
        return f(sql);
    };
    let left = budget.left_ms();
    if left == 0 {
        return Err(budget.exceeded());
    }
    c.batch_deferred(&format!("{begin}; SET LOCAL statement_timeout = {left}"));
    match f(sql) {
        Ok(v) => {
            c.batch("COMMIT")?;
            Ok(v)
        }
        Err(e) => {
            c.rollback()?;
            Err(e)
        }
    }
}

/// One write on PostgreSQL: its own transaction, run again when PostgreSQL refused it for a
/// conflict with a concurrent write (a deadlock between two replicas' holder locks, say).
pub(super) fn pg_write<T>(
    lease: &mut Lease,
    budget: Budget,
    f: &mut impl FnMut(&mut Writer<'_>) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let sql = lease.sql();
    let mut attempt = 1;
    let out = loop {
        let mut last_ms = 0;
        let out = pg_bounded(sql, budget, "BEGIN", |sql| {
            run_caught(
                f,
                &mut Writer {
                    sql,
                    last_ms: &mut last_ms,
                    clock: None,
                },
            )
        });
        match out {
            Err(ApiError::Contended) if attempt < PG_WRITE_ATTEMPTS => attempt += 1,
            other => break other,
        }
    };
    lease.clean = true;
    budget.settle(out)
}

/// One connection to the PostgreSQL store, its schema brought up to date.
pub(super) fn open_pg_migrated(url: &str) -> Result<PgConn, LedgerError> {
    let conn = open_pg(url)?;
    migrate_sql(Sql::Pg(&conn)).map_err(|e| LedgerError::Store {
        at: redact_url_credentials(url),
        source: StoreError::PgSchema(e),
    })?;
    Ok(conn)
}
