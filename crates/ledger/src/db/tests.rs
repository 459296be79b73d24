use super::*;

/// Counts to a billion: seconds of SQLite work, far past any budget these tests set.
const ENDLESS: &str =
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000000)";

fn count_orgs(conn: Sql<'_>) -> Result<i64, ApiError> {
    conn.value("SELECT count(*) FROM orgs", &[])
}

fn sqlite(dir: &tempfile::TempDir) -> Location {
    Location::Sqlite(dir.path().to_path_buf())
}

fn queued(db: &Db) -> usize {
    match &db.0.backend {
        Backend::Lite { queue, .. } => QUEUED_WRITES - queue.capacity(),
        Backend::Pg { .. } => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_stops_a_read_and_rolls_back_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&sqlite(&dir), 1).unwrap();
    let endless_read = format!("{ENDLESS} SELECT count(*) FROM n");
    let read = db
        .read("org_a", Budget::start(50), move |c| {
            c.value::<i64>(&endless_read, &[])
        })
        .await;
    assert!(
        matches!(read, Err(ApiError::BudgetExceeded { budget_ms: 50 })),
        "{read:?}"
    );
    // The one reader went back to the pool without its deadline and serves the next read.
    let orgs = db.read("org_a", Budget::start(60_000), count_orgs).await;
    assert_eq!(orgs.unwrap(), 0);

    let endless_write = format!(
        "INSERT INTO orgs (id, name, created_at) {ENDLESS} SELECT 'o' || i, 'n' || i, 0 FROM n"
    );
    let write = db
        .write(Budget::start(50), move |w| {
            w.sql().execute(&endless_write, &[])?;
            Ok(())
        })
        .await;
    assert!(
        matches!(write, Err(ApiError::BudgetExceeded { budget_ms: 50 })),
        "{write:?}"
    );
    let orgs = db.read_unscoped(Budget::start(60_000), count_orgs).await;
    assert_eq!(orgs.unwrap(), 0, "a stopped write leaves nothing behind");
    let write = db
        .write(Budget::start(60_000), |w| {
            w.sql().execute(
                "INSERT INTO orgs (id, name, created_at) VALUES ('org_x', 'x', 0)",
                &[],
            )
        })
        .await;
    assert_eq!(write.unwrap(), 1, "the writer works after an interrupt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_org_cannot_hold_every_reader() {
    let dir = tempfile::tempdir().unwrap();
    // Two readers: each org may hold one.
    let db = Db::open(&sqlite(&dir), 2).unwrap();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = tokio::spawn({
        let db = db.clone();
        async move {
            db.read("org_a", Budget::start(60_000), move |_| {
                let _ = started_tx.send(());
                let _ = release_rx.recv();
                Ok(())
            })
            .await
        }
    });
    started_rx.await.unwrap();
    assert_eq!(db.readers(), (2, 1));

    // org_a's second read waits for its share, here until its budget runs out...
    let second = db.read("org_a", Budget::start(100), |_| Ok(())).await;
    assert!(
        matches!(second, Err(ApiError::BudgetExceeded { budget_ms: 100 })),
        "{second:?}"
    );
    // ...while another org, and the key check, find the reader left for them.
    db.read("org_b", Budget::start(60_000), count_orgs)
        .await
        .unwrap();
    db.read_unscoped(Budget::start(60_000), count_orgs)
        .await
        .unwrap();

    release_tx.send(()).unwrap();
    holder.await.unwrap().unwrap();
    db.read("org_a", Budget::start(60_000), count_orgs)
        .await
        .unwrap();
    assert_eq!(db.readers(), (2, 0));
}

fn insert_org(id: &'static str) -> impl FnMut(&mut Writer<'_>) -> Result<usize, ApiError> {
    move |w| {
        w.sql().execute(
            "INSERT INTO orgs (id, name, created_at) VALUES (?1, ?1, 0)",
            args![id],
        )
    }
}

/// Holds the writer thread inside a batch of its own until the sender is used, so the writes
/// queued meanwhile are taken as one batch once it is let go. Waiting for the queue to empty
/// instead would race the thread's taking of it.
async fn hold_writer(
    db: &Db,
) -> (
    tokio::task::JoinHandle<Result<(), ApiError>>,
    std::sync::mpsc::Sender<()>,
) {
    let (held_tx, held_rx) = tokio::sync::oneshot::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let mut held_tx = Some(held_tx);
    let holder = tokio::spawn({
        let db = db.clone();
        async move {
            db.write(Budget::start(60_000), move |_| {
                if let Some(tx) = held_tx.take() {
                    let _ = tx.send(());
                }
                let _ = release_rx.recv();
                Ok(())
            })
            .await
        }
    });
    held_rx.await.unwrap();
    (holder, release_tx)
}

/// Queues one write behind the held writer and waits until it sits in the queue, so the
/// batch's order is the order of these calls. Only sound while the writer thread is held
/// inside a batch: then nothing takes from the queue, and its length only grows.
async fn queue_write<T: Send + 'static>(
    db: &Db,
    budget_ms: u64,
    work: impl FnMut(&mut Writer<'_>) -> Result<T, ApiError> + Send + 'static,
) -> tokio::task::JoinHandle<Result<T, ApiError>> {
    let before = queued(db);
    let handle = tokio::spawn({
        let db = db.clone();
        async move { db.write(Budget::start(budget_ms), work).await }
    });
    while queued(db) == before {
        tokio::task::yield_now().await;
    }
    handle
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_commit_holds_a_batch_and_an_interrupted_write_undoes_only_itself() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&sqlite(&dir), 1).unwrap();
    let (holder, release_tx) = hold_writer(&db).await;
    let first = queue_write(&db, 60_000, insert_org("org_a")).await;
    let endless = format!(
        "INSERT INTO orgs (id, name, created_at) {ENDLESS} SELECT 'o' || i, 'n' || i, 0 FROM n"
    );
    let stopped = queue_write(&db, 1_000, move |w| w.sql().execute(&endless, &[])).await;
    let last = queue_write(&db, 60_000, insert_org("org_c")).await;
    // A write that fails on its own (a duplicate key) is undone alone, without a restart.
    let duplicate = queue_write(&db, 60_000, insert_org("org_c")).await;
    release_tx.send(()).unwrap();
    holder.await.unwrap().unwrap();

    assert_eq!(first.await.unwrap().unwrap(), 1);
    let stopped = stopped.await.unwrap();
    assert!(
        matches!(stopped, Err(ApiError::BudgetExceeded { budget_ms: 1_000 })),
        "{stopped:?}"
    );
    assert_eq!(last.await.unwrap().unwrap(), 1);
    assert!(duplicate.await.unwrap().is_err());
    let names: Vec<String> = db
        .read_unscoped(Budget::start(60_000), |c| {
            c.query("SELECT id FROM orgs ORDER BY id", &[], |r| {
                r.get::<String>(0)
            })
        })
        .await
        .unwrap();
    // The interrupt undid the open transaction; the write before it was run again.
    assert_eq!(names, ["org_a", "org_c"]);
}

fn insert_concept(
    word: &'static str,
    fail: bool,
) -> impl FnMut(&mut Writer<'_>) -> Result<(), ApiError> {
    insert_concept_as(word.to_string(), word, fail)
}

/// A note in org_a with id `id` whose summary is `word`; a failing one fails after its insert.
fn insert_concept_as(
    id: String,
    word: &'static str,
    fail: bool,
) -> impl FnMut(&mut Writer<'_>) -> Result<(), ApiError> {
    move |w| {
        w.sql().execute(
            "INSERT INTO concepts (id, org_id, shape, source_type, summary, content, pointer,
                                   priority, created_at, updated_at)
               VALUES (?1, 'org_a', 'note', 'test', ?2, 'text', '{}', 0.5, 0, 0)",
            args![id, word],
        )?;
        if fail {
            return Err(ApiError::bad("this write fails after its insert"));
        }
        Ok(())
    }
}

/// A fresh SQLite store holding the org `org_a`.
fn with_org_a(dir: &tempfile::TempDir) -> Db {
    let db = Db::open(&sqlite(dir), 1).unwrap();
    db.with_writer(|w| {
        w.sql()
            .execute("INSERT INTO orgs VALUES ('org_a', 'a', 0)", &[])
    })
    .unwrap();
    db
}

/// FTS5's own check that its index matches the concepts. It runs before `with_writer` adds what
/// the index lacks, so the index must already be whole: an earlier `with_writer` leaves it so.
fn check_text_index(db: &Db) {
    db.with_writer(|w| {
        w.sql().execute_batch(
            "INSERT INTO concepts_fts (concepts_fts, rank) VALUES ('integrity-check', 1)",
        )
    })
    .unwrap();
}

/// The concepts of org_a whose summary the full-text index finds for `words`, in write order.
async fn indexed(db: &Db, words: &'static str) -> Vec<String> {
    db.read("org_a", Budget::start(60_000), move |c| {
        c.query(
            "SELECT c.id FROM concepts c WHERE c.seq IN (SELECT rowid FROM concepts_fts
               WHERE concepts_fts MATCH ?1) ORDER BY c.seq",
            args![words],
            |r| r.get::<String>(0),
        )
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batchs_concepts_reach_the_full_text_index_before_a_search_and_an_undone_ones_never() {
    let dir = tempfile::tempdir().unwrap();
    let db = with_org_a(&dir);
    let (holder, release_tx) = hold_writer(&db).await;
    let writes = [
        queue_write(&db, 60_000, insert_concept("alpha", false)).await,
        queue_write(&db, 60_000, insert_concept("beta", true)).await,
        queue_write(&db, 60_000, insert_concept("gamma", false)).await,
    ];
    release_tx.send(()).unwrap();
    holder.await.unwrap().unwrap();
    let mut answers = Vec::new();
    for w in writes {
        answers.push(w.await.unwrap().is_ok());
    }
    assert_eq!(answers, [true, false, true]);
    let words = "alpha OR beta OR gamma OR delta";
    // Committed and acknowledged, not yet indexed: fewer than FTS_LAG_ROWS are behind.
    assert!(indexed(&db, words).await.is_empty());
    // A lag is no damage: the check a backup and a restore run passes.
    let check: String = db
        .read("org_a", Budget::start(60_000), |c| {
            c.value("PRAGMA integrity_check", &[])
        })
        .await
        .unwrap();
    assert_eq!(check, "ok");
    db.index_text(Budget::start(60_000)).await.unwrap();
    assert_eq!(indexed(&db, words).await, ["alpha", "gamma"]);
    // Startup's writer (the key commands' way) keeps the index whole.
    db.with_writer(insert_concept("delta", false)).unwrap();
    assert_eq!(indexed(&db, words).await, ["alpha", "gamma", "delta"]);
    check_text_index(&db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_catches_up_every_fts_lag_rows_concepts_and_at_a_clean_stop() {
    let dir = tempfile::tempdir().unwrap();
    let db = with_org_a(&dir);
    let write = |n: i64| {
        let db = db.clone();
        async move {
            let note = insert_concept_as(format!("c{n}"), "lagging", false);
            db.write(Budget::start(60_000), note).await.unwrap();
        }
    };
    let count = |db: &Db| {
        let db = db.clone();
        async move { indexed(&db, "lagging").await.len() as i64 }
    };
    for n in 1..schema::FTS_LAG_ROWS {
        write(n).await;
    }
    assert_eq!(
        count(&db).await,
        0,
        "one short of the lag, nothing is indexed"
    );
    write(schema::FTS_LAG_ROWS).await;
    assert_eq!(
        count(&db).await,
        schema::FTS_LAG_ROWS,
        "the commit that reaches it indexes all"
    );
    write(schema::FTS_LAG_ROWS + 1).await;
    assert_eq!(count(&db).await, schema::FTS_LAG_ROWS);
    db.close();
    let db = Db::open(&sqlite(&dir), 1).unwrap();
    assert_eq!(
        count(&db).await,
        schema::FTS_LAG_ROWS + 1,
        "the stop indexed the rest"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_concept_the_index_lags_behind_leaves_the_index_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = with_org_a(&dir);
    db.write(Budget::start(60_000), insert_concept("alpha", false))
        .await
        .unwrap();
    db.index_text(Budget::start(60_000)).await.unwrap();
    for word in ["beta", "gamma"] {
        db.write(Budget::start(60_000), insert_concept(word, false))
            .await
            .unwrap();
    }
    // By hand, as an operator might: one indexed concept, one the index has not reached.
    db.with_writer(|w| {
        w.sql()
            .execute_batch("DELETE FROM concepts WHERE id IN ('alpha', 'beta')")
    })
    .unwrap();
    check_text_index(&db);
    assert_eq!(indexed(&db, "alpha OR beta OR gamma").await, ["gamma"]);
}

#[test]
fn the_writer_checkpoints_the_wal_at_its_own_cadence_not_sqlites_default() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&sqlite(&dir), 1).unwrap();
    let pages = db
        .with_writer(|w| w.sql().value::<i64>("PRAGMA wal_autocheckpoint", &[]))
        .unwrap();
    assert_eq!(pages, sqlite::WAL_CHECKPOINT_PAGES);
    assert_ne!(pages, 1000, "SQLite's default");
}
