//! A minute of the chaos soak (SPEC.md §The chaos soak) on the run's store: SQLite, or two
//! PostgreSQL replicas killed one at a time. The ten-minute runs are `benches/fleet.rs soak`.

use std::path::PathBuf;
use std::time::Duration;

use crate::support::soak::{self, KINDS, Plan, Report};
use crate::support::{TestEnv, bin, on_postgres, pg};

#[test]
fn a_minute_of_chaos_breaks_no_invariant() {
    let env = TestEnv::new();
    let root = env.path("soak");
    std::fs::create_dir_all(&root).unwrap();
    let (store, replicas) = if on_postgres() {
        (vec!["--store".to_string(), pg::fresh_database()], 2)
    } else {
        let data = env.path("soak-ledger").display().to_string();
        (vec!["--data".to_string(), data], 1)
    };
    let plan = Plan {
        bin: bin().to_path_buf(),
        repo: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        root,
        vars: env.vars.clone(),
        store,
        replicas,
        cells: 4,
        tasks: 8,
        chaos_for: Duration::from_secs(60),
        settle_for: Duration::from_secs(180),
        seed: 23,
    };
    let report = soak::run(&plan).unwrap_or_else(|e| panic!("the soak could not run: {e}"));
    let store = if on_postgres() { "pg2" } else { "sqlite" };
    eprintln!(
        "{}\n{}",
        Report::TABLE_HEAD,
        report.table_row(store, plan.cells)
    );
    assert_eq!(report.violations(), Vec::<String>::new(), "{report:#?}");
    // Not a quiet minute: every kind of chaos happened, and the fleet did work through it.
    for kind in KINDS {
        assert!(
            report.events.get(kind).copied().unwrap_or(0) >= 1,
            "{kind}: {report:#?}"
        );
    }
    assert!(
        report.closed >= plan.tasks && report.acked > 0,
        "{report:#?}"
    );
    assert!(
        report.poison >= 1 && report.parked == report.poison,
        "{report:#?}"
    );
}
