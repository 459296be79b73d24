//! What the ledger's unit tests share: a SQLite store holding one org, `org_a`, written through
//! the one concept insert every write takes, and a task to record in it.

use serde_json::Value;

use crate::concepts::CreateConcept;
use crate::db::{Budget, Db, Location};
use crate::errors::ApiError;
use crate::input::Fields;
use crate::sql::{Arg, Sql};
use metabob_process::random::new_finding_id;
use metabob_wire::finding::{FindingStatus, NewFinding, Severity};

pub struct TestLedger {
    _dir: tempfile::TempDir,
    pub db: Db,
}

/// A fresh store in a temp dir, with org `org_a`.
pub fn ledger() -> TestLedger {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&Location::Sqlite(dir.path().to_path_buf()), 1).unwrap();
    db.with_writer(|w| {
        w.sql().execute(
            "INSERT INTO orgs (id, name, created_at) VALUES ('org_a', 'a', 0)",
            &[],
        )
    })
    .unwrap();
    TestLedger { _dir: dir, db }
}

impl TestLedger {
    /// One `concept_create_write` of `pointer` to `org_a`: the write's answer, or its refusal.
    pub fn write(&self, pointer: Value) -> Result<Value, ApiError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(self.db.write(Budget::start(60_000), move |w| {
            let fields = Fields::new(pointer.as_object().unwrap(), "");
            CreateConcept::parse(&fields, None)?.run(w, "org_a")
        }))
    }
}

/// SQLite's plan for `query` with `args` bound: one line per step, as `EXPLAIN QUERY PLAN`
/// words it. The tests that pin a plan read it here.
pub fn query_plan(sql: Sql<'_>, query: &str, args: &[Arg]) -> Vec<String> {
    sql.query(&format!("EXPLAIN QUERY PLAN {query}"), args, |r| {
        r.get::<String>(3)
    })
    .unwrap()
}

/// An open finding of `category` on `a.py` of one repository, with `details`.
pub fn finding(summary: &str, category: &str, details: &str) -> NewFinding {
    NewFinding {
        finding_ids: vec![new_finding_id()],
        files: vec!["a.py".into()],
        summary: summary.into(),
        details: details.into(),
        severity: Severity::High,
        category: category.into(),
        repo: "example.test/o/app".into(),
        repo_name: "app".into(),
        workspace: String::new(),
        lines: None,
        status: FindingStatus::Open,
        recorded_by: None,
        session: "s".into(),
    }
}
