//! `history`: what one `task pull` costs as the ledger's history grows. Each size gets a fresh
//! ledger holding that many findings of the pulled repository (spread over 500 files, the tasks'
//! files among them), then the same `--tasks` pulls one after another, each a new cell with
//! fresh directories, each claiming, cloning and writing its task files.

use std::time::{Duration, Instant};

use metabob_net::attachment::Attachment;
use metabob_process::env::Env;
use metabob_process::random::new_finding_id;
use metabob_wire::finding::{FindingStatus, NewFinding, Severity};
use metabob_wire::repo_identity::identity_of_origin;

use super::race::make_origin;
use super::{
    Bench, ClaimPath, Errors, Home, Ledgers, Opts, PULL_LIMIT, Res, Store, ms, output, quantile_ms,
};

/// Files the history and the tasks are spread over.
const FILES: usize = 500;
/// Writes in flight while the history is filled.
const FILLING: usize = 32;

struct Row {
    store: Store,
    path: ClaimPath,
    findings: usize,
    walls: Vec<Duration>,
    errors: Errors,
}

pub async fn history(bench: &Bench, opts: &Opts, deadline: Instant) -> Res<()> {
    let origin = make_origin(bench).await?;
    let mut rows: Vec<Row> = Vec::new();
    let mut notes = Vec::new();
    for &store in &opts.stores {
        for &path in &opts.paths {
            for &n in &opts.findings {
                let label = format!("{} {} at {n} findings", store.name(), path.as_str());
                if Instant::now() >= deadline {
                    notes.push(format!("- {label}: not run, the deadline passed"));
                    continue;
                }
                eprintln!("fleet: history, {label}, {} pulls", opts.tasks);
                let row = run_once(bench, &origin, store, path, n, opts.tasks, deadline).await?;
                notes.extend(row.errors.notes(&label));
                rows.push(row);
            }
        }
    }
    println!(
        "Pull time against the ledger's history: a fresh ledger holding N findings of the \
         repository, then {} `task pull` processes one after another (claim, related findings, \
         clone, task files), each a new cell:",
        opts.tasks
    );
    println!();
    println!(
        "| store | path | findings | pulls | pull p50 ms | pull p90 ms | p50 / p50 at the fewest |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        let p50 = quantile_ms(&r.walls, 0.5);
        let base = rows
            .iter()
            .filter(|b| b.store == r.store && b.path == r.path)
            .min_by_key(|b| b.findings)
            .and_then(|b| quantile_ms(&b.walls, 0.5));
        let ratio = match (p50, base) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => "-".into(),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {ratio} |",
            r.store.name(),
            r.path.as_str(),
            r.findings,
            r.walls.len(),
            ms(p50),
            ms(quantile_ms(&r.walls, 0.9)),
        );
    }
    if !notes.is_empty() {
        println!();
        for n in notes {
            println!("{n}");
        }
    }
    Ok(())
}

async fn run_once(
    bench: &Bench,
    origin: &str,
    store: Store,
    path: ClaimPath,
    findings: usize,
    pulls: usize,
    deadline: Instant,
) -> Res<Row> {
    let h = bench.fresh(&format!(
        "history-{}-{}-{findings}",
        store.name(),
        path.as_str()
    ))?;
    let extra: &[&str] = match path {
        ClaimPath::Take => &[],
        ClaimPath::ReadBack => &["--no-take"],
    };
    let ledgers = Ledgers::start(bench, &h, store, extra).await?;
    let mut env = Env::new(h.vars.iter().cloned(), &h.cwd);
    let att = metabob_cell::attach_once(&mut env, &h.cwd)
        .await
        .map_err(|e| format!("attach: {e}"))?;
    let repository = identity_of_origin(origin);
    // The history first, then the tasks: the tasks are the newest rows, as a fresh task is.
    fill(&att, &repository, findings, "style", Severity::Low).await?;
    fill(&att, &repository, pulls, "task", Severity::High).await?;
    let mut row = Row {
        store,
        path,
        findings,
        walls: Vec::new(),
        errors: Errors::default(),
    };
    for k in 0..pulls {
        if Instant::now() >= deadline {
            row.errors.add("the deadline stopped the pulls".into());
            break;
        }
        pull(&h, origin, k, &mut row).await;
    }
    drop(ledgers);
    row.walls.sort_unstable();
    Ok(row)
}

/// One `task pull` as a new cell; its wall time when it pulled.
async fn pull(h: &Home, origin: &str, k: usize, row: &mut Row) {
    let cell = h.dir.join("cells").join(k.to_string());
    let (task_dir, work_dir) = (
        cell.join("task").display().to_string(),
        cell.join("work").display().to_string(),
    );
    let cmd = h.bin_cmd(&[
        "task",
        "pull",
        "--origin",
        origin,
        "--task-dir",
        &task_dir,
        "--work-dir",
        &work_dir,
        "--json",
    ]);
    let began = Instant::now();
    match output(cmd, PULL_LIMIT, "task pull").await {
        Ok(out) if out.status.code() == Some(0) => row.walls.push(began.elapsed()),
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let last = stderr.lines().last().unwrap_or("").trim().to_string();
            row.errors
                .add(format!("task pull exited {:?}: {last}", out.status.code()));
        }
        Err(e) => row.errors.add(e),
    }
}

/// Records `n` findings of `repository` in `category`, `FILLING` at a time.
async fn fill(
    att: &Attachment,
    repository: &str,
    n: usize,
    category: &str,
    severity: Severity,
) -> Res<()> {
    let mut writes = tokio::task::JoinSet::new();
    for i in 0..n {
        if writes.len() >= FILLING
            && let Some(done) = writes.join_next().await
        {
            done.map_err(|e| format!("fill: {e}"))??;
        }
        let file = format!("src/m{}.py", i % FILES);
        let f = NewFinding {
            finding_ids: vec![new_finding_id()],
            files: vec![file.clone()],
            summary: format!("[{severity}][{category}] {file}: item {i}"),
            details: String::new(),
            severity,
            category: category.into(),
            repo: repository.to_string(),
            repo_name: "app".into(),
            workspace: String::new(),
            lines: None,
            status: FindingStatus::Open,
            recorded_by: Some("fleet-bench".into()),
            session: "fleet-bench".into(),
        };
        let att = att.clone();
        writes.spawn(async move {
            metabob_cell::ledger::write_concept(&att, f.to_pointer())
                .await
                .map(drop)
                .map_err(|e| format!("fill: {e}"))
        });
    }
    while let Some(done) = writes.join_next().await {
        done.map_err(|e| format!("fill: {e}"))??;
    }
    Ok(())
}
