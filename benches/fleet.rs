//! The fleet bench: the embedded ledger under many concurrent writers, and the task-claim race
//! between many `task pull` processes. It only measures; nothing here is asserted.
//!
//! Run (bench profile = release):
//!   CARGO_TARGET_DIR=/work/target-release cargo bench --bench fleet -- writes [--clients 1,8,32,128] [--seconds 5] [--store sqlite,pg1,pg2]
//!   CARGO_TARGET_DIR=/work/target-release cargo bench --bench fleet -- race [--pullers 1,32] [--tasks 50] [--paths take,read_back]
//!   CARGO_TARGET_DIR=/work/target-release cargo bench --bench fleet -- fleet [--cells 1,8,32,128,1000] [--paths take,read_back] [--store sqlite,pg1,pg2] [--run-deadline SECS]
//!   CARGO_TARGET_DIR=/work/target-release cargo bench --bench fleet -- soak --seconds 600 [--cells 4] [--tasks 8] [--store sqlite,pg2] --deadline 1800
//! Common options: `--deadline SECS` (hard bound on the mode's wall time, default 600) and
//! `--dir DIR` (where the temp dir goes, default the system temp dir: the raw SQLite file and
//! the ledgers' data share it, so both sit on the same filesystem).
//! `--store` (writes, fleet; default `sqlite`) runs each measurement on each store named, one
//! after the other: `sqlite` is one `ledger serve --data`, `pgN` is N `ledger serve --store`
//! replicas over one fresh database of a PostgreSQL cluster the bench starts in a temp dir
//! beside its own (same filesystem), with the load split between them. `--run-deadline SECS`
//! (fleet) bounds each simulation on its own as well, so one slow store cannot eat the others'
//! time. `soak` runs the chaos soak (tests/support/soak.rs, whose minute-long run is in the
//! test suite) for `--seconds` of chaos on each store and fails when an invariant broke.
//!
//! Prints Markdown tables for docs/benchmarks.md on stdout; progress goes to stderr.

#![allow(
    clippy::print_stdout,
    reason = "the tables on stdout are this program's output"
)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::{sleep_until, timeout};

#[path = "fleet/pg.rs"]
mod pg;
#[path = "fleet/sim.rs"]
mod sim;
#[path = "../tests/support/soak.rs"]
mod soak;

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
                     fleet fleet [--cells 1,8,32,128,1000] [--paths take,read_back] [--store sqlite,pg1,pg2] [--run-deadline SECS] [--deadline 600] [--dir DIR]\n       \
                     fleet soak [--seconds 600] [--cells 4] [--tasks 8] [--store sqlite,pg2] [--deadline 1800] [--dir DIR]";

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
    // reqwest is built with `rustls-no-provider` (see Cargo.toml) and refuses to build a client
    // until a provider is installed, even for plain http; ring is the one the crate already has.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let parent = opts.dir.clone().unwrap_or_else(std::env::temp_dir);
    let root = tempfile::Builder::new()
        .prefix("mb-fleet-")
        .tempdir_in(&parent)
        .map_err(|e| format!("temp dir: {e}"))?;
    // Only the modes that take --store start a cluster, and only when a pg store is named.
    let pg = if matches!(mode.as_str(), "writes" | "fleet" | "soak")
        && opts.stores.iter().any(|s| matches!(s, Store::Pg { .. }))
    {
        eprintln!(
            "fleet: starting a PostgreSQL cluster under {}",
            parent.display()
        );
        Some(pg::Cluster::start(&parent)?)
    } else {
        None
    };
    let bench = Bench::new(root.path(), pg)?;
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

struct Opts {
    clients: Vec<usize>,
    cells: Vec<usize>,
    seconds: f64,
    pullers: Vec<usize>,
    tasks: usize,
    paths: Vec<ClaimPath>,
    stores: Vec<Store>,
    deadline: Duration,
    run_deadline: Option<Duration>,
    dir: Option<PathBuf>,
}

impl Opts {
    fn parse(args: &[String]) -> Res<Opts> {
        let mut o = Opts {
            clients: vec![1, 8, 32, 128],
            // Each mode's own default when not given (see `cells_or`).
            cells: Vec::new(),
            seconds: 5.0,
            pullers: vec![1, 32],
            tasks: 50,
            paths: vec![ClaimPath::Take, ClaimPath::ReadBack],
            stores: vec![Store::Sqlite],
            deadline: Duration::from_secs(600),
            run_deadline: None,
            dir: None,
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let value = it
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
            let bad = |what: &str| format!("{flag} {value}: {what}\n{USAGE}");
            match flag.as_str() {
                "--clients" => o.clients = counts(value).ok_or_else(|| bad("counts >= 1"))?,
                "--pullers" => o.pullers = counts(value).ok_or_else(|| bad("counts >= 1"))?,
                "--cells" => o.cells = counts(value).ok_or_else(|| bad("counts >= 1"))?,
                "--seconds" => {
                    o.seconds = value
                        .parse()
                        .ok()
                        .filter(|s: &f64| *s > 0.0 && *s <= 3600.0)
                        .ok_or_else(|| bad("seconds in (0, 3600]"))?
                }
                "--tasks" => {
                    o.tasks = value
                        .parse()
                        .ok()
                        .filter(|t| (1..=10_000).contains(t))
                        .ok_or_else(|| bad("1 to 10000"))?
                }
                "--paths" => {
                    o.paths = value
                        .split(',')
                        .map(|p| match p {
                            "take" => Some(ClaimPath::Take),
                            "read_back" => Some(ClaimPath::ReadBack),
                            _ => None,
                        })
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| bad("take and/or read_back"))?
                }
                "--store" => {
                    o.stores = value
                        .split(',')
                        .map(Store::parse)
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| bad("sqlite and/or pg1 to pg8"))?
                }
                "--deadline" => {
                    o.deadline = value
                        .parse()
                        .ok()
                        .filter(|s| *s > 0)
                        .map(Duration::from_secs)
                        .ok_or_else(|| bad("whole seconds > 0"))?
                }
                "--run-deadline" => {
                    o.run_deadline = Some(
                        value
                            .parse()
                            .ok()
                            .filter(|s| *s > 0)
                            .map(Duration::from_secs)
                            .ok_or_else(|| bad("whole seconds > 0"))?,
                    )
                }
                "--dir" => o.dir = Some(PathBuf::from(value)),
                _ => return Err(format!("unknown option {flag}\n{USAGE}")),
            }
        }
        Ok(o)
    }
}

impl Opts {
    fn cells_or(&self, default: &[usize]) -> Vec<usize> {
        if self.cells.is_empty() {
            default.to_vec()
        } else {
            self.cells.clone()
        }
    }
}

/// A comma-separated list of counts, each 1 to 1024 (more processes or sockets than that is a
/// typo on this machine, not a measurement).
fn counts(s: &str) -> Option<Vec<usize>> {
    s.split(',')
        .map(|n| n.trim().parse().ok().filter(|n| (1..=1024).contains(n)))
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ClaimPath {
    Take,
    ReadBack,
}

impl ClaimPath {
    /// As `task pull --json` names it in `claim_path`.
    fn as_str(self) -> &'static str {
        match self {
            ClaimPath::Take => "take",
            ClaimPath::ReadBack => "read_back",
        }
    }
}

/// Which store a ledger run is on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Store {
    /// One `ledger serve --data DIR`.
    Sqlite,
    /// `replicas` `ledger serve --store URL` processes over one PostgreSQL database.
    Pg { replicas: usize },
}

impl Store {
    fn parse(s: &str) -> Option<Store> {
        match s.trim() {
            "sqlite" => Some(Store::Sqlite),
            pg => pg
                .strip_prefix("pg")
                .and_then(|n| n.parse().ok())
                .filter(|n| (1..=8).contains(n))
                .map(|replicas| Store::Pg { replicas }),
        }
    }

    fn name(self) -> String {
        match self {
            Store::Sqlite => "sqlite".into(),
            Store::Pg { replicas } => format!("pg{replicas}"),
        }
    }
}

/// The one temp dir everything lives in, the environment every child process gets, and the
/// PostgreSQL cluster when a pg store was asked for.
struct Bench {
    root: PathBuf,
    path_var: String,
    gitconfig: PathBuf,
    runs: AtomicUsize,
    pg: Option<pg::Cluster>,
}

/// One run's own HOME (so each fresh ledger writes its own config.json, which the CLI commands
/// of that run then attach through), cwd and ledger data dir.
struct Home {
    dir: PathBuf,
    home: PathBuf,
    cwd: PathBuf,
    data: PathBuf,
    vars: Vec<(String, String)>,
}

impl Bench {
    fn new(root: &Path, pg: Option<pg::Cluster>) -> Res<Bench> {
        let gitconfig = root.join("gitconfig");
        write(
            &gitconfig,
            "[user]\n\tname = Fleet Bench\n\temail = fleet@example.invalid\n[init]\n\tdefaultBranch = main\n",
        )?;
        Ok(Bench {
            root: root.to_path_buf(),
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
        let mut cmd = h.cmd(BIN, &args);
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

// ---------------------------------------------------------------------------------------------
// writes

async fn writes(bench: &Bench, opts: &Opts, deadline: Instant) -> Res<()> {
    let secs = Duration::from_secs_f64(opts.seconds);
    // A store column (and the PostgreSQL server's CPU) only when more than SQLite is measured,
    // so a default run prints what it always has.
    let show_store = opts.stores != [Store::Sqlite];
    let any_pg = opts.stores.iter().any(|s| matches!(s, Store::Pg { .. }));
    let mut sqlite_raw = None;
    if opts.stores.contains(&Store::Sqlite) {
        let raw_dir = bench.root.join("raw-sqlite");
        std::fs::create_dir_all(&raw_dir).map_err(|e| format!("{}: {e}", raw_dir.display()))?;
        eprintln!("fleet: raw SQLite, 1 and 32 rows per commit, {secs:?} each");
        let one = {
            let dir = raw_dir.clone();
            tokio::task::spawn_blocking(move || raw_sqlite(&dir.join("one.db"), 1, secs))
                .await
                .map_err(|e| format!("raw SQLite: {e}"))??
        };
        let batch = {
            let dir = raw_dir.clone();
            tokio::task::spawn_blocking(move || raw_sqlite(&dir.join("batch.db"), 32, secs))
                .await
                .map_err(|e| format!("raw SQLite: {e}"))??
        };
        sqlite_raw = Some((one, batch));
    }
    let mut pg_raw = None;
    if any_pg {
        eprintln!("fleet: raw PostgreSQL, 1 and 32 rows per commit, {secs:?} each");
        let cluster = bench.cluster()?;
        let mut rates = Vec::new();
        for rows in [1, 32] {
            let url = tokio::task::block_in_place(|| cluster.fresh_database())?;
            rates.push(
                tokio::task::spawn_blocking(move || pg::raw_commits(&url, rows, secs))
                    .await
                    .map_err(|e| format!("raw PostgreSQL: {e}"))??,
            );
        }
        let batch = rates.pop().ok_or("raw PostgreSQL: no rate")?;
        let one = rates.pop().ok_or("raw PostgreSQL: no rate")?;
        pg_raw = Some((one, batch));
    }
    // Each store against its own ceiling: one durable single-row commit after another.
    let ceiling = |store: Store| {
        let raw = match store {
            Store::Sqlite => &sqlite_raw,
            Store::Pg { .. } => &pg_raw,
        };
        raw.as_ref().map_or(0.0, |(one, _)| one.commits_per_s())
    };

    let ticks = clock_ticks();
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    // Clients outside, stores inside: the stores of one client count run back to back, so a
    // disturbance on the shared machine lands on neighbours that are compared.
    for &n in &opts.clients {
        for &store in &opts.stores {
            let label = if show_store {
                format!("{} with {n} clients", store.name())
            } else {
                format!("{n} clients")
            };
            // A run needs warm-up + window + drain; one that cannot finish before the deadline
            // is not started, so what is printed is whole runs only.
            if Instant::now() + WARMUP + secs + REQUEST_LIMIT > deadline {
                notes.push(format!("- {label}: not run, the deadline would pass"));
                continue;
            }
            eprintln!(
                "fleet: {} store, {n} concurrent writers, {secs:?}",
                store.name()
            );
            let r = ledger_writes(bench, store, n, secs, ticks).await?;
            notes.extend(r.errors.notes(&label));
            rows.push(r);
        }
    }

    for (what, raw) in [
        (
            "Raw SQLite on the same filesystem (WAL, synchronous=FULL, one connection",
            &sqlite_raw,
        ),
        (
            "Raw PostgreSQL on the same filesystem (the bench's cluster, fsync and \
             synchronous_commit on, one connection, one INSERT per autocommit transaction or 32 \
             in one transaction",
            &pg_raw,
        ),
    ] {
        let Some((one, batch)) = raw else { continue };
        println!("{what}, {:.1} s each):", opts.seconds);
        println!();
        println!("| rows per commit | commits | commits/s | rows/s |");
        println!("|---|---|---|---|");
        for r in [one, batch] {
            println!(
                "| {} | {} | {:.0} | {:.0} |",
                r.rows_per_commit,
                r.commits,
                r.commits_per_s(),
                r.commits_per_s() * r.rows_per_commit as f64
            );
        }
        println!();
    }
    println!(
        "`concept_create_write` from N concurrent keep-alive connections, each back to back, a \
         fresh ledger per row, {:.1} s counted after {:.1} s warm-up; CPU is the ledger \
         process's over the counted window:",
        opts.seconds,
        WARMUP.as_secs_f64()
    );
    println!();
    let (lead, lead_rule) = if show_store {
        ("| store ", "|---")
    } else {
        ("", "")
    };
    let (tail, tail_rule) = if any_pg {
        (" PostgreSQL server CPU s / 1k writes |", "---|")
    } else {
        ("", "")
    };
    let ratio = if show_store {
        "x own store's raw 1-row commits/s"
    } else {
        "x raw 1-row commits/s"
    };
    println!(
        "{lead}| clients | writes (201) | errors | writes/s | {ratio} | p50 ms | p99 ms \
         | ledger user CPU s / 1k writes | ledger sys CPU s / 1k writes | sys share of ledger CPU |{tail}"
    );
    println!("{lead_rule}|---|---|---|---|---|---|---|---|---|---|{tail_rule}");
    for r in &rows {
        let per_k = |s: f64| {
            if r.ok == 0 {
                "-".to_string()
            } else {
                format!("{:.3}", s / (r.ok as f64 / 1000.0))
            }
        };
        let total = r.user + r.sys;
        let share = if total > 0.0 {
            format!("{:.0}%", 100.0 * r.sys / total)
        } else {
            "-".into()
        };
        let lead = if show_store {
            format!("| {} ", r.store.name())
        } else {
            String::new()
        };
        let tail = if any_pg {
            format!(" {} |", r.pg_cpu.map_or("-".into(), per_k))
        } else {
            String::new()
        };
        let ceiling = ceiling(r.store);
        println!(
            "{lead}| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} |{tail}",
            r.clients,
            r.ok,
            r.window_errors,
            r.writes_per_s,
            if ceiling > 0.0 {
                format!("{:.2}", r.writes_per_s / ceiling)
            } else {
                "-".into()
            },
            ms(r.p50),
            ms(r.p99),
            per_k(r.user),
            per_k(r.sys),
            share
        );
    }
    if show_store {
        println!();
        println!(
            "Ledger CPU is summed over the replicas; PostgreSQL server CPU is the postmaster's \
             and every process it forked (backends, WAL writer, checkpointer) over the same \
             window."
        );
    }
    if !notes.is_empty() {
        println!();
        println!("Errors (whole run, warm-up included) and skipped runs:");
        println!();
        for n in notes {
            println!("{n}");
        }
    }
    Ok(())
}

struct RawRate {
    rows_per_commit: usize,
    commits: u64,
    elapsed: Duration,
}

impl RawRate {
    fn commits_per_s(&self) -> f64 {
        self.commits as f64 / self.elapsed.as_secs_f64()
    }
}

/// The disk's ceiling for what the ledger does per commit: one WAL append and its fsync. The
/// table is shaped like a small concept row so the page writes are of the same order.
fn raw_sqlite(path: &Path, rows_per_commit: usize, secs: Duration) -> Res<RawRate> {
    let db = |e: rusqlite::Error| format!("{}: {e}", path.display());
    let conn = rusqlite::Connection::open(path).map_err(db)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(db)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(db)?;
    conn.execute_batch(
        "CREATE TABLE concepts (id TEXT PRIMARY KEY, content TEXT NOT NULL, created_at INTEGER NOT NULL)",
    )
    .map_err(db)?;
    let mut insert = conn
        .prepare("INSERT INTO concepts (id, content, created_at) VALUES (?1, ?2, ?3)")
        .map_err(db)?;
    let start = Instant::now();
    let (mut commits, mut i) = (0u64, 0u64);
    while start.elapsed() < secs {
        // One row outside a transaction is its own commit; more need an explicit one.
        if rows_per_commit > 1 {
            conn.execute_batch("BEGIN").map_err(db)?;
        }
        for _ in 0..rows_per_commit {
            i += 1;
            let content = format!("finding {i}: null check missing in handler {}", i % 37);
            insert
                .execute(rusqlite::params![
                    format!("concept_{i:016x}"),
                    content,
                    i as i64
                ])
                .map_err(db)?;
        }
        if rows_per_commit > 1 {
            conn.execute_batch("COMMIT").map_err(db)?;
        }
        commits += 1;
    }
    Ok(RawRate {
        rows_per_commit,
        commits,
        elapsed: start.elapsed(),
    })
}

struct WritesRun {
    store: Store,
    clients: usize,
    ok: u64,
    window_errors: u64,
    writes_per_s: f64,
    p50: Option<f64>,
    p99: Option<f64>,
    /// Summed over the replicas.
    user: f64,
    sys: f64,
    /// The PostgreSQL server's user + sys CPU seconds over the window, on a pg store.
    pg_cpu: Option<f64>,
    errors: Errors,
}

/// What one client saw.
#[derive(Default)]
struct Tally {
    ok: u64,
    window_errors: u64,
    /// Latencies of the 201s counted in the window.
    latencies: Vec<Duration>,
    errors: Errors,
}

async fn ledger_writes(
    bench: &Bench,
    store: Store,
    n: usize,
    secs: Duration,
    ticks: f64,
) -> Res<WritesRun> {
    let h = bench.fresh(&format!("writes-{}-{n}", store.name()))?;
    let ledgers = Ledgers::start(bench, &h, store, &[]).await?;
    // A cell's key (read,write), not the first-start admin key.
    let mut args = vec!["ledger", "key", "create"];
    args.extend(ledgers.store_args.iter().map(String::as_str));
    args.extend_from_slice(&["--org", "default", "--scopes", "read,write", "--json"]);
    let created = step(h.cmd(BIN, &args), "ledger key create").await?;
    let key: serde_json::Value =
        serde_json::from_str(&created).map_err(|e| format!("key create output: {e}"))?;
    let key = key["key"]
        .as_str()
        .ok_or("key create printed no key")?
        .to_string();
    let pids = ledgers
        .replicas
        .iter()
        .map(|l| l.pid().map(|p| p.to_string()))
        .collect::<Res<Vec<_>>>()?;
    let server = match store {
        Store::Sqlite => None,
        Store::Pg { .. } => Some(bench.cluster()?),
    };

    // One keep-alive connection per task: every task is one cell with its own connection, so
    // exactly N requests are in flight on N sockets. Opened before the clock starts. With
    // replicas, the writers alternate between them.
    let addrs: Vec<String> = ledgers
        .urls()
        .iter()
        .map(|u| u.trim_start_matches("http://").to_string())
        .collect();
    let mut clients = Vec::with_capacity(n);
    for c in 0..n {
        clients.push(Conn::open(&addrs[c % addrs.len()]).await?);
    }
    let start = Instant::now();
    let counting = start + WARMUP;
    let end = counting + secs;
    let auth = format!("ApiKey {key}");
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(c, client)| tokio::spawn(writer(c, client, auth.clone(), counting, end)))
        .collect();

    // The counted window is [counting, end]: a write counts when its answer arrives in it, so
    // the rate is what the ledger completed in the window, the same window the CPU is read over.
    sleep_until(counting.into()).await;
    let (u0, s0) = cpu_sum(&pids, ticks)?;
    let pg0 = server.map(|c| server_cpu(c, ticks));
    sleep_until(end.into()).await;
    let (u1, s1) = cpu_sum(&pids, ticks)?;
    let pg1 = server.map(|c| server_cpu(c, ticks));

    let mut total = Tally::default();
    let drain = tokio::time::Instant::from(end) + REQUEST_LIMIT + Duration::from_secs(5);
    for t in tasks {
        // Each writer stops at `end` and its last request is bounded by REQUEST_LIMIT; this is
        // the bound should one still hang.
        let abort = t.abort_handle();
        match tokio::time::timeout_at(drain, t).await {
            Ok(Ok(tally)) => {
                total.ok += tally.ok;
                total.window_errors += tally.window_errors;
                total.latencies.extend(tally.latencies);
                total.errors.merge(tally.errors);
            }
            Ok(Err(e)) => total.errors.add(format!("writer task failed: {e}")),
            Err(_) => {
                abort.abort();
                total.errors.add("writer did not stop in time".into());
            }
        }
    }
    drop(ledgers);
    total.latencies.sort_unstable();
    // A server process that started in the window counts whole; one that ended in it is lost
    // (the ledgers' connections live as long as the run, so these are rare).
    let pg_cpu = pg0.zip(pg1).map(|(before, after)| {
        after
            .iter()
            .map(|(pid, t)| t - before.get(pid).copied().unwrap_or(0.0))
            .sum()
    });
    Ok(WritesRun {
        store,
        clients: n,
        ok: total.ok,
        window_errors: total.window_errors,
        writes_per_s: total.ok as f64 / secs.as_secs_f64(),
        p50: quantile_ms(&total.latencies, 0.50),
        p99: quantile_ms(&total.latencies, 0.99),
        user: u1 - u0,
        sys: s1 - s0,
        pg_cpu,
        errors: total.errors,
    })
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

/// One keep-alive HTTP/1.1 connection, spoken by hand. The load generator shares the two cores
/// with the ledger it measures, so it should cost as little as it can: a general client's
/// machinery per request (pools, header maps, timers) would be measured as if it were the
/// ledger's. Enough of HTTP/1.1 for the ledger's answers: a status line, headers, and a body
/// of `Content-Length` bytes.
struct Conn {
    stream: BufReader<tokio::net::TcpStream>,
    host: String,
}

impl Conn {
    async fn open(addr: &str) -> Res<Conn> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            stream: BufReader::new(stream),
            host: addr.to_string(),
        })
    }

    /// Posts `body` to `/resolve`; the status and the body of the answer.
    async fn resolve(&mut self, auth: &str, body: &str) -> Res<(u16, Vec<u8>)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let request = format!(
            "POST /resolve HTTP/1.1\r\nHost: {}\r\nAuthorization: {auth}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        let io = async {
            self.stream.get_mut().write_all(request.as_bytes()).await?;
            let mut line = String::new();
            self.stream.read_line(&mut line).await?;
            let status: u16 = line
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| std::io::Error::other(format!("status line {line:?}")))?;
            let mut length = 0usize;
            loop {
                line.clear();
                if self.stream.read_line(&mut line).await? == 0 {
                    return Err(std::io::Error::other("the connection closed mid-answer"));
                }
                let header = line.trim_end();
                if header.is_empty() {
                    break;
                }
                if let Some((name, value)) = header.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().map_err(std::io::Error::other)?;
                }
            }
            let mut answer = vec![0; length.min(1 << 20)];
            self.stream.read_exact(&mut answer).await?;
            Ok((status, answer))
        };
        match timeout(REQUEST_LIMIT, io).await {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(e)) => Err(format!("request: {e}")),
            Err(_) => Err(format!("no answer within {REQUEST_LIMIT:?}")),
        }
    }
}

/// One connection posting `concept_create_write` back to back until `end`.
async fn writer(c: usize, mut conn: Conn, auth: String, counting: Instant, end: Instant) -> Tally {
    let mut t = Tally::default();
    let mut i = 0u64;
    while Instant::now() < end {
        i += 1;
        // Distinct content per write, shaped like a finding the cells record.
        let body = serde_json::json!({ "pointer": {
            "type": "concept_create_write",
            "conceptData": {
                "content": format!("finding {c}-{i}: null check missing in handler {}", i % 37),
                "summary": format!("[HIGH][bug] h{c}_{i}.py: null check"),
                "shape": "code_finding",
                "source_type": "metabob_annotation",
            }
        }});
        let sent = Instant::now();
        let outcome = match conn.resolve(&auth, &body.to_string()).await {
            Ok((201, _)) => Ok(()),
            Ok((status, b)) => Err(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&b[..b.len().min(160)])
            )),
            Err(e) => Err(e),
        };
        let done = Instant::now();
        let in_window = done >= counting && done <= end;
        match outcome {
            Ok(()) if in_window => {
                t.ok += 1;
                t.latencies.push(done - sent);
            }
            Ok(()) => {}
            Err(e) => {
                if in_window {
                    t.window_errors += 1;
                }
                t.errors.add(e);
                // A failed connection is not reused: a fresh one, after a pause so that a
                // refused connection cannot make this spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
                match Conn::open(&conn.host).await {
                    Ok(fresh) => conn = fresh,
                    Err(e) => t.errors.add(e),
                }
            }
        }
    }
    t
}

// ---------------------------------------------------------------------------------------------
// race

async fn race(bench: &Bench, opts: &Opts, deadline: Instant) -> Res<()> {
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
async fn make_origin(bench: &Bench) -> Res<String> {
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
            h.cmd(
                BIN,
                &[
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
                ],
            ),
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
        let cmd = h.cmd(
            BIN,
            &[
                "task",
                "pull",
                "--origin",
                origin,
                "--task-dir",
                &task_dir,
                "--work-dir",
                &work_dir,
                "--json",
            ],
        );
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
        "{lead}| path | cells | tasks | closed | handed out twice | left open | time to last close s | tasks settled/s | lost claims | try later (exit 4) | pull p50 ms | pull p99 ms | errors |"
    );
    println!("{lead_rule}|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut notes = Vec::new();
    for &path in &opts.paths {
        for n in opts.cells_or(&[1, 8, 32, 128, 1000]) {
            // Stores inside: the stores of one size run back to back, so a disturbance on the
            // shared machine lands on neighbours that are compared.
            for &store in &opts.stores {
                let tasks = (n * TASKS_PER_CELL).max(MIN_SIM_TASKS);
                let label = if show_store {
                    format!("{} {} with {n} cells", store.name(), path.as_str())
                } else {
                    format!("{} with {n} cells", path.as_str())
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
                let mut r = sim::simulate(&h, &endpoints, n, tasks, run_deadline).await?;
                drop(ledgers);
                r.pull_times.sort();
                let errors: usize = r.errors.values().sum();
                let lead = if show_store {
                    format!("| {} ", store.name())
                } else {
                    String::new()
                };
                println!(
                    "{lead}| {} | {n} | {tasks} | {} | {} | {} | {:.2} | {:.1} | {} | {} | {} | {} | {errors} |",
                    path.as_str(),
                    r.closed,
                    r.doubles,
                    r.left_open,
                    r.secs,
                    if r.secs > 0.0 {
                        r.closed as f64 / r.secs
                    } else {
                        0.0
                    },
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
    Ok(())
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
            bin: PathBuf::from(BIN),
            repo: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            root,
            vars: h.vars.clone(),
            store: store_args,
            replicas,
            cells,
            tasks: opts.tasks,
            chaos_for: Duration::from_secs_f64(opts.seconds),
            settle_for: Duration::from_secs(300),
            seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(23, |d| d.as_secs()),
        };
        eprintln!(
            "fleet: soak, {} store, {cells} cells, {:.0} s of chaos (seed {})",
            store.name(),
            opts.seconds,
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
