//! The schema, one step per version, and the migration that brings either store up to
//! [`SCHEMA_VERSION`].

use rusqlite::Connection;

use crate::errors::ApiError;
use crate::sql::{Dialect, Sql, args, pg_ddl};

/// Bumped with every schema change; `migrate` brings older files forward.
pub const SCHEMA_VERSION: i64 = 12;

// anchor: schema
/// The first version's tables, in SQLite's words; PostgreSQL's are derived from them
/// (`sql::pg_ddl`), so the columns have one owner.
const TABLES_V1: &str = r#"
CREATE TABLE orgs (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL
);
CREATE TABLE api_keys (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    key_hash    TEXT NOT NULL UNIQUE,
    scopes      TEXT NOT NULL,
    label       TEXT,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);
-- AUTOINCREMENT: seq is never reused, so it orders claims across restarts.
CREATE TABLE concepts (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    org_id          TEXT NOT NULL REFERENCES orgs(id),
    shape           TEXT NOT NULL,
    source_type     TEXT NOT NULL,
    summary         TEXT NOT NULL,
    content         TEXT NOT NULL,
    pointer         TEXT NOT NULL,
    budget          INTEGER,
    priority        REAL NOT NULL,
    times_loaded    INTEGER NOT NULL DEFAULT 0,
    times_succeeded INTEGER NOT NULL DEFAULT 0,
    times_failed    INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    client_claim    TEXT
);
CREATE INDEX concepts_by_org ON concepts(org_id, seq);
CREATE TABLE edges (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    org_id          TEXT NOT NULL REFERENCES orgs(id),
    from_id         TEXT NOT NULL REFERENCES concepts(id),
    to_id           TEXT NOT NULL REFERENCES concepts(id),
    edge_type       TEXT NOT NULL,
    weight          REAL NOT NULL,
    traversal_count INTEGER NOT NULL,
    description     TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    client_claim    TEXT,
    UNIQUE (org_id, from_id, to_id, edge_type)
);
CREATE INDEX edges_from ON edges(org_id, from_id);
CREATE INDEX edges_to ON edges(org_id, to_id);
CREATE TABLE usage (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,
    org_id       TEXT NOT NULL REFERENCES orgs(id),
    concept_id   TEXT NOT NULL REFERENCES concepts(id),
    outcome      TEXT NOT NULL,
    trace_id     TEXT NOT NULL,
    activity_id  TEXT,
    task_id      TEXT,
    created_at   INTEGER NOT NULL,
    client_claim TEXT
);
CREATE INDEX usage_by_concept ON usage(org_id, concept_id, seq);
"#;

/// SQLite's full-text index over a concept's summary, content and shape, kept in step by triggers.
const FTS_V1: &str = r#"
CREATE VIRTUAL TABLE concepts_fts USING fts5(
    summary, content, shape, content='concepts', content_rowid='seq'
);
CREATE TRIGGER concepts_fts_ins AFTER INSERT ON concepts BEGIN
    INSERT INTO concepts_fts(rowid, summary, content, shape)
    VALUES (new.seq, new.summary, new.content, new.shape);
END;
CREATE TRIGGER concepts_fts_del AFTER DELETE ON concepts BEGIN
    INSERT INTO concepts_fts(concepts_fts, rowid, summary, content, shape)
    VALUES ('delete', old.seq, old.summary, old.content, old.shape);
END;
"#;

/// Version 9: FTS5 rows are no longer written by a trigger at each insert, where every write's
/// savepoint release flushed FTS5's pending terms as a segment of its own, but in batches
/// ([`fts_catch_up`]).
const FTS_PER_COMMIT_V9: &str = "DROP TRIGGER IF EXISTS concepts_fts_ins;";

/// Concepts a group commit may leave out of the full-text index before it adds them. FTS5 writes
/// a segment per flush and merges segments as they pile up, so the cost of indexing is mostly
/// per flush, not per row: a flush per commit cost about a third of SQLite's work per write.
/// The lag is never seen: a text search first brings the index up to date (`Db::index_text`).
pub const FTS_LAG_ROWS: i64 = 256;

/// Adds to SQLite's full-text index every concept it does not hold yet, in the caller's
/// transaction, when at least `at_least` are missing (anchor: fts-catch-up). What the index
/// holds is read from FTS5's own per-document table (`_docsize`, one row per indexed rowid,
/// written at once), so nothing kept in memory or in a table of ours can disagree with it, and
/// the index only ever lacks the newest concepts.
pub fn fts_catch_up(conn: &Connection, at_least: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "WITH indexed(seq) AS (SELECT coalesce(max(id), 0) FROM concepts_fts_docsize)
         INSERT INTO concepts_fts (rowid, summary, content, shape)
         SELECT seq, summary, content, shape FROM concepts
           WHERE seq > (SELECT seq FROM indexed)
             AND (SELECT coalesce(max(seq), 0) FROM concepts) - (SELECT seq FROM indexed) >= ?1",
    )?
    .execute([at_least])
    .map(drop)
}

/// Version 11: a deleted concept is taken out of the full-text index only when the index holds
/// it. The index may lag by the newest concepts ([`FTS_LAG_ROWS`]), and FTS5 told to delete a
/// row it never indexed subtracts terms it never added. The ledger deletes no concept; this
/// keeps the index whole when someone does.
const FTS_DELETE_INDEXED_V11: &str = r#"
DROP TRIGGER IF EXISTS concepts_fts_del;
CREATE TRIGGER concepts_fts_del AFTER DELETE ON concepts
WHEN old.seq <= (SELECT coalesce(max(id), 0) FROM concepts_fts_docsize) BEGIN
    INSERT INTO concepts_fts(concepts_fts, rowid, summary, content, shape)
    VALUES ('delete', old.seq, old.summary, old.content, old.shape);
END;
"#;

/// Version 12: no index of a concept's org alone. Every read of concepts by org also names the
/// shape or the id, or reads the whole org, and the rank index (`concepts::rank_index_ddl`)
/// leads with the org, so it serves the rest; the org index was two of the thirteen pages a
/// group commit wrote to the WAL.
const NO_ORG_INDEX_V12: &str = "DROP INDEX IF EXISTS concepts_by_org;";

/// PostgreSQL's full-text search over the same three columns: a generated `tsvector` with the
/// `simple` configuration (no stemming, no stop words), so a word matches as it does in FTS5.
// anchor: pg-schema
const PG_FTS_V1: &str = r#"
ALTER TABLE concepts ADD COLUMN fts tsvector GENERATED ALWAYS AS (
    to_tsvector('simple', summary || ' ' || content || ' ' || shape)
) STORED;
CREATE INDEX concepts_fts ON concepts USING GIN (fts);
"#;

/// Version 6: a key may expire (`ledger key create --expires-in`/`--expires-at`); `NULL` never.
/// Keys written before it have none.
const KEY_EXPIRY_V6: &str = "ALTER TABLE api_keys ADD COLUMN expires_at INTEGER;";

/// Version 10: tasks leave the file index, which related findings never answer with (a backlog
/// of tasks on a file made every lookup read each of them only to pass it over); it is rebuilt
/// from the rows by the rule that now files only findings that are no task.
const FILES_WITHOUT_TASKS_V10: &str = "DELETE FROM finding_files;";

/// The schema steps, one per version; each runs once, in order, inside the migration's
/// transaction.
fn schema_steps(dialect: Dialect) -> [String; 12] {
    let tables = [TABLES_V1, crate::goals::SCHEMA, crate::open_tasks::SCHEMA];
    let rank = crate::concepts::rank_index_ddl();
    let files = format!(
        "{}{}{}",
        crate::row_ids::SCHEMA,
        crate::related::SCHEMA,
        crate::open_tasks::SCHEMA_V5
    );
    match dialect {
        Dialect::Sqlite => [
            format!("{TABLES_V1}{FTS_V1}"),
            tables[1].into(),
            tables[2].into(),
            rank,
            files,
            KEY_EXPIRY_V6.into(),
            crate::task_edges::SCHEMA_V7.into(),
            crate::open_tasks::SCHEMA_V8.into(),
            FTS_PER_COMMIT_V9.into(),
            FILES_WITHOUT_TASKS_V10.into(),
            FTS_DELETE_INDEXED_V11.into(),
            NO_ORG_INDEX_V12.into(),
        ],
        Dialect::Postgres => [
            format!("{}{PG_FTS_V1}", pg_ddl(TABLES_V1)),
            pg_ddl(tables[1]),
            pg_ddl(tables[2]),
            rank,
            pg_ddl(&files),
            pg_ddl(KEY_EXPIRY_V6),
            pg_ddl(crate::task_edges::SCHEMA_V7),
            pg_ddl(crate::open_tasks::SCHEMA_V8),
            // The tsvector column is generated by PostgreSQL itself.
            String::new(),
            FILES_WITHOUT_TASKS_V10.into(),
            String::new(),
            NO_ORG_INDEX_V12.into(),
        ],
    }
}

/// Brings the schema to [`SCHEMA_VERSION`] (anchor: migrate). Two processes may start on a
/// fresh store at once: SQLite's immediate transaction, and on PostgreSQL an advisory lock held
/// for the migration's transaction, make one create the schema and the other see it done.
pub(super) fn migrate_sql(sql: Sql<'_>) -> Result<(), ApiError> {
    if stored_version(sql)? >= SCHEMA_VERSION {
        return Ok(());
    }
    sql.transaction(|sql| {
        if sql.dialect() == Dialect::Postgres {
            sql.query_opt(
                "SELECT pg_advisory_xact_lock(?1)",
                args![MIGRATION_LOCK],
                |_| Ok(()),
            )?;
            sql.execute(
                "CREATE TABLE IF NOT EXISTS ledger_meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL)",
                &[],
            )?;
        }
        let version = stored_version(sql)?;
        for (i, step) in schema_steps(sql.dialect()).iter().enumerate() {
            let step_version = i as i64 + 1;
            if version < step_version {
                sql.execute_batch(step)?;
            }
        }
        // The indexes of versions 3 and 5 are built from the rows already there, once every
        // column they fill exists; the ids first, which the open-task index reads by.
        if version < 5 {
            crate::row_ids::backfill(sql)?;
        }
        if version < 3 {
            crate::open_tasks::backfill(sql)?;
        } else if version < 5 {
            crate::open_tasks::backfill_summaries(sql)?;
        }
        if version < 10 {
            crate::related::backfill(sql)?;
        }
        if version < 7 {
            crate::task_edges::backfill(sql)?;
        }
        if version < 8 {
            crate::open_tasks::backfill_keys(sql)?;
        }
        match sql.dialect() {
            Dialect::Sqlite => sql.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}")),
            Dialect::Postgres => sql
                .execute(
                    "INSERT INTO ledger_meta (key, value) VALUES ('schema_version', ?1)
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    args![SCHEMA_VERSION],
                )
                .map(drop),
        }
    })
}

/// The advisory lock key of the PostgreSQL migration (and first start): any constant no holder
/// lock can equal in practice.
pub(super) const MIGRATION_LOCK: i64 = 0x6d62_6c65_6467_6572;

fn stored_version(sql: Sql<'_>) -> Result<i64, ApiError> {
    match sql {
        Sql::Lite(c) => Ok(c.pragma_query_value(None, "user_version", |r| r.get(0))?),
        Sql::Pg(_) => {
            let exists: Option<String> =
                sql.value("SELECT to_regclass('ledger_meta')::text", &[])?;
            if exists.is_none() {
                return Ok(0);
            }
            Ok(sql
                .query_opt(
                    "SELECT value FROM ledger_meta WHERE key = 'schema_version'",
                    &[],
                    |r| r.get::<i64>(0),
                )?
                .unwrap_or(0))
        }
    }
}

pub(super) fn migrate(conn: &Connection) -> Result<(), ApiError> {
    migrate_sql(Sql::Lite(conn))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{DB_FILE, open_connection};

    /// A ledger file at `version` holding `rows`, opened by this build, which brings it to
    /// [`SCHEMA_VERSION`]. The directory must outlive the connection.
    fn migrated_from(version: usize, rows: &str) -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        {
            let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
            for step in &schema_steps(Dialect::Sqlite)[..version] {
                conn.execute_batch(step).unwrap();
            }
            conn.execute_batch(&format!("{rows}\nPRAGMA user_version = {version};"))
                .unwrap();
        }
        let conn = open_connection(dir.path()).unwrap();
        assert_eq!(stored_version(Sql::Lite(&conn)).unwrap(), SCHEMA_VERSION);
        (dir, conn)
    }

    /// An org and one finding concept of `content` (header lines) and `summary`.
    fn a_finding(id: &str, summary: &str, content: &str) -> String {
        format!(
            "INSERT OR IGNORE INTO orgs VALUES ('org_a', 'a', 0);
             INSERT INTO concepts (id, org_id, shape, source_type, summary, content, pointer,
                                   priority, created_at, updated_at)
               VALUES ('{id}', 'org_a', 'code_finding', 'metabob_annotation', '{summary}',
                       '{content}', '{{}}', 0.5, 0, 0);"
        )
    }

    const A_TASK: &str = "repo: example.test/o/app\nfiles: ./Src/A.py, b.py\nseverity: HIGH\n\
                          category: task\nstatus: open\nfinding_ids: agf_0123456789abcdef\n\n";
    const A_BUG: &str = "repo: example.test/o/app\nfiles: ./Src/A.py\nseverity: LOW\n\
                         category: bug\nstatus: open\nfinding_ids: agf_00000000000000bb\n\n";

    fn file_keys(conn: &Connection, concept: &str) -> Vec<String> {
        Sql::Lite(conn)
            .query(
                "SELECT file_key FROM finding_files WHERE concept_id = ?1 ORDER BY 1",
                args![concept],
                |r| r.get(0),
            )
            .unwrap()
    }

    #[test]
    fn a_version_3_file_gains_the_rank_index_and_search_reads_pages_off_it() {
        let (_dir, conn) = migrated_from(3, "");
        let plan = crate::test_support::query_plan(
            Sql::Lite(&conn),
            &format!(
                "SELECT c.seq, c.content FROM concepts c
                 WHERE c.org_id = ?1 AND c.shape = ?2
                 ORDER BY {} DESC, c.seq DESC LIMIT 300 OFFSET 900",
                crate::concepts::RELEVANCE_SQL
            ),
            args!["org", "verdict"],
        );
        assert_eq!(
            plan,
            ["SEARCH c USING INDEX concepts_by_rank (org_id=? AND shape=?)"]
        );
    }

    #[test]
    fn a_version_11_file_loses_the_org_index_and_a_search_of_every_shape_reads_the_rank_index() {
        let (_dir, conn) = migrated_from(11, &a_finding("concept_f", "s", "c"));
        let sql = Sql::Lite(&conn);
        let org_index: i64 = sql
            .value(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'concepts_by_org'",
                &[],
            )
            .unwrap();
        assert_eq!(org_index, 0);
        let plan = |query: &str| crate::test_support::query_plan(sql, query, args!["org_a"]);
        assert_eq!(
            plan("SELECT count(*) FROM concepts c WHERE c.org_id = ?1"),
            ["SEARCH c USING COVERING INDEX concepts_by_rank (org_id=?)"]
        );
        assert_eq!(
            plan(&format!(
                "SELECT c.seq, c.content FROM concepts c WHERE c.org_id = ?1
                 ORDER BY {} DESC, c.seq DESC LIMIT 20",
                crate::concepts::RELEVANCE_SQL
            )),
            [
                "SEARCH c USING INDEX concepts_by_rank (org_id=?)",
                "USE TEMP B-TREE FOR ORDER BY"
            ]
        );
    }

    #[test]
    fn a_version_7_file_files_its_open_tasks_under_their_repository_keys() {
        let (_dir, conn) = migrated_from(
            7,
            &format!(
                "{}
                 INSERT INTO open_tasks (org_id, concept_id, seq, task_id, severity, repo, files,
                                         holder, held_since, held_until, held_claim)
                   VALUES ('org_a', 'concept_t', 1, 'agf_0123456789abcdef', 'LOW',
                           ' Example.test/o/Super', '[\"repos/App/a.py\"]', 'cell', 0, 1000, 'c');",
                a_finding("concept_t", "s", "c")
            ),
        );
        let keys: Vec<(String, i64, i64, Option<i64>)> = Sql::Lite(&conn)
            .query(
                "SELECT repo_key, rank, seq, lapses FROM open_task_keys ORDER BY repo_key",
                &[],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        let lapses = Some(1000 + metabob_wire::claims::CLAIM_SKEW_MS);
        assert_eq!(
            keys,
            [
                ("r:example.test/o/super".to_string(), 3, 1, lapses),
                ("v:app".to_string(), 3, 1, lapses)
            ]
        );
    }

    #[test]
    fn a_version_5_file_gains_key_expiry_and_its_keys_never_expire() {
        let (_dir, conn) = migrated_from(
            5,
            "INSERT INTO orgs VALUES ('org_a', 'a', 0);
             INSERT INTO api_keys (id, org_id, key_hash, scopes, created_at)
               VALUES ('key_a', 'org_a', 'hash', 'read', 0);",
        );
        let expires: Option<i64> = Sql::Lite(&conn)
            .value("SELECT expires_at FROM api_keys WHERE id = 'key_a'", &[])
            .unwrap();
        assert_eq!(expires, None);
    }

    #[test]
    fn a_version_4_file_gains_the_id_and_file_indexes_and_the_task_summaries_from_its_rows() {
        let (_dir, conn) = migrated_from(
            4,
            &format!(
                "{}{}
                 INSERT INTO open_tasks (org_id, concept_id, seq, task_id, severity, repo, files)
                   VALUES ('org_a', 'concept_t', 1, 'agf_0123456789abcdef', 'HIGH',
                           'example.test/o/app', '[]');",
                a_finding("concept_t", "[HIGH][task] a.py: the step", A_TASK),
                a_finding("concept_b", "[LOW][bug] a.py: a bug", A_BUG),
            ),
        );
        let sql = Sql::Lite(&conn);
        assert_eq!(file_keys(&conn, "concept_b"), ["src/a.py"]);
        assert!(file_keys(&conn, "concept_t").is_empty());
        let summary: String = sql
            .value(
                "SELECT summary FROM open_tasks WHERE concept_id = 'concept_t'",
                &[],
            )
            .unwrap();
        assert_eq!(summary, "the step");
        let named: String = sql
            .value(
                "SELECT concept_id FROM row_ids WHERE finding_id = 'agf_0123456789abcdef'",
                &[],
            )
            .unwrap();
        assert_eq!(named, "concept_t");
    }

    #[test]
    fn a_version_9_file_keeps_only_findings_that_are_no_task_in_its_file_index() {
        let (_dir, conn) = migrated_from(
            9,
            &format!(
                "{}{}
                 INSERT INTO finding_files VALUES ('org_a', 'src/a.py', 1, 'concept_t'),
                   ('org_a', 'b.py', 1, 'concept_t'), ('org_a', 'src/a.py', 2, 'concept_b');",
                a_finding("concept_t", "[HIGH][task] a.py: the step", A_TASK),
                a_finding("concept_b", "[LOW][bug] a.py: a bug", A_BUG),
            ),
        );
        assert_eq!(file_keys(&conn, "concept_b"), ["src/a.py"]);
        assert!(file_keys(&conn, "concept_t").is_empty());
    }
}
