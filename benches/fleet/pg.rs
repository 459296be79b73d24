//! The fleet bench's PostgreSQL side: the cluster is tests/support/pg.rs's (one owner), started
//! beside the bench's temp dir so its WAL and the SQLite files share one filesystem; here only
//! PostgreSQL's own single-row commit rate, the ceiling the ledger's writes are weighed against.

use std::time::{Duration, Instant};

use super::Res;
use super::writes::RawRate;

#[allow(
    dead_code,
    clippy::panic,
    reason = "the tests' own entry points (which panic, as tests do) are not the bench's"
)]
#[path = "../../tests/support/pg.rs"]
mod cluster;

pub use cluster::Cluster;

/// PostgreSQL's ceiling for what the ledger does per write: one connection, each commit one
/// WAL flush. `rows_per_commit` 1 is autocommit, one INSERT per transaction; more are wrapped
/// in one transaction. The table is raw_sqlite's, a small concept row.
pub fn raw_commits(url: &str, rows_per_commit: usize, secs: Duration) -> Res<RawRate> {
    let db = |e: postgres::Error| format!("raw PostgreSQL: {e}");
    let mut client = postgres::Client::connect(url, postgres::NoTls).map_err(db)?;
    client
        .batch_execute(
            "CREATE TABLE concepts (id TEXT PRIMARY KEY, content TEXT NOT NULL, created_at BIGINT NOT NULL)",
        )
        .map_err(db)?;
    let insert = client
        .prepare("INSERT INTO concepts (id, content, created_at) VALUES ($1, $2, $3)")
        .map_err(db)?;
    let start = Instant::now();
    let (mut commits, mut i) = (0u64, 0i64);
    let row = |i: i64| {
        (
            format!("concept_{i:016x}"),
            format!("finding {i}: null check missing in handler {}", i % 37),
        )
    };
    while start.elapsed() < secs {
        if rows_per_commit == 1 {
            i += 1;
            let (id, content) = row(i);
            client.execute(&insert, &[&id, &content, &i]).map_err(db)?;
        } else {
            let mut tx = client.transaction().map_err(db)?;
            for _ in 0..rows_per_commit {
                i += 1;
                let (id, content) = row(i);
                tx.execute(&insert, &[&id, &content, &i]).map_err(db)?;
            }
            tx.commit().map_err(db)?;
        }
        commits += 1;
    }
    Ok(RawRate {
        rows_per_commit,
        commits,
        elapsed: start.elapsed(),
        // The work is the server's, measured with the ledger runs.
        cpu: None,
    })
}
