//! The chaos soak (SPEC.md §The chaos soak): a standing fleet of real cells (the shipped
//! entrypoint, `metabob-mcp` and git over `git daemon`, no container) against real `ledger serve`
//! processes, while a chaos thread kills and restarts the ledger, kills cells mid-task, pauses
//! them, passes their claims to others, and injects poison tasks and rows at the row bound. A
//! writer keeps acknowledged writes flowing. At the end it checks what must always hold. The
//! test suite runs it for a minute (`tests/soak.rs`); `benches/fleet.rs soak` for ten.
//!
//! Self-contained (std, serde_json and the library), so the bench includes it by path.
mod check;
mod fleet;
mod ledger;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use check::check;
use fleet::{Fleet, Replica, Rng, free_port, signal};
use ledger::{group, post};

type Res<T> = Result<T, String>;

/// What one soak runs.
pub struct Plan {
    /// The `metabob-mcp` binary.
    pub bin: PathBuf,
    /// The repository's root: the entrypoint and the sample harness are read from it.
    pub repo: PathBuf,
    /// An empty directory for everything the soak makes.
    pub root: PathBuf,
    /// The environment every process gets (PATH, HOME, git's config).
    pub vars: Vec<(String, String)>,
    /// `ledger serve`'s store arguments: `--data DIR` or `--store URL`.
    pub store: Vec<String>,
    /// Ledger processes over the store (more than one only on PostgreSQL).
    pub replicas: usize,
    pub cells: usize,
    /// Normal tasks recorded before the chaos starts; one more joins at every chaos step.
    pub tasks: usize,
    pub chaos_for: Duration,
    /// How long the fleet may take to finish once the chaos stops.
    pub settle_for: Duration,
    pub seed: u64,
}

/// The chaos kinds, each done at least once.
pub const KINDS: [&str; 6] = [
    "kill -9 a ledger",
    "kill a cell mid-task",
    "pause a cell",
    "pass a claim to others",
    "poison task",
    "row at the bound",
];

/// What a soak saw; [`Report::violations`] is what must be empty.
#[derive(Debug, Default)]
pub struct Report {
    pub secs: f64,
    pub tasks: usize,
    pub closed: usize,
    pub left_open: Vec<String>,
    /// Tasks a cell set to work on while another cell held them.
    pub doubles: Vec<String>,
    /// Tasks with more than one `fixed` verdict: reported, not a violation. A claim that
    /// passes on after its holder pushed (a pause between push and close) lets the next holder
    /// land a fix too, and two closes that race may both write (SPEC.md §The chaos soak).
    pub closed_twice: Vec<String>,
    /// Fixes pushed by a cell that held no claim on the task then.
    pub unfenced: Vec<String>,
    pub acked: usize,
    pub lost: Vec<String>,
    pub poison: usize,
    pub parked: usize,
    pub unparked_poison: Vec<String>,
    /// Tasks still claimed once every cell was stopped (each stop releases its claim).
    pub held_at_end: Vec<String>,
    pub salvaged: usize,
    pub events: BTreeMap<&'static str, usize>,
}

impl Report {
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        let mut check = |what: &str, ids: &[String]| {
            if !ids.is_empty() {
                v.push(format!("{what}: {}", ids.join(", ")));
            }
        };
        check("tasks handed to two cells at once", &self.doubles);
        check("fixes pushed without the claim", &self.unfenced);
        check("acknowledged writes lost", &self.lost);
        check("tasks never closed", &self.left_open);
        check("poison tasks not parked", &self.unparked_poison);
        check("claims left held", &self.held_at_end);
        v
    }

    pub const TABLE_HEAD: &str = "| store | seconds | cells | tasks | closed | handed to two | closed twice | pushed without the claim | writes acked | lost | poison | parked | salvaged | ledger kills | cell kills | pauses | claims passed | rows at the bound |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|";

    pub fn table_row(&self, store: &str, cells: usize) -> String {
        let e = |k: &str| self.events.get(k).copied().unwrap_or(0);
        format!(
            "| {store} | {:.0} | {cells} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            self.secs,
            self.tasks,
            self.closed,
            self.doubles.len(),
            self.closed_twice.len(),
            self.unfenced.len(),
            self.acked,
            self.lost.len(),
            self.poison,
            self.parked,
            self.salvaged,
            e(KINDS[0]),
            e(KINDS[1]),
            e(KINDS[2]),
            e(KINDS[3]),
            e(KINDS[5]),
        )
    }
}

const HARNESS: &str = r##"set -eu
# The soak's harness: a short, varying amount of work, then a fix, with the cell's name in the
# subject so the checks know who landed it.
task_id=$(grep -o '"task_id": "[^"]*"' "$TASK_DIR/task.json" | head -n 1 | sed 's/.*: "\(.*\)"$/\1/')
echo "$(date +%s%3N) $task_id $VESSEL_ID" >>"$SOAK_STARTS"
sleep "$(awk -v s="$$" 'BEGIN { srand(s); printf "%.1f", 1 + rand() * 4 }')"
cd "$WORK_DIR"
# A file of the task's own: every task names a.py, and fixes that all append to one file
# conflict whenever two land together, which parks a task once two cells hit it (SPEC.md §The
# loop). Conflicts have tests of their own; the soak is about claims, fences and lost writes.
file="fixes/$task_id.py"
mkdir -p fixes
echo "# fixed for $task_id by $VESSEL_ID" >>"$file"
git add -- "$file"
git commit -q -m "Fix $task_id by $VESSEL_ID" -m "Fixes-Finding: $task_id"
"##;

fn git(vars: &[(String, String)], dir: &Path, args: &[&str]) -> Res<String> {
    let out = Command::new("git")
        .env_clear()
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .current_dir(dir)
        .args(args)
        .output()
        .map_err(|e| format!("git {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs the soak and checks it (anchor: run_soak).
pub fn run(plan: &Plan) -> Res<Report> {
    let root = &plan.root;
    std::fs::write(root.join("harness.sh"), HARNESS).map_err(|e| e.to_string())?;
    // The origin: a bare repository whose pushes a hook logs with the time they landed.
    let seed = root.join("seed");
    std::fs::create_dir_all(&seed).map_err(|e| e.to_string())?;
    git(&plan.vars, &seed, &["init", "-q", "-b", "main"])?;
    std::fs::write(seed.join("a.py"), "x = 1\n").map_err(|e| e.to_string())?;
    git(&plan.vars, &seed, &["add", "-A"])?;
    git(&plan.vars, &seed, &["commit", "-q", "-m", "initial"])?;
    let base = root.join("origins");
    let bare = base.join("app.git");
    std::fs::create_dir_all(&base).map_err(|e| e.to_string())?;
    git(
        &plan.vars,
        root,
        &[
            "clone",
            "-q",
            "--bare",
            &seed.display().to_string(),
            &bare.display().to_string(),
        ],
    )?;
    let pushlog = root.join("pushes.log");
    let hook = bare.join("hooks/post-receive");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\nwhile read old new ref; do echo \"$(date +%s%3N) $old $new $ref\" >>{}; done\n",
            pushlog.display()
        ),
    )
    .map_err(|e| e.to_string())?;
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    let exec_path = git(&plan.vars, root, &["--exec-path"])?;
    let git_port = free_port();
    let mut daemon = Command::new(Path::new(exec_path.trim()).join("git-daemon"))
        .env_clear()
        .envs(plan.vars.iter().map(|(k, v)| (k, v)))
        .args([
            "--reuseaddr",
            "--export-all",
            "--enable=receive-pack",
            "--listen=127.0.0.1",
        ])
        .arg(format!("--port={git_port}"))
        .arg(format!("--base-path={}", base.display()))
        .arg(&base)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("git daemon: {e}"))?;

    let fleet = Fleet {
        plan,
        key: String::new(),
        origin: format!("git://127.0.0.1:{git_port}/app.git"),
        bare,
        repository: String::new(),
        replicas: Mutex::new(Vec::new()),
        cells: Mutex::new(Vec::new()),
        normal: Mutex::new(Vec::new()),
        poison: Mutex::new(Vec::new()),
    };
    let result = soak(fleet);
    let _ = daemon.kill();
    let _ = daemon.wait();
    result
}

fn soak(mut fleet: Fleet<'_>) -> Res<Report> {
    let plan = fleet.plan;
    for _ in 0..plan.replicas {
        let port = free_port();
        let child = fleet.start_replica(port)?;
        fleet
            .replicas
            .lock()
            .map_err(|_| "replicas")?
            .push(Replica {
                port,
                child: Some(child),
            });
    }
    // The key every process uses, made on the store the first replica set up.
    let mut key_args = vec!["ledger", "key", "create"];
    key_args.extend(plan.store.iter().map(String::as_str));
    key_args.extend(["--org", "default", "--scopes", "read,write", "--json"]);
    let out = fleet
        .cmd(&plan.bin)
        .args(&key_args)
        .output()
        .map_err(|e| format!("key create: {e}"))?;
    let created: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("key create: {e}: {}", String::from_utf8_lossy(&out.stderr)))?;
    fleet.key = created["key"]
        .as_str()
        .ok_or("key create named no key")?
        .to_string();
    let started = Instant::now();
    let outcome = drive(&mut fleet);
    // Whatever happened, nothing the soak started outlives it.
    for n in 0..plan.cells {
        fleet.kill_cell(n);
    }
    for r in 0..plan.replicas {
        fleet.kill_replica(r);
    }
    let mut report = outcome?;
    report.secs = started.elapsed().as_secs_f64();
    Ok(report)
}

fn drive(fleet: &mut Fleet<'_>) -> Res<Report> {
    let plan = fleet.plan;
    let mut rng = Rng(plan.seed | 1);
    let first = fleet.record("", 0)?;
    fleet.normal.lock().map_err(|_| "normal")?.push(first);
    let out = fleet.mb(&["task", "list", "--origin", &fleet.origin, "--json"], 0)?;
    let board: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
    fleet.repository = board["repositories"][0]["repository"]
        .as_str()
        .ok_or("the board names no repository")?
        .to_string();
    for _ in 1..plan.tasks {
        let id = fleet.record("", 0)?;
        fleet.normal.lock().map_err(|_| "normal")?.push(id);
    }
    {
        let mut cells = Vec::with_capacity(plan.cells);
        for n in 0..plan.cells {
            cells.push(Some(fleet.start_cell(n)?));
        }
        *fleet.cells.lock().map_err(|_| "cells")? = cells;
    }
    let fleet = &*fleet;

    // Acknowledged writes, all through the chaos.
    let stop = AtomicBool::new(false);
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut events: BTreeMap<&'static str, usize> = BTreeMap::new();
    let chaos = std::thread::scope(|scope| -> Res<()> {
        scope.spawn(|| {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let replica = (i as usize) % plan.replicas;
                let pointer = json!({"type": "concept_create_write", "conceptData": {
                    "shape": "soak_write", "source_type": "memo", "content": format!("soak write {i}")}});
                if let Ok((201, v)) = post(&fleet.url(replica), &fleet.key, &pointer)
                    && let Some(id) = v["concept"]["id"].as_str()
                {
                    acked.lock().unwrap_or_else(|p| p.into_inner()).push(id.to_string());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let result = chaos_loop(fleet, &mut rng, &mut events);
        stop.store(true, Ordering::SeqCst);
        result
    });
    chaos?;

    // Settle: every normal task closed and every poison task parked, or the bound.
    let settle_end = Instant::now() + plan.settle_for;
    let (normal, poison) = (
        fleet.normal.lock().map_err(|_| "normal")?.clone(),
        fleet.poison.lock().map_err(|_| "poison")?.clone(),
    );
    loop {
        let board = fleet.board()?;
        let (closed, parked) = (group(&board, "closed"), group(&board, "parked"));
        if normal.iter().all(|t| closed.contains(t)) && poison.iter().all(|t| parked.contains(t)) {
            break;
        }
        if Instant::now() >= settle_end {
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    // Stop every cell as `docker stop` would: each gives back what it holds.
    for n in 0..plan.cells {
        let pid = fleet.cells.lock().map_err(|_| "cells")?[n]
            .as_ref()
            .map(Child::id);
        if let Some(pid) = pid {
            signal("-TERM", &pid.to_string());
        }
    }
    let stop_by = Instant::now() + Duration::from_secs(60);
    for n in 0..plan.cells {
        let mut cells = fleet.cells.lock().map_err(|_| "cells")?;
        if let Some(c) = cells[n].as_mut() {
            while Instant::now() < stop_by && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    check(
        fleet,
        &normal,
        &poison,
        acked.lock().map_err(|_| "acked")?.clone(),
        events,
    )
}

fn chaos_loop(
    fleet: &Fleet<'_>,
    rng: &mut Rng,
    events: &mut BTreeMap<&'static str, usize>,
) -> Res<()> {
    let plan = fleet.plan;
    let end = Instant::now() + plan.chaos_for;
    let mut step = 0usize;
    let mut big_rows = 0u64;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1500 + rng.below(2500)));
        // The first round does every kind once, then they come at random.
        let kind = if step < KINDS.len() {
            KINDS[step]
        } else {
            KINDS[rng.below(KINDS.len() as u64) as usize]
        };
        step += 1;
        // The fleet keeps getting work, so there is work to disturb.
        for _ in 0..2 {
            let id = fleet.record("", step % plan.replicas)?;
            fleet.normal.lock().map_err(|_| "normal")?.push(id);
        }
        let cell = rng.below(plan.cells as u64) as usize;
        let done = match kind {
            "kill -9 a ledger" => {
                let r = rng.below(plan.replicas as u64) as usize;
                fleet.kill_replica(r);
                std::thread::sleep(Duration::from_millis(1000 + rng.below(3000)));
                fleet.restart_replica(r)?;
                true
            }
            "kill a cell mid-task" => {
                fleet.kill_cell(cell);
                let child = fleet.start_cell(cell)?;
                fleet.cells.lock().map_err(|_| "cells")?[cell] = Some(child);
                true
            }
            "pause a cell" => {
                let paused = fleet.signal_cell("-STOP", cell);
                std::thread::sleep(Duration::from_millis(2000 + rng.below(4000)));
                fleet.signal_cell("-CONT", cell);
                paused
            }
            "pass a claim to others" => fleet.pass_claim(rng),
            "poison task" => {
                let n = fleet.poison.lock().map(|p| p.len()).unwrap_or(0);
                let id = fleet.record(&format!("ref: no-such-branch-{n}"), 0)?;
                fleet.poison.lock().map_err(|_| "poison")?.push(id);
                true
            }
            _ => {
                // Bounded, so a ten-minute soak measures the fleet rather than its recall.
                big_rows += 1;
                big_rows <= 20 && fleet.big_row(big_rows, 0).is_ok()
            }
        };
        if done {
            *events.entry(kind).or_default() += 1;
        }
    }
    Ok(())
}
