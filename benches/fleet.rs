//! The fleet bench: the embedded ledger under many concurrent writers, and the task-claim race
//! between many `task pull` processes. It only measures; nothing here is asserted.
//!
//! Run (bench profile = release):
//!   CARGO_TARGET_DIR=/work/target-release cargo bench --bench fleet -- writes [--clients 1,8,32,128] [--seconds 5] [--store sqlite,pg1,pg2]
//!   CARGO_TARGET_DIR=/work/target-release cargo bench --bench fleet -- race [--pullers 1,32] [--tasks 50] [--paths take,read_back]
//!   CARGO_TARGET_DIR=/work/target-release cargo bench --bench fleet -- fleet [--cells 1,8,32,128,1000] [--paths take,read_back] [--store sqlite,pg1,pg2] [--run-deadline SECS]
//!   CARGO_TARGET_DIR=/work/target-release cargo bench --bench fleet -- history [--findings 0,3000,30000] [--tasks 30] [--paths take,read_back] [--store sqlite,pg2] [--bin PATH]
//!   CARGO_TARGET_DIR=/work/target-release cargo bench --bench fleet -- soak --seconds 600 [--cells 4] [--tasks 8] [--store sqlite,pg2] --deadline 1800
//!   CARGO_TARGET_DIR=/work/target-release cargo bench --bench fleet -- capacity [--cells 1000,10000,50000] [--store sqlite,pg2] [--seconds 60] [--claim-minutes M] [--task-minutes 10] [--run-deadline 900] --deadline 3600
//! Common options: `--deadline SECS` (hard bound on the mode's wall time, default 600) and
//! `--dir DIR` (where the temp dir goes, default the system temp dir: the raw SQLite file and
//! the ledgers' data share it, so both sit on the same filesystem).
//! `--store` (writes, fleet; default `sqlite`) runs each measurement on each store named, one
//! after the other: `sqlite` is one `ledger serve --data`, `pgN` is N `ledger serve --store`
//! replicas over one fresh database of a PostgreSQL cluster the bench starts in a temp dir
//! beside its own (same filesystem), with the load split between them. `--run-deadline SECS`
//! (fleet) bounds each simulation on its own as well, so one slow store cannot eat the others'
//! time. `history` times the same pulls on ledgers holding more and more findings of the
//! repository; `--bin` runs ledgers and pulls with another build's binary (a baseline), so two
//! builds are compared in one run. `soak` runs the chaos soak (tests/support/soak/, whose minute-long run is in the
//! test suite) for `--seconds` of chaos on each store and fails when an invariant broke.
//! `capacity` holds N simulated cells' claims on one ledger and measures the ledger's CPU per
//! renewal and per settled task (capacity.rs); it fails when a task was handed out twice.
//!
//! Prints Markdown tables for docs/benchmarks.md on stdout; progress goes to stderr.

#![allow(
    clippy::print_stdout,
    reason = "the tables on stdout are this program's output"
)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::timeout;

#[path = "fleet/capacity.rs"]
mod capacity;
#[path = "fleet/edges.rs"]
mod edges;
#[path = "fleet/history.rs"]
mod history;
#[path = "fleet/opts.rs"]
mod opts;
#[path = "fleet/pg.rs"]
mod pg;
#[path = "fleet/race.rs"]
mod race;
#[path = "fleet/sim.rs"]
mod sim;
#[path = "../tests/support/soak/mod.rs"]
mod soak;
#[path = "fleet/writes.rs"]
mod writes;

use opts::{ClaimPath, Opts, Store};
use race::race;
use writes::writes;

/// Built by Cargo for bench targets in the same profile, so the ledger measured is the one the
/// bench was compiled with.
const BIN: &str = env!("CARGO_BIN_EXE_metabob-mcp");

/// Connections open and the writer's first batches settle before counting starts.
const WARMUP: Duration = Duration::from_secs(1);
/// Longest a single HTTP request may take; past it the request counts as an error.
const REQUEST_LIMIT: Duration = Duration::from_secs(30);
/// Longest one short-lived process (key create, finding record, git) may take.
const STEP_LIMIT: Duration = Duration::from_secs(60);
/// Longest one `task pull` may take: claim, clone and task files on a loaded 2-core machine.
const PULL_LIMIT: Duration = Duration::from_secs(120);
/// Distinct error texts kept per run; the rest are lumped, so a flood cannot fill memory.
const ERROR_KINDS: usize = 20;

type Res<T> = Result<T, String>;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet: {e}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: fleet writes [--clients 1,8,32,128] [--seconds 5] [--store sqlite,pg1,pg2] [--deadline 600] [--dir DIR]\n       \
                     fleet race [--pullers 1,32] [--tasks 50] [--paths take,read_back] [--deadline 600] [--dir DIR]\n       \
                     fleet fleet [--cells 1,8,32,128,1000] [--paths take,read_back] [--store sqlite,pg1,pg2] [--dag 0,1] [--run-deadline SECS] [--deadline 600] [--dir DIR]\n       \
                     fleet edges [--tasks 2000] [--dag 0,2] [--store sqlite,pg2] [--deadline 600] [--dir DIR]\n       \
                     fleet soak [--seconds 600] [--cells 4] [--tasks 8] [--store sqlite,pg2] [--deadline 1800] [--dir DIR]\n       \
                     fleet history [--findings 0,3000,30000] [--tasks 30] [--paths take,read_back] [--store sqlite,pg2] [--bin PATH] [--deadline 600] [--dir DIR]\n       \
                     fleet capacity [--cells 1000,10000,50000] [--store sqlite,pg2] [--seconds 60] [--claim-minutes M] [--task-minutes 10] [--run-deadline 900] [--deadline 600] [--dir DIR]";

fn run() -> Res<()> {
    // `cargo bench` appends `--bench` to a harness-less target's arguments.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let Some((mode, rest)) = args.split_first() else {
        return Err(USAGE.into());
    };
    let opts = Opts::parse(rest)?;
    if mode != "capacity"
        && let Some(n) = opts.cells.iter().find(|&&n| n > opts::MAX_CELL_PROCESSES)
    {
        return Err(format!(
            "--cells {n}: past {} only `capacity` runs, whose cells are no tasks or processes \
             of their own\n{USAGE}",
            opts::MAX_CELL_PROCESSES
        ));
    }
    // reqwest is built with `rustls-no-provider` (see Cargo.toml) and refuses to build a client
    // until a provider is installed, even for plain http; ring is the one the crate already has.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let parent = opts.dir.clone().unwrap_or_else(std::env::temp_dir);
    let root = tempfile::Builder::new()
        .prefix("mb-fleet-")
        .tempdir_in(&parent)
        .map_err(|e| format!("temp dir: {e}"))?;
    // Only the modes that take --store start a cluster, and only when a pg store is named.
    let pg = if matches!(
        mode.as_str(),
        "writes" | "fleet" | "soak" | "history" | "edges" | "capacity"
    ) && opts.stores.iter().any(|s| matches!(s, Store::Pg { .. }))
    {
        eprintln!(
            "fleet: starting a PostgreSQL cluster under {}",
            parent.display()
        );
        Some(pg::Cluster::start(&parent)?)
    } else {
        None
    };
    let bench = Bench::new(root.path(), pg, opts.bin.clone())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let deadline = Instant::now() + opts.deadline;
    // The inner loops stop starting work at the deadline and report what they have; this outer
    // bound is the backstop for anything that still hangs (a grace period for in-flight work).
    let backstop = opts.deadline + PULL_LIMIT + STEP_LIMIT;
    let out = rt.block_on(async {
        let work = async {
            match mode.as_str() {
                "writes" => writes(&bench, &opts, deadline).await,
                "race" => race(&bench, &opts, deadline).await,
                "fleet" => fleet(&bench, &opts, deadline).await,
                "history" => history::history(&bench, &opts, deadline).await,
                "edges" => edges::edges(&bench, &opts, deadline).await,
                "capacity" => capacity::capacity(&bench, &opts, deadline).await,
                "soak" => soak_mode(&bench, &opts, deadline),
                _ => Err(USAGE.into()),
            }
        };
        timeout(backstop, work)
            .await
            .map_err(|_| format!("hard deadline of {backstop:?} passed"))?
    });
    // Kill what is left (a ledger, a pull) before the cluster and the temp dir under it go.
    rt.shutdown_timeout(Duration::from_secs(5));
    drop(bench);
    drop(root);
    out
}

/// The one temp dir everything lives in, the environment every child process gets, and the
/// PostgreSQL cluster when a pg store was asked for.
struct Bench {
    root: PathBuf,
    /// The binary every ledger and `task pull` runs: this build's, or `--bin` (a baseline).
    bin: PathBuf,
    path_var: String,
    gitconfig: PathBuf,
    runs: AtomicUsize,
    pg: Option<pg::Cluster>,
}

/// One run's own HOME (so each fresh ledger writes its own config.json, which the CLI commands
/// of that run then attach through), cwd and ledger data dir.
struct Home {
    bin: PathBuf,
    dir: PathBuf,
    home: PathBuf,
    cwd: PathBuf,
    data: PathBuf,
    vars: Vec<(String, String)>,
}

impl Bench {
    fn new(root: &Path, pg: Option<pg::Cluster>, bin: Option<PathBuf>) -> Res<Bench> {
        let gitconfig = root.join("gitconfig");
        write(
            &gitconfig,
            "[user]\n\tname = Fleet Bench\n\temail = fleet@example.invalid\n[init]\n\tdefaultBranch = main\n",
        )?;
        Ok(Bench {
            root: root.to_path_buf(),
            bin: bin.unwrap_or_else(|| PathBuf::from(BIN)),
            path_var: std::env::var("PATH").unwrap_or_default(),
            gitconfig,
            runs: AtomicUsize::new(0),
            pg,
        })
    }

    fn cluster(&self) -> Res<&pg::Cluster> {
        self.pg
            .as_ref()
            .ok_or_else(|| "no PostgreSQL cluster was started".into())
    }

    fn fresh(&self, name: &str) -> Res<Home> {
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        let dir = self.root.join(format!("{n:02}-{name}"));
        let (home, cwd) = (dir.join("home"), dir.join("cwd"));
        for d in [&home, &cwd] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        // Only what the commands need: nothing from the caller's environment (a METABOB_* key,
        // a proxy, the real HOME) may leak into what is measured.
        let vars = vec![
            ("PATH".into(), self.path_var.clone()),
            ("HOME".into(), home.display().to_string()),
            (
                "GIT_CONFIG_GLOBAL".into(),
                self.gitconfig.display().to_string(),
            ),
            ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
            ("RUST_LOG".into(), "error".into()),
        ];
        Ok(Home {
            bin: self.bin.clone(),
            data: dir.join("ledger"),
            dir,
            home,
            cwd,
            vars,
        })
    }
}

impl Home {
    /// The `ledger serve` / `ledger key` arguments that put the ledger in this run's data dir.
    fn sqlite_args(&self) -> Vec<String> {
        vec!["--data".into(), self.data.display().to_string()]
    }

    /// The run's binary (`ledger serve`, `task pull`, …) with `args`.
    fn bin_cmd(&self, args: &[&str]) -> tokio::process::Command {
        let bin = self.bin.display().to_string();
        self.cmd(&bin, args)
    }

    fn cmd(&self, program: &str, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(program);
        c.env_clear()
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd)
            .args(args)
            .stdin(Stdio::null())
            // A timed-out child is killed when its future is dropped, not left running.
            .kill_on_drop(true);
        c
    }
}

fn write(path: &Path, text: &str) -> Res<()> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs a command to completion within `limit`; the exit status is the caller's to judge.
async fn output(
    mut cmd: tokio::process::Command,
    limit: Duration,
    what: &str,
) -> Res<std::process::Output> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    match timeout(limit, cmd.output()).await {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer within {limit:?} (killed)")),
    }
}

/// Runs a setup step that must succeed; returns its stdout.
async fn step(cmd: tokio::process::Command, what: &str) -> Res<String> {
    let out = output(cmd, STEP_LIMIT, what).await?;
    if !out.status.success() {
        return Err(format!(
            "{what}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A running `ledger serve`, killed when dropped.
struct Ledger {
    child: tokio::process::Child,
    url: String,
}

impl Ledger {
    /// `store` is where the ledger keeps its rows: `--data DIR` or `--store URL`.
    async fn start(h: &Home, store: &[String], extra: &[&str]) -> Res<Ledger> {
        let mut args = vec!["ledger", "serve"];
        args.extend(store.iter().map(String::as_str));
        args.extend_from_slice(&["--listen", "127.0.0.1:0"]);
        args.extend_from_slice(extra);
        let mut cmd = h.bin_cmd(&args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = cmd.spawn().map_err(|e| format!("ledger serve: {e}"))?;
        let stdout = child.stdout.take().ok_or("ledger serve: no stdout pipe")?;
        let mut lines = BufReader::new(stdout).lines();
        let first = match timeout(STEP_LIMIT, lines.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => return Err("ledger serve exited before printing its address".into()),
            Ok(Err(e)) => return Err(format!("ledger serve stdout: {e}")),
            Err(_) => return Err(format!("ledger serve printed nothing in {STEP_LIMIT:?}")),
        };
        // Drained so a later line can never block the ledger on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let url = first
            .split_whitespace()
            .last()
            .filter(|w| w.starts_with("http://"))
            .ok_or_else(|| format!("no URL in the ledger's first line: {first}"))?
            .to_string();
        Ok(Ledger { child, url })
    }

    fn pid(&self) -> Res<u32> {
        self.child.id().ok_or_else(|| "the ledger exited".into())
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        // tokio reaps the killed child in the background.
        let _ = self.child.start_kill();
    }
}

/// One run's ledger on its store: one process on SQLite, or the replicas over one fresh
/// PostgreSQL database.
struct Ledgers {
    replicas: Vec<Ledger>,
    /// `--data DIR` or `--store URL`, for the key commands of the run.
    store_args: Vec<String>,
}

impl Ledgers {
    async fn start(bench: &Bench, h: &Home, store: Store, extra: &[&str]) -> Res<Ledgers> {
        let (store_args, count) = match store {
            Store::Sqlite => (h.sqlite_args(), 1),
            Store::Pg { replicas } => {
                let cluster = bench.cluster()?;
                // A psql of a few ms between runs: nothing is being measured while it blocks.
                let url = tokio::task::block_in_place(|| cluster.fresh_database())?;
                (vec!["--store".into(), url], replicas)
            }
        };
        let mut replicas = Vec::with_capacity(count);
        // One at a time: the first makes the schema, the org and the admin key (and this run's
        // config.json) before it prints its address, so the others find a ready store.
        for _ in 0..count {
            replicas.push(Ledger::start(h, &store_args, extra).await?);
        }
        Ok(Ledgers {
            replicas,
            store_args,
        })
    }

    fn urls(&self) -> Vec<String> {
        self.replicas.iter().map(|l| l.url.clone()).collect()
    }

    /// The replicas' process ids, as /proc names them, for their CPU.
    fn pids(&self) -> Res<Vec<String>> {
        self.replicas
            .iter()
            .map(|l| l.pid().map(|p| p.to_string()))
            .collect()
    }
}

/// User and system CPU seconds a process has used so far, from /proc/<pid>/stat.
fn cpu_seconds(pid: &str, ticks_per_s: f64) -> Res<(f64, f64)> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    // The command name (field 2) is parenthesised and may hold spaces; fields after it are
    // plain. utime and stime are fields 14 and 15, so the 12th and 13th after the name.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| format!("{path}: no command name"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| -> Res<f64> {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .map(|t| t as f64 / ticks_per_s)
            .ok_or_else(|| format!("{path}: field {} unreadable", i + 3))
    };
    Ok((tick(11)?, tick(12)?))
}

/// User and system CPU seconds of the processes, summed.
fn cpu_sum(pids: &[String], ticks: f64) -> Res<(f64, f64)> {
    pids.iter().try_fold((0.0, 0.0), |(u, s), pid| {
        let (pu, ps) = cpu_seconds(pid, ticks)?;
        Ok((u + pu, s + ps))
    })
}

/// Each PostgreSQL server process's user + sys CPU seconds so far; one that exits between
/// listing and reading is left out.
fn server_cpu(cluster: &pg::Cluster, ticks: f64) -> HashMap<String, f64> {
    cluster
        .server_pids()
        .into_iter()
        .filter_map(|pid| {
            let (u, s) = cpu_seconds(&pid, ticks).ok()?;
            Some((pid, u + s))
        })
        .collect()
}

/// The PostgreSQL server's CPU seconds between two readings of `server_cpu`. A server process
/// that started in the window counts whole; one that ended in it is lost (the ledgers'
/// connections live as long as the run, so these are rare).
fn server_cpu_between(before: &HashMap<String, f64>, after: &HashMap<String, f64>) -> f64 {
    after
        .iter()
        .map(|(pid, t)| t - before.get(pid).copied().unwrap_or(0.0))
        .sum()
}

/// The kernel's clock ticks per second for /proc times (USER_HZ); `getconf` because the crate
/// has no libc binding, and 100 is what Linux uses everywhere in practice.
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// The value at quantile `q` (nearest rank) of sorted samples, in milliseconds.
fn quantile_ms(sorted: &[Duration], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1].as_secs_f64() * 1000.0)
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

/// Counts error texts, lumping past `ERROR_KINDS` distinct ones.
#[derive(Default)]
struct Errors(BTreeMap<String, u64>);

impl Errors {
    fn add(&mut self, e: String) {
        self.add_n(e, 1);
    }

    fn add_n(&mut self, e: String, n: u64) {
        let key = if self.0.len() >= ERROR_KINDS && !self.0.contains_key(&e) {
            "(other errors)".to_string()
        } else {
            e
        };
        *self.0.entry(key).or_default() += n;
    }

    fn merge(&mut self, other: Errors) {
        for (e, n) in other.0 {
            self.add_n(e, n);
        }
    }

    fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// Markdown list lines naming each error and how often it happened.
    fn notes(&self, run: &str) -> Vec<String> {
        self.0
            .iter()
            .map(|(e, n)| format!("- {run}: {n} x {e}"))
            .collect()
    }
}

/// Open tasks per simulated cell: every cell has work, and a fleet of 1,000 faces 2,000 tasks.
const TASKS_PER_CELL: usize = 2;
/// The fewest tasks a simulation starts with, so that small fleets still race for several.
const MIN_SIM_TASKS: usize = 50;

/// The fleet simulation (`sim.rs`) for each path, cell count and store, on a fresh ledger each.
async fn fleet(bench: &Bench, opts: &Opts, deadline: Instant) -> Res<()> {
    let show_store = opts.stores != [Store::Sqlite];
    let (lead, lead_rule) = if show_store {
        ("| store ", "|---")
    } else {
        ("", "")
    };
    println!(
        "{lead}| path | cells | tasks | edges | closed | handed out twice | handed out early | left open | time to last close s | tasks settled/s | lost claims | try later (exit 4) | pull p50 ms | pull p99 ms | errors |"
    );
    println!("{lead_rule}|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut notes = Vec::new();
    let mut rates: Vec<(String, ClaimPath, usize, f64)> = Vec::new();
    for &path in &opts.paths {
        for n in opts.cells_or(&[1, 8, 32, 128, 1000]) {
            // Stores inside: the stores of one size run back to back, so a disturbance on the
            // shared machine lands on neighbours that are compared.
            for (&store, &per_task) in opts
                .stores
                .iter()
                .flat_map(|s| opts.dag.iter().map(move |d| (s, d)))
            {
                let tasks = (n * TASKS_PER_CELL).max(MIN_SIM_TASKS);
                let edges = tasks * per_task;
                let label = if show_store {
                    format!(
                        "{} {} with {n} cells, {edges} edges",
                        store.name(),
                        path.as_str()
                    )
                } else {
                    format!("{} with {n} cells, {edges} edges", path.as_str())
                };
                if Instant::now() >= deadline {
                    notes.push(format!("- {label}: not run, the deadline passed"));
                    continue;
                }
                let run_deadline = opts
                    .run_deadline
                    .map_or(deadline, |d| deadline.min(Instant::now() + d));
                eprintln!(
                    "fleet: simulation, {} store, {} path, {n} cells, {tasks} tasks",
                    store.name(),
                    path.as_str()
                );
                let h = bench.fresh(&format!("sim-{}-{}-{n}", store.name(), path.as_str()))?;
                let extra: &[&str] = match path {
                    ClaimPath::Take => &[],
                    ClaimPath::ReadBack => &["--no-take"],
                };
                let ledgers = Ledgers::start(bench, &h, store, extra).await?;
                // With replicas the cells alternate between them; one ledger is reached as a
                // cell on this host would, through the config.json its first start wrote.
                let endpoints = if ledgers.replicas.len() > 1 {
                    ledgers.urls()
                } else {
                    Vec::new()
                };
                let mut r = sim::simulate(&h, &endpoints, n, tasks, edges, run_deadline).await?;
                drop(ledgers);
                r.pull_times.sort();
                let errors: usize = r.errors.values().sum();
                let rate = if r.secs > 0.0 {
                    r.closed as f64 / r.secs
                } else {
                    0.0
                };
                if per_task == 0 {
                    rates.push((store.name(), path, n, rate));
                }
                let lead = if show_store {
                    format!("| {} ", store.name())
                } else {
                    String::new()
                };
                println!(
                    "{lead}| {} | {n} | {tasks} | {edges} | {} | {} | {} | {} | {:.2} | {:.1} | {} | {} | {} | {} | {errors} |",
                    path.as_str(),
                    r.closed,
                    r.doubles,
                    r.early,
                    r.left_open,
                    r.secs,
                    rate,
                    r.lost_claims,
                    r.try_later,
                    ms(quantile_ms(&r.pull_times, 0.5)),
                    ms(quantile_ms(&r.pull_times, 0.99)),
                );
                if r.timed_out {
                    notes.push(format!("- {label}: the deadline stopped the cells"));
                }
                for (what, count) in &r.errors {
                    notes.push(format!("- {label}: {count} x {what}"));
                }
            }
        }
    }
    for note in notes {
        println!("{note}");
    }
    scaling(&rates);
    Ok(())
}

/// Each run's settle rate against the 32-cell run of the same store and path (the fleet's
/// scaling, which a flat pull keeps near 1), and each store's against SQLite's.
fn scaling(rates: &[(String, ClaimPath, usize, f64)]) {
    let rate = |store: &str, path: ClaimPath, n: usize| {
        rates
            .iter()
            .find(|r| r.0 == store && r.1 == path && r.2 == n)
            .map(|r| r.3)
            .filter(|r| *r > 0.0)
    };
    let ratio = |a: f64, b: Option<f64>| b.map_or("-".into(), |b| format!("{:.2}", a / b));
    println!();
    println!("| store | path | cells | settle rate / 32-cell rate | / SQLite's rate, same cells |");
    println!("|---|---|---|---|---|");
    for (store, path, n, r) in rates {
        println!(
            "| {store} | {} | {n} | {} | {} |",
            path.as_str(),
            ratio(*r, rate(store, *path, 32)),
            ratio(*r, rate("sqlite", *path, *n)),
        );
    }
}

/// The chaos soak on each store: the first `--cells` count (default 4), `--tasks` to start
/// with, `--seconds` of chaos; its table row, and an error when an invariant broke.
fn soak_mode(bench: &Bench, opts: &Opts, deadline: Instant) -> Res<()> {
    println!("{}", soak::Report::TABLE_HEAD);
    let cells = opts.cells_or(&[4])[0];
    let mut notes = Vec::new();
    for &store in &opts.stores {
        if Instant::now() >= deadline {
            notes.push(format!("- {}: not run, the deadline passed", store.name()));
            continue;
        }
        let h = bench.fresh(&format!("soak-{}", store.name()))?;
        let (store_args, replicas) = match store {
            Store::Sqlite => (h.sqlite_args(), 1),
            Store::Pg { replicas } => (
                vec!["--store".into(), bench.cluster()?.fresh_database()?],
                replicas,
            ),
        };
        let root = h.dir.join("soak");
        std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        let plan = soak::Plan {
            bin: bench.bin.clone(),
            repo: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            root,
            vars: h.vars.clone(),
            store: store_args,
            replicas,
            cells,
            tasks: opts.tasks,
            chaos_for: Duration::from_secs_f64(opts.seconds_or(5.0)),
            settle_for: Duration::from_secs(300),
            seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(23, |d| d.as_secs()),
        };
        eprintln!(
            "fleet: soak, {} store, {cells} cells, {:.0} s of chaos (seed {})",
            store.name(),
            opts.seconds_or(5.0),
            plan.seed
        );
        // The soak runs on threads and processes of its own; this runtime only waits for it.
        let report = tokio::task::block_in_place(|| soak::run(&plan))?;
        println!("{}", report.table_row(&store.name(), cells));
        for v in report.violations() {
            notes.push(format!("- {}: {v}", store.name()));
        }
    }
    let broken = notes.iter().any(|n| !n.ends_with("the deadline passed"));
    for note in &notes {
        println!("{note}");
    }
    if broken {
        return Err("the soak found broken invariants (listed above)".into());
    }
    Ok(())
}
