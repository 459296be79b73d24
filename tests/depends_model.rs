//! The ready set, proven against a model (SPEC.md §Dependencies): proptest draws backlogs of up
//! to 30 tasks with random edges (cycles tried on purpose) and runs sequences of record, block,
//! unblock, concurrent takes by up to 8 cells, close, park, reopen, release and cancel against
//! a real `ledger serve` (on PostgreSQL: two replicas, each write and take sent to either). After
//! every step it checks the ledger against a small model of readiness:
//!
//! - every task handed out was ready in the model at that moment, or was the taker's own;
//! - no task is held by two cells;
//! - every edge the model refuses is refused (400), every other one is stored;
//! - what the ledger says is ready now (`taskReady`) is exactly the model's ready set, so a task
//!   becomes takeable exactly when the model says; and on SQLite, whose one writer never
//!   answers `busy`, a round of takes hands out as many ready tasks as there were cells asking.

use std::collections::BTreeSet;

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::{Ledger, TestEnv, on_postgres};
use metabob_process::random::new_finding_id;
use metabob_wire::depends::{RECORDED_LINE, edge_row};
use metabob_wire::finding::{Finding, FindingStatus, NewFinding, Severity};
use metabob_wire::verdict::{NewVerdict, VerdictKind, VerdictOrigin};

const REPO: &str = "example.test/o/app";
const MAX_TASKS: usize = 30;
const CELLS: usize = 8;

/// One step. Task and blocker numbers are taken modulo the tasks recorded so far.
#[derive(Clone, Debug)]
enum Op {
    Record {
        blockers: Vec<usize>,
    },
    Block {
        task: usize,
        by: usize,
    },
    /// Blocks one of `task`'s blockers by `task`: a cycle, tried on purpose.
    BlockBack {
        task: usize,
    },
    Unblock {
        task: usize,
        from: usize,
    },
    /// The cells (bits of the mask) take at once.
    Pull {
        cells: u8,
    },
    Close {
        task: usize,
    },
    Park {
        task: usize,
    },
    Reopen {
        task: usize,
    },
    Release {
        task: usize,
    },
    Cancel {
        task: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let t = 0..64usize;
    prop_oneof![
        4 => prop::collection::vec(0..64usize, 0..3).prop_map(|blockers| Op::Record { blockers }),
        3 => (t.clone(), t.clone()).prop_map(|(task, by)| Op::Block { task, by }),
        2 => t.clone().prop_map(|task| Op::BlockBack { task }),
        1 => (t.clone(), t.clone()).prop_map(|(task, from)| Op::Unblock { task, from }),
        4 => (1..=255u8).prop_map(|cells| Op::Pull { cells }),
        3 => t.clone().prop_map(|task| Op::Close { task }),
        1 => t.clone().prop_map(|task| Op::Park { task }),
        1 => t.clone().prop_map(|task| Op::Reopen { task }),
        1 => t.clone().prop_map(|task| Op::Release { task }),
        1 => t.prop_map(|task| Op::Cancel { task }),
    ]
}

/// What the model knows of one task.
struct Task {
    finding: Finding,
    fixed: bool,
    cancelled: bool,
    parked: bool,
    holder: Option<usize>,
    blockers: BTreeSet<usize>,
}

impl Task {
    /// The verdict precedence, as far as these rows go: a cancellation outranks a fix, a fix a
    /// park.
    fn open(&self) -> bool {
        !self.cancelled && !self.fixed && !self.parked
    }
}

struct Model {
    tasks: Vec<Task>,
}

impl Model {
    fn pick(&self, i: usize) -> Option<usize> {
        (!self.tasks.is_empty()).then(|| i % self.tasks.len())
    }

    /// The ready rule: open, nobody holds it, and every blocker fixed (not cancelled).
    fn ready(&self) -> BTreeSet<usize> {
        (0..self.tasks.len())
            .filter(|&i| {
                let t = &self.tasks[i];
                t.open()
                    && t.holder.is_none()
                    && t.blockers
                        .iter()
                        .all(|&b| self.tasks[b].fixed && !self.tasks[b].cancelled)
            })
            .collect()
    }

    /// Whether `from` waits for `to`, however indirectly.
    fn reaches(&self, from: usize, to: usize) -> bool {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(at) = stack.pop() {
            if at == to {
                return true;
            }
            if seen.insert(at) {
                stack.extend(self.tasks[at].blockers.iter().copied());
            }
        }
        false
    }

    /// The tasks `cell` holds that are still open work: a take renews one of them before it
    /// hands out anything else.
    fn held_by(&self, cell: usize) -> BTreeSet<usize> {
        (0..self.tasks.len())
            .filter(|&i| self.tasks[i].holder == Some(cell) && self.tasks[i].open())
            .collect()
    }

    fn by_concept(&self, concept: &str) -> Option<usize> {
        self.tasks
            .iter()
            .position(|t| t.finding.concept_id == concept)
    }
}

struct World {
    _env: TestEnv,
    /// One ledger, or two replicas of one database.
    ledgers: Vec<Ledger>,
    key: String,
    turn: std::cell::Cell<usize>,
}

impl World {
    fn start() -> World {
        let env = TestEnv::new();
        let first = env.ledger("model", &[]);
        let (_, key) = first.create_key(&env, "default", "read,write");
        let mut ledgers = vec![first];
        if on_postgres() {
            let second = ledgers[0].replica(&env);
            ledgers.push(second);
        }
        World {
            _env: env,
            ledgers,
            key,
            turn: std::cell::Cell::new(0),
        }
    }

    /// The next ledger in turn: on PostgreSQL the writes alternate between the replicas.
    fn next(&self) -> &Ledger {
        let i = self.turn.get();
        self.turn.set(i + 1);
        &self.ledgers[i % self.ledgers.len()]
    }

    fn write(&self, pointer: Value) -> (u16, Value) {
        self.next().resolve(&self.key, pointer)
    }

    fn verdict(&self, t: &Finding, kind: VerdictKind, by: &str) -> (u16, Value) {
        let nv = NewVerdict {
            finding: t,
            kind,
            reviewed_by: Some(by.to_string()),
            session: "model".into(),
            origin: VerdictOrigin::Remote,
            lines: vec![("reason", "the model".into())],
        };
        self.write(nv.to_pointer())
    }

    fn ready(&self) -> Result<BTreeSet<String>, String> {
        let (status, v) = self.next().resolve(&self.key, json!({"type": "taskReady"}));
        if status != 200 {
            return Err(format!("taskReady answered {status}: {v}"));
        }
        Ok(v["ready"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["concept_id"].as_str().map(str::to_owned))
            .collect())
    }
}

fn new_task(blockers: &[&Finding]) -> Value {
    let details: Vec<String> = blockers
        .iter()
        .map(|b| format!("{RECORDED_LINE}: {}", b.id()))
        .collect();
    NewFinding {
        finding_ids: vec![new_finding_id()],
        files: vec!["a.py".into()],
        summary: "a step".into(),
        details: details.join("\n"),
        severity: Severity::High,
        category: "task".into(),
        repo: REPO.into(),
        repo_name: "app".into(),
        workspace: String::new(),
        lines: None,
        status: FindingStatus::Open,
        recorded_by: Some("model".into()),
        session: "model".into(),
    }
    .to_pointer()
}

/// A write the ledger took.
fn ok(status: u16) -> bool {
    (200..300).contains(&status)
}

/// Runs `ops` on a fresh ledger, checking each step against the model.
fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let w = World::start();
    let mut m = Model { tasks: Vec::new() };
    for (step, op) in ops.iter().enumerate() {
        let at = |what: String| format!("step {step} {op:?}: {what}");
        match op {
            Op::Record { blockers } => {
                if m.tasks.len() == MAX_TASKS {
                    continue;
                }
                let bs: BTreeSet<usize> = blockers.iter().filter_map(|&b| m.pick(b)).collect();
                let named: Vec<&Finding> = bs.iter().map(|&b| &m.tasks[b].finding).collect();
                let (status, v) = w.write(new_task(&named));
                prop_assert!(ok(status), "{}", at(format!("{status}: {v}")));
                let finding = Finding::read(&v["concept"])
                    .ok()
                    .flatten()
                    .ok_or_else(|| TestCaseError::fail(at(format!("no task in {v}"))))?;
                m.tasks.push(Task {
                    finding,
                    fixed: false,
                    cancelled: false,
                    parked: false,
                    holder: None,
                    blockers: bs,
                });
            }
            Op::Block { task, by } | Op::Unblock { task, from: by } => {
                let (Some(t), Some(b)) = (m.pick(*task), m.pick(*by)) else {
                    continue;
                };
                let block = matches!(op, Op::Block { .. });
                edge(&w, &mut m, t, b, block).map_err(|e| TestCaseError::fail(at(e)))?;
            }
            Op::BlockBack { task } => {
                let Some(t) = m.pick(*task) else { continue };
                let Some(&b) = m.tasks[t].blockers.iter().next() else {
                    continue;
                };
                edge(&w, &mut m, b, t, true).map_err(|e| TestCaseError::fail(at(e)))?;
            }
            Op::Pull { cells } => {
                pull(&w, &mut m, *cells).map_err(|e| TestCaseError::fail(at(e)))?;
            }
            Op::Close { task } | Op::Park { task } | Op::Reopen { task } | Op::Cancel { task } => {
                let Some(t) = m.pick(*task) else { continue };
                let kind = match op {
                    Op::Close { .. } => VerdictKind::Fixed,
                    Op::Park { .. } => VerdictKind::Parked,
                    Op::Reopen { .. } => VerdictKind::Reopened,
                    _ => VerdictKind::Cancelled,
                };
                let (status, v) = w.verdict(&m.tasks[t].finding, kind, "ops");
                prop_assert!(ok(status), "{}", at(format!("{status}: {v}")));
                let task = &mut m.tasks[t];
                match kind {
                    VerdictKind::Fixed => task.fixed = true,
                    VerdictKind::Parked => task.parked = true,
                    VerdictKind::Reopened => task.parked = false,
                    _ => task.cancelled = true,
                }
            }
            Op::Release { task } => {
                let Some(t) = m.pick(*task) else { continue };
                let Some(cell) = m.tasks[t].holder else {
                    continue;
                };
                let (status, v) = w.verdict(
                    &m.tasks[t].finding,
                    VerdictKind::Withdrawn,
                    &format!("cell-{cell}"),
                );
                prop_assert!(ok(status), "{}", at(format!("{status}: {v}")));
                m.tasks[t].holder = None;
            }
        }
        let want: BTreeSet<String> = m
            .ready()
            .into_iter()
            .map(|i| m.tasks[i].finding.concept_id.clone())
            .collect();
        let got = w.ready().map_err(|e| TestCaseError::fail(at(e)))?;
        prop_assert_eq!(
            got,
            want,
            "{}",
            at("the ledger's ready set is the model's".into())
        );
    }
    Ok(())
}

/// A `blocked` (or `unblocked`) row for `t` by `b`: refused exactly when the model refuses it.
fn edge(w: &World, m: &mut Model, t: usize, b: usize, block: bool) -> Result<(), String> {
    let refused = if block {
        t == b || m.reaches(b, t)
    } else {
        !m.tasks[t].blockers.contains(&b)
    };
    let kind = if block {
        VerdictKind::Blocked
    } else {
        VerdictKind::Unblocked
    };
    let row = edge_row(
        &m.tasks[t].finding,
        kind,
        m.tasks[b].finding.id(),
        Some("ops".into()),
        "model",
    );
    let (status, v) = w.write(row.to_pointer());
    if ok(status) == refused || (refused && status != 400) {
        let want = if refused { "400" } else { "a write taken" };
        return Err(format!("answered {status}, the model says {want}: {v}"));
    }
    if refused {
        let says = v.to_string();
        let why = if !block {
            "does not wait for"
        } else if t == b {
            "cannot wait for itself"
        } else {
            "closes a cycle"
        };
        if !says.contains(why) {
            return Err(format!("refused, but not for {why:?}: {says}"));
        }
        return Ok(());
    }
    if block {
        m.tasks[t].blockers.insert(b);
    } else {
        m.tasks[t].blockers.remove(&b);
    }
    Ok(())
}

/// The cells of `mask` take at once, each from the ledger in turn.
fn pull(w: &World, m: &mut Model, mask: u8) -> Result<(), String> {
    let cells: Vec<usize> = (0..CELLS).filter(|c| mask & (1 << c) != 0).collect();
    let ready = m.ready();
    let ledgers: Vec<&Ledger> = cells.iter().map(|_| w.next()).collect();
    let answers: Vec<(usize, u16, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = cells
            .iter()
            .zip(&ledgers)
            .map(|(&cell, ledger)| {
                let key = &w.key;
                s.spawn(move || {
                    let (status, v) = ledger.resolve(
                        key,
                        json!({"type": "taskTake_write", "take": {
                            "repository": REPO, "vessel_id": format!("cell-{cell}"),
                            "session": "model", "claim_minutes": 60}}),
                    );
                    (cell, status, v)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a take's thread"))
            .collect()
    });
    let mut handed: BTreeSet<usize> = BTreeSet::new();
    let mut fresh = 0;
    let mut empty_handed = 0;
    for (cell, status, v) in answers {
        if status != 200 {
            return Err(format!("cell-{cell}'s take answered {status}: {v}"));
        }
        let Some(concept) = v["taken"]["concept_id"].as_str() else {
            if m.held_by(cell).is_empty() {
                empty_handed += 1;
            }
            continue;
        };
        let t = m
            .by_concept(concept)
            .ok_or_else(|| format!("cell-{cell} was handed {concept}, no task of the model"))?;
        if !handed.insert(t) {
            return Err(format!("task {t} was handed to two cells at once"));
        }
        let own = m.held_by(cell);
        if own.contains(&t) {
            continue;
        }
        if !own.is_empty() {
            return Err(format!(
                "cell-{cell} holds {own:?}, and was handed {t} instead of renewing one"
            ));
        }
        if !ready.contains(&t) {
            let holder = m.tasks[t].holder;
            return Err(format!(
                "cell-{cell} was handed task {t}, which the model says is not ready \
                 (holder {holder:?}, blockers {:?})",
                m.tasks[t].blockers
            ));
        }
        fresh += 1;
        m.tasks[t].holder = Some(cell);
    }
    // One writer decides every take on SQLite, with no `busy`: a cell goes without only once
    // the ready tasks are all handed out.
    if !on_postgres() && empty_handed > 0 && fresh < ready.len() {
        return Err(format!(
            "{empty_handed} cell(s) got nothing though {} ready task(s) were left",
            ready.len() - fresh
        ));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if on_postgres() { 6 } else { 16 },
        max_shrink_iters: 64,
        // Each case runs a ledger: a failure is shown with its shrunk steps, not kept in a file.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_ready_set_is_the_models_under_concurrent_takes(
        ops in prop::collection::vec(op(), 1..70)
    ) {
        run(&ops)?;
    }
}

/// Two writes at once, each adding half of a cycle (on PostgreSQL through two replicas), never
/// both stand: the edge check and the store run under the org's edge lock in one write.
#[test]
fn two_writes_at_once_never_close_a_cycle_together() {
    let w = World::start();
    let record = || {
        let (status, v) = w.write(new_task(&[]));
        assert!(ok(status), "{status}: {v}");
        Finding::read(&v["concept"]).unwrap().unwrap()
    };
    for round in 0..24 {
        // A ring of two to four tasks, each edge of it written at the same moment: in a ring of
        // four, two edges share no task, so only the edge lock orders them.
        let ring: Vec<Finding> = (0..2 + round % 3).map(|_| record()).collect();
        let ledgers: Vec<&Ledger> = ring.iter().map(|_| w.next()).collect();
        let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..ring.len())
                .map(|i| {
                    let (task, blocker) = (&ring[i], &ring[(i + 1) % ring.len()]);
                    let row = edge_row(task, VerdictKind::Blocked, blocker.id(), None, "race");
                    let (ledger, key) = (ledgers[i], &w.key);
                    s.spawn(move || ledger.resolve(key, row.to_pointer()))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let statuses: Vec<u16> = answers.iter().map(|(s, _)| *s).collect();
        let stood = statuses.iter().filter(|s| ok(**s)).count();
        assert_eq!(
            stood,
            ring.len() - 1,
            "round {round}: a ring closed: {statuses:?}"
        );
        let (_, refused) = answers.iter().find(|(s, _)| !ok(*s)).unwrap();
        assert!(refused.to_string().contains("closes a cycle"), "{refused}");
    }
}

/// Two blockers of one task fixed at the same moment (on PostgreSQL through two replicas): the
/// task is ready once both are, whichever commits last. Each fix counts its own edge down on
/// the dependent's row, so neither overwrites the other's.
#[test]
fn blockers_fixed_at_once_let_their_dependent_go() {
    let w = World::start();
    let record = |blockers: &[&Finding]| {
        let (status, v) = w.write(new_task(blockers));
        assert!(ok(status), "{status}: {v}");
        Finding::read(&v["concept"]).unwrap().unwrap()
    };
    let mut dependents = Vec::new();
    for _ in 0..16 {
        let (x1, x2) = (record(&[]), record(&[]));
        let y = record(&[&x1, &x2]);
        let ledgers = [w.next(), w.next()];
        std::thread::scope(|s| {
            for (x, ledger) in [&x1, &x2].into_iter().zip(ledgers) {
                let key = &w.key;
                s.spawn(move || {
                    let fix = NewVerdict {
                        finding: x,
                        kind: VerdictKind::Fixed,
                        reviewed_by: Some("ops".into()),
                        session: "race".into(),
                        origin: VerdictOrigin::Remote,
                        lines: Vec::new(),
                    };
                    let (status, v) = ledger.resolve(key, fix.to_pointer());
                    assert!(ok(status), "{status}: {v}");
                });
            }
        });
        dependents.push(y.concept_id);
    }
    let ready = w.ready().unwrap();
    let stuck: Vec<&String> = dependents.iter().filter(|d| !ready.contains(*d)).collect();
    assert!(
        stuck.is_empty(),
        "still blocked though both blockers are fixed: {stuck:?}"
    );
}
