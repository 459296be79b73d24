//! `edges`: what dependencies cost the take. For each `--dag` (edges per task), a fresh ledger
//! holds `--tasks` open tasks of one repository whose edges form a random DAG (the fleet
//! simulation's, `sim::random_dag`), then `TAKES` takes by repository run one after another,
//! each by a new claimer, each claim given back at once (not timed), so every take weighs the
//! same backlog. The runs of one store are back to back, so with and without edges are compared
//! within one run.

use std::time::{Duration, Instant};

use metabob_cell::ledger::verdict::{self};
use metabob_process::env::Env;
use metabob_wire::finding::Finding;
use metabob_wire::repo_identity::identity_of_origin;
use metabob_wire::verdict::{NewVerdict, VerdictKind, VerdictOrigin};
use serde_json::json;

use super::{Bench, Ledgers, Opts, Res, ms, quantile_ms, sim};

/// Takes timed per run.
const TAKES: usize = 200;

struct Row {
    store: String,
    tasks: usize,
    edges: usize,
    record: Duration,
    takes: Vec<Duration>,
    ready_first: usize,
}

pub async fn edges(bench: &Bench, opts: &Opts, deadline: Instant) -> Res<()> {
    let mut rows: Vec<Row> = Vec::new();
    for &store in &opts.stores {
        for &per_task in &opts.dag {
            if Instant::now() >= deadline {
                eprintln!("fleet: edges, {}: the deadline passed", store.name());
                continue;
            }
            let edges = opts.tasks * per_task;
            eprintln!(
                "fleet: edges, {} store, {} tasks, {edges} edges",
                store.name(),
                opts.tasks
            );
            let h = bench.fresh(&format!("edges-{}-{edges}", store.name()))?;
            let ledgers = Ledgers::start(bench, &h, store, &[]).await?;
            let mut env = Env::new(h.vars.iter().cloned(), &h.cwd);
            let att = metabob_cell::attach_once(&mut env, &h.cwd)
                .await
                .map_err(|e| format!("attach: {e}"))?;
            let repository = identity_of_origin("https://fleet.example.invalid/sim/app.git");
            let dag = sim::random_dag(opts.tasks, edges);
            let began = Instant::now();
            sim::record(std::slice::from_ref(&att), &repository, opts.tasks, &dag).await?;
            let record = began.elapsed();
            let ready = att
                .resolve(json!({"type": "taskReady"}))
                .await
                .and_then(|r| r.ok("taskReady"))
                .map_err(|e| format!("taskReady: {e}"))?;
            let ready_first = ready["ready"].as_array().map_or(0, Vec::len);
            let mut takes = Vec::with_capacity(TAKES);
            for k in 0..TAKES {
                let me = format!("edges-bench-{k:04}");
                let asked = Instant::now();
                let answer = att
                    .resolve(json!({"type": "taskTake_write", "take": {
                        "repository": repository, "vessel_id": me, "session": "edges-bench",
                        "claim_minutes": 60}}))
                    .await
                    .and_then(|r| r.ok("taskTake_write"))
                    .map_err(|e| format!("take: {e}"))?;
                takes.push(asked.elapsed());
                let task = Finding::read(&answer["taken"]["task"])
                    .ok()
                    .flatten()
                    .ok_or_else(|| format!("take {k} handed out nothing: {answer}"))?;
                // Given back, so the next take weighs the same backlog.
                let back = NewVerdict {
                    finding: &task,
                    kind: VerdictKind::Withdrawn,
                    reviewed_by: Some(me),
                    session: "edges-bench".into(),
                    origin: VerdictOrigin::Remote,
                    lines: vec![("reason", "the bench gives it back".into())],
                };
                verdict::write(&att, &back, "edges-bench")
                    .await
                    .map_err(|e| format!("release: {e}"))?;
            }
            drop(ledgers);
            takes.sort();
            rows.push(Row {
                store: store.name(),
                tasks: opts.tasks,
                edges,
                record,
                takes,
                ready_first,
            });
        }
    }
    println!(
        "A take by repository against a backlog of open tasks with and without dependencies: \
         {TAKES} takes one after another, each by a new claimer, each claim given back:"
    );
    println!();
    println!(
        "| store | open tasks | edges | ready | record s | take p50 ms | take p90 ms | p50 / p50 without edges |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let p50 = quantile_ms(&r.takes, 0.5);
        let base = rows
            .iter()
            .find(|b| b.store == r.store && b.edges == 0)
            .and_then(|b| quantile_ms(&b.takes, 0.5));
        let ratio = match (p50, base) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => "-".into(),
        };
        println!(
            "| {} | {} | {} | {} | {:.1} | {} | {} | {ratio} |",
            r.store,
            r.tasks,
            r.edges,
            r.ready_first,
            r.record.as_secs_f64(),
            ms(p50),
            ms(quantile_ms(&r.takes, 0.9)),
        );
    }
    Ok(())
}
