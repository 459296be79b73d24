//! `race`: the task-claim race between many `task pull` processes over one ledger, on each
//! claim path.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{
    Bench, ClaimPath, Errors, Home, Ledger, Opts, PULL_LIMIT, Res, ms, output, quantile_ms, step,
    write,
};

pub async fn race(bench: &Bench, opts: &Opts, deadline: Instant) -> Res<()> {
    let origin = make_origin(bench).await?;
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for &path in &opts.paths {
        for &n in &opts.pullers {
            if Instant::now() >= deadline {
                notes.push(format!(
                    "- {} with {n} pullers: not run, the deadline passed",
                    path.as_str()
                ));
                continue;
            }
            eprintln!(
                "fleet: race, {} path, {n} pullers, {} tasks",
                path.as_str(),
                opts.tasks
            );
            let r = race_once(bench, &origin, path, n, opts.tasks, deadline).await?;
            if r.cut_short {
                notes.push(format!(
                    "- {} with {n} pullers: the deadline stopped the pullers early",
                    path.as_str()
                ));
            }
            notes.extend(
                r.errors
                    .notes(&format!("{} with {n} pullers", path.as_str())),
            );
            rows.push(r);
        }
    }

    println!(
        "The claim race: {} tasks recorded on a fresh ledger, then N `task pull` processes \
         started together, each pulling again (fresh task and work dirs, a new cell each time) \
         until it exits 3 (nothing open) or 4 (try later):",
        opts.tasks
    );
    println!();
    println!(
        "| path | pullers | tasks pulled | pulled twice | errors | lost claims | exit 4 | time to \
         last pull s | settle rate tasks/s | pull p50 ms | pull p99 ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.path.as_str(),
            r.pullers,
            r.pulled,
            r.twice,
            r.errors.total(),
            r.lost,
            r.exit4,
            r.last
                .map_or("-".into(), |d| format!("{:.2}", d.as_secs_f64())),
            r.settle_rate().map_or("-".into(), |v| format!("{v:.2}")),
            ms(r.p50),
            ms(r.p99)
        );
    }
    println!();
    println!(
        "Pull wall times are of the `task pull` processes that exited 0 (claim, clone, task \
         files); every process is counted in the other columns."
    );
    // The fleet's scaling per path: the most pullers against the fewest, in the same run.
    let lo = opts.pullers.iter().copied().min().unwrap_or(0);
    let hi = opts.pullers.iter().copied().max().unwrap_or(0);
    if lo != hi {
        println!();
        println!("| path | settle rate, {hi} pullers / {lo} puller(s) |");
        println!("|---|---|");
        for &path in &opts.paths {
            let rate = |n: usize| {
                rows.iter()
                    .find(|r| r.path == path && r.pullers == n)
                    .and_then(RaceRun::settle_rate)
            };
            let ratio = match (rate(hi), rate(lo)) {
                (Some(h), Some(l)) if l > 0.0 => format!("{:.2}", h / l),
                _ => "-".into(),
            };
            println!("| {} | {ratio} |", path.as_str());
        }
    }
    if !notes.is_empty() {
        println!();
        println!("Errors and skipped runs:");
        println!();
        for n in notes {
            println!("{n}");
        }
    }
    Ok(())
}

/// A bare repository with one commit holding a.py, as a file:// URL (the tests' `origin()`).
/// Pulls only read it, and every run has its own ledger, so all runs share it.
pub(super) async fn make_origin(bench: &Bench) -> Res<String> {
    let h = bench.fresh("origin")?;
    let seed = h.dir.join("seed");
    std::fs::create_dir_all(&seed).map_err(|e| format!("{}: {e}", seed.display()))?;
    write(&seed.join("a.py"), "def a():\n    return 1\n")?;
    let bare = h.dir.join("app.git");
    let (seed_s, bare_s) = (seed.display().to_string(), bare.display().to_string());
    for args in [
        vec!["-C", &seed_s, "init", "-q", "-b", "main"],
        vec!["-C", &seed_s, "add", "-A"],
        vec!["-C", &seed_s, "commit", "-q", "-m", "initial"],
        vec!["clone", "-q", "--bare", &seed_s, &bare_s],
    ] {
        step(h.cmd("git", &args), &format!("git {}", args.join(" "))).await?;
    }
    Ok(format!("file://{bare_s}"))
}

struct RaceRun {
    path: ClaimPath,
    pullers: usize,
    pulled: usize,
    twice: usize,
    lost: u64,
    exit4: u64,
    /// From the pullers' start to the end of the last `task pull` that exited 0.
    last: Option<Duration>,
    p50: Option<f64>,
    p99: Option<f64>,
    errors: Errors,
    cut_short: bool,
}

impl RaceRun {
    fn settle_rate(&self) -> Option<f64> {
        self.last
            .filter(|d| !d.is_zero())
            .map(|d| self.pulled as f64 / d.as_secs_f64())
    }
}

/// What one puller saw.
#[derive(Default)]
struct PullerTally {
    /// Task ids pulled, with when the pull finished (from the common start).
    pulled: Vec<(String, Duration)>,
    walls: Vec<Duration>,
    lost: u64,
    exit4: u64,
    errors: Errors,
    cut_short: bool,
}

async fn race_once(
    bench: &Bench,
    origin: &str,
    path: ClaimPath,
    n: usize,
    tasks: usize,
    deadline: Instant,
) -> Res<RaceRun> {
    let h = Arc::new(bench.fresh(&format!("race-{}-{n}", path.as_str()))?);
    let extra: &[&str] = match path {
        ClaimPath::Take => &[],
        ClaimPath::ReadBack => &["--no-take"],
    };
    let ledger = Ledger::start(&h, &h.sqlite_args(), extra).await?;
    // The ledger's first start wrote $HOME/.substrate/config.json in this run's HOME, so the
    // commands below attach to it with no flags, as a cell on this host would.
    let config = h.home.join(".substrate").join("config.json");
    if !config.exists() {
        return Err(format!("the ledger wrote no {}", config.display()));
    }
    for i in 0..tasks {
        let summary = format!("step {i}");
        step(
            h.bin_cmd(&[
                "finding",
                "record",
                "--origin",
                origin,
                "--file",
                "a.py",
                "--summary",
                &summary,
                "--severity",
                "HIGH",
                "--category",
                "task",
                "--json",
            ]),
            "finding record",
        )
        .await?;
    }

    let cells = Arc::new(AtomicUsize::new(0));
    // Each puller can pull at most every task once; past that (plus slack for the odd error) a
    // puller that still gets exit 0 is pulling twice, which the count shows, and stops.
    let max_pulls = tasks * 2 + 2;
    let start = Instant::now();
    let pullers: Vec<_> = (0..n)
        .map(|_| {
            let (h, cells, origin) = (h.clone(), cells.clone(), origin.to_string());
            tokio::spawn(async move {
                puller(&h, &cells, &origin, path, start, deadline, max_pulls).await
            })
        })
        .collect();
    let mut all = PullerTally::default();
    for p in pullers {
        // Every pull is bounded by PULL_LIMIT and the loop by the deadline and max_pulls.
        match p.await {
            Ok(t) => {
                all.pulled.extend(t.pulled);
                all.walls.extend(t.walls);
                all.lost += t.lost;
                all.exit4 += t.exit4;
                all.errors.merge(t.errors);
                all.cut_short |= t.cut_short;
            }
            Err(e) => all.errors.add(format!("puller task failed: {e}")),
        }
    }
    drop(ledger);

    let mut times: HashMap<&str, usize> = HashMap::new();
    for (id, _) in &all.pulled {
        *times.entry(id.as_str()).or_default() += 1;
    }
    all.walls.sort_unstable();
    Ok(RaceRun {
        path,
        pullers: n,
        pulled: times.len(),
        twice: times.values().filter(|&&k| k > 1).count(),
        lost: all.lost,
        exit4: all.exit4,
        last: all.pulled.iter().map(|(_, at)| *at).max(),
        p50: quantile_ms(&all.walls, 0.50),
        p99: quantile_ms(&all.walls, 0.99),
        errors: all.errors,
        cut_short: all.cut_short,
    })
}

/// One cell host: `task pull` again and again, a new cell identity each time, until nothing is
/// left to take.
async fn puller(
    h: &Home,
    cells: &AtomicUsize,
    origin: &str,
    path: ClaimPath,
    start: Instant,
    deadline: Instant,
    max_pulls: usize,
) -> PullerTally {
    let mut t = PullerTally::default();
    for _ in 0..max_pulls {
        if Instant::now() >= deadline {
            t.cut_short = true;
            break;
        }
        let k = cells.fetch_add(1, Ordering::Relaxed);
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
        let out = match output(cmd, PULL_LIMIT, "task pull").await {
            Ok(out) => out,
            Err(e) => {
                t.errors.add(e);
                break;
            }
        };
        let wall = began.elapsed();
        let code = out.status.code();
        let report: Option<serde_json::Value> = serde_json::from_slice(&out.stdout).ok();
        if let Some(r) = &report {
            t.lost += r["candidates"]
                .as_array()
                .map_or(0, |cs| cs.iter().filter(|c| c["outcome"] == "lost").count())
                as u64;
            if r["claim_path"] != path.as_str() {
                t.errors.add(format!(
                    "claim_path {} where {} was expected",
                    r["claim_path"],
                    path.as_str()
                ));
            }
        }
        match (code, &report) {
            (Some(0), Some(r)) => match r["task"]["task_id"].as_str() {
                Some(id) => {
                    t.pulled.push((id.to_string(), start.elapsed()));
                    t.walls.push(wall);
                }
                None => {
                    t.errors.add("exit 0 without task.task_id".into());
                    break;
                }
            },
            (Some(3), _) => break,
            (Some(4), _) => {
                t.exit4 += 1;
                break;
            }
            _ => {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let last = stderr.lines().last().unwrap_or("").trim();
                t.errors
                    .add(format!("task pull exited {:?}: {last}", out.status.code()));
                break;
            }
        }
    }
    t
}
