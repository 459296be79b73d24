//! The claim race: many cells pulling at once take each task exactly once, on both claim
//! paths, on one ledger or over two PostgreSQL replicas.

use std::path::PathBuf;

use crate::support::{Output, TestEnv};

use super::{World, json_out};

/// A race on one claim path: `pullers` cells start together over `tasks` open tasks, and each
/// pulls again into fresh directories (a new cell identity) until nothing is free for it. Every
/// task must be pulled exactly once, whoever loses a race; returns the claims lost on the way.
/// `take: false` runs the ledger as a substrate without the atomic take (`--no-take`), so the
/// pulls claim by read-back. With more than one replica the ledger is that many `ledger serve`
/// processes over one PostgreSQL database, and the pullers take turns between them.
fn race(take: bool, pullers: usize, tasks: usize, round: usize, replicas: usize) -> usize {
    let env = TestEnv::new();
    let args: &[&str] = if take { &[] } else { &["--no-take"] };
    let _ledger = if replicas > 1 {
        env.ledger_on("main", &crate::support::pg::fresh_database(), args)
    } else {
        env.ledger("main", args)
    };
    let others: Vec<_> = (1..replicas).map(|_| _ledger.replica(&env)).collect();
    let endpoints: Vec<String> = std::iter::once(_ledger.url.clone())
        .chain(others.iter().map(|l| l.url.clone()))
        .collect();
    let (_, url) = env.origin("app", &[("a.py", "def a():\n    return 1\n")]);
    let w = World {
        env,
        ledger: _ledger,
        bare: PathBuf::new(),
        url,
    };
    let mut ids: Vec<String> = (0..tasks)
        .map(|i| w.record_task("a.py", &format!("repair stage {i}"), ""))
        .collect();
    let path = if take { "take" } else { "read_back" };
    let outcomes: Vec<(Vec<String>, usize)> = std::thread::scope(|scope| {
        let cells: Vec<_> = (0..pullers)
            .map(|i| {
                let w = &w;
                let endpoint = &endpoints[i % endpoints.len()];
                scope.spawn(move || {
                    let (mut pulled, mut lost) = (Vec::new(), 0);
                    for k in 0.. {
                        let (task, work) = w.dirs(&format!("cell{i}-{k}"));
                        let out = Output::from(
                            w.env
                                .cmd(&[
                                    "task",
                                    "pull",
                                    "--origin",
                                    &w.url,
                                    "--task-dir",
                                    &task.display().to_string(),
                                    "--work-dir",
                                    &work.display().to_string(),
                                    "--json",
                                ])
                                .env("DISCOVERY_ENDPOINT", endpoint)
                                .output()
                                .unwrap(),
                        );
                        let report = match out.code {
                            0 | 3 | 4 => json_out(&out),
                            _ => panic!("{path} round {round}: unexpected exit {out:?}"),
                        };
                        assert_eq!(report["claim_path"], path, "{report}");
                        lost += report["candidates"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .filter(|c| c["outcome"] == "lost")
                            .count();
                        if out.code != 0 {
                            break;
                        }
                        pulled.push(report["task"]["task_id"].as_str().unwrap().to_string());
                    }
                    (pulled, lost)
                })
            })
            .collect();
        cells.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let mut pulled: Vec<String> = outcomes.iter().flat_map(|(p, _)| p.clone()).collect();
    pulled.sort();
    ids.sort();
    assert_eq!(
        pulled, ids,
        "{path} round {round}: each task pulled exactly once"
    );
    outcomes.iter().map(|(_, lost)| lost).sum()
}

#[test]
fn sixteen_pulls_over_five_tasks_take_each_exactly_once_on_both_claim_paths() {
    for round in 0..20 {
        assert_eq!(race(true, 16, 5, round, 1), 0, "a take never loses a claim");
        race(false, 16, 5, round, 1);
    }
}

/// Two `ledger serve` replicas over one PostgreSQL: the cells alternate between them, and still
/// no task is held by two (SPEC.md §Claim order on each store).
#[test]
fn sixteen_pulls_on_two_postgres_replicas_take_each_task_exactly_once_on_both_claim_paths() {
    for round in 0..20 {
        assert_eq!(race(true, 16, 5, round, 2), 0, "a take never loses a claim");
        race(false, 16, 5, round, 2);
    }
}

#[test]
fn thirty_two_cells_over_fifty_tasks_take_each_exactly_once_on_both_claim_paths() {
    assert_eq!(race(true, 32, 50, 0, 1), 0, "a take never loses a claim");
    race(false, 32, 50, 0, 1);
}
