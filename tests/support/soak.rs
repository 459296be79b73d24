//! The chaos soak (SPEC.md §The chaos soak): a standing fleet of real cells (the shipped
//! entrypoint, `metabob-mcp` and git over `git daemon`, no container) against real `ledger serve`
//! processes, while a chaos thread kills and restarts the ledger, kills cells mid-task, pauses
//! them, passes their claims to others, and injects poison tasks and rows at the row bound. A
//! writer keeps acknowledged writes flowing. At the end it checks what must always hold. The
//! test suite runs it for a minute (`tests/soak.rs`); `benches/fleet.rs soak` for ten.
//!
//! Self-contained (std, serde_json and the library), so the bench includes it by path.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

type Res<T> = Result<T, String>;

/// How long before a push landed its cell's renewal as holder counts as the fence for it: the
/// fetch, rebase and push after the fence take seconds, more on a loaded machine.
const FENCE_WINDOW_MS: i64 = 15_000;

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

/// A small deterministic generator: the chaos of one seed is the same chaos.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

fn signal(sig: &str, target: &str) {
    let _ = Command::new("kill")
        .args([sig, "--", target])
        .stderr(Stdio::null())
        .status();
}

/// One `ledger serve` on a fixed port, so a restart is found where the cells look.
struct Replica {
    port: u16,
    child: Option<Child>,
}

/// Everything the soak runs, shared by the chaos thread and the checks.
struct Fleet<'p> {
    plan: &'p Plan,
    key: String,
    origin: String,
    bare: PathBuf,
    repository: String,
    replicas: Mutex<Vec<Replica>>,
    cells: Mutex<Vec<Option<Child>>>,
    normal: Mutex<Vec<String>>,
    poison: Mutex<Vec<String>>,
}

impl Fleet<'_> {
    fn cmd(&self, program: &Path) -> Command {
        let mut c = Command::new(program);
        c.env_clear()
            .envs(self.plan.vars.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.plan.root)
            .stdin(Stdio::null());
        c
    }

    fn url(&self, replica: usize) -> String {
        let port = self.replicas.lock().map(|r| r[replica].port).unwrap_or(0);
        format!("http://127.0.0.1:{port}")
    }

    fn mb(&self, args: &[&str], replica: usize) -> Res<String> {
        let out = self
            .cmd(&self.plan.bin)
            .env("METABOB_API_KEY", &self.key)
            .env("DISCOVERY_ENDPOINT", self.url(replica))
            .args(args)
            .output()
            .map_err(|e| format!("metabob-mcp {args:?}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "metabob-mcp {args:?}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn start_replica(&self, port: u16) -> Res<Child> {
        let mut args: Vec<String> = vec!["ledger".into(), "serve".into()];
        args.extend(self.plan.store.iter().cloned());
        args.extend(["--listen".into(), format!("127.0.0.1:{port}")]);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.plan.root.join(format!("ledger-{port}.log")))
            .map_err(|e| format!("ledger log: {e}"))?;
        let mut child = self
            .cmd(&self.plan.bin)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("ledger serve: {e}"))?;
        let stdout = child.stdout.take().ok_or("ledger serve: no stdout")?;
        let mut lines = BufReader::new(stdout);
        let mut first = String::new();
        lines
            .read_line(&mut first)
            .map_err(|e| format!("ledger serve: {e}"))?;
        if !first.contains("listening on") {
            let _ = child.kill();
            return Err(format!("ledger serve on {port} did not start: {first:?}"));
        }
        std::thread::spawn(move || for _ in lines.lines() {});
        Ok(child)
    }

    fn kill_replica(&self, r: usize) {
        let mut replicas = self.replicas.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut c) = replicas[r].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn restart_replica(&self, r: usize) -> Res<()> {
        let port = self.replicas.lock().map(|rs| rs[r].port).unwrap_or(0);
        let child = self.start_replica(port)?;
        self.replicas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(r)
            .ok_or("no such replica")?
            .child = Some(child);
        Ok(())
    }

    fn cell_dir(&self, n: usize) -> PathBuf {
        self.plan.root.join(format!("cells/{n}"))
    }

    fn start_cell(&self, n: usize) -> Res<Child> {
        let dir = self.cell_dir(n);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("log"))
            .map_err(|e| format!("cell log: {e}"))?;
        let err = log.try_clone().map_err(|e| format!("cell log: {e}"))?;
        let harness = self.plan.root.join("harness.sh");
        self.cmd(Path::new("sh"))
            .arg(self.plan.repo.join("entrypoint/cell-entrypoint"))
            .envs([
                ("ORIGIN", self.origin.clone()),
                ("HARNESS", format!("sh {}", harness.display())),
                ("TASK_DIR", dir.join("task").display().to_string()),
                ("WORK_DIR", dir.join("work").display().to_string()),
                ("SALVAGE_DIR", dir.join("salvage").display().to_string()),
                ("VESSEL_ID", format!("cell-{n}")),
                ("METABOB_BIN", self.plan.bin.display().to_string()),
                ("METABOB_API_KEY", self.key.clone()),
                ("DISCOVERY_ENDPOINT", self.url(n % self.plan.replicas)),
                ("ON_EMPTY", "wait".into()),
                ("IDLE_POLL", "1".into()),
                ("RETRY_MAX", "2".into()),
                ("CLAIM_MINUTES", "2".into()),
                ("RENEW_EVERY", "4".into()),
                ("LEDGER_WAIT", "300".into()),
                // Failures here are the chaos's, not the cell's: it must keep working.
                ("FAIL_MAX", "1000".into()),
                (
                    "SOAK_STARTS",
                    self.plan.root.join("starts.log").display().to_string(),
                ),
            ])
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cell {n}: {e}"))
    }

    /// Every process of cell `n`, its harness's own session included, as a container holds
    /// them all: found by the environment the soak gave the cell (`/proc/*/environ`).
    fn cell_pids(&self, n: usize) -> Vec<String> {
        let mine = [
            format!("VESSEL_ID=cell-{n}"),
            format!(
                "SOAK_STARTS={}",
                self.plan.root.join("starts.log").display()
            ),
        ];
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        procs
            .flatten()
            .filter_map(|p| {
                let pid = p.file_name().to_str()?.parse::<u32>().ok()?;
                let environ = std::fs::read(p.path().join("environ")).ok()?;
                let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
                mine.iter()
                    .all(|m| vars.contains(&m.as_bytes()))
                    .then(|| pid.to_string())
            })
            .collect()
    }

    /// Signals every process of cell `n` (`docker kill`, `docker pause` and `unpause` reach
    /// them all alike).
    fn signal_cell(&self, sig: &str, n: usize) -> bool {
        let pids = self.cell_pids(n);
        for pid in &pids {
            signal(sig, pid);
        }
        !pids.is_empty()
    }

    fn kill_cell(&self, n: usize) {
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut c) = cells[n].take() {
            signal("-KILL", &format!("-{}", c.id()));
            let _ = c.wait();
        }
        // The harness runs in a session of its own: a killed container takes it too.
        self.signal_cell("-KILL", n);
    }

    fn record(&self, details: &str, replica: usize) -> Res<String> {
        let n = self.normal.lock().map(|v| v.len()).unwrap_or(0)
            + self.poison.lock().map(|v| v.len()).unwrap_or(0);
        let file = format!("t{n}.py");
        let summary = format!("soak task {n}");
        let out = self.mb(
            &[
                "finding",
                "record",
                "--origin",
                &self.origin,
                "--category",
                "task",
                "--severity",
                "HIGH",
                "--file",
                &file,
                "--summary",
                &summary,
                "--details",
                details,
                "--json",
            ],
            replica,
        )?;
        let v: Value = serde_json::from_str(&out).map_err(|e| format!("record: {e}"))?;
        v["finding_ids"][0]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("record named no id: {v}"))
    }

    /// One finding row of the repository at the row bound.
    fn big_row(&self, i: u64, replica: usize) -> Res<()> {
        use metabob_wire::row::{content_cap, summary_cap};
        let head = format!(
            "repo: {}\nfiles: a.py\nseverity: LOW\ncategory: style\nstatus: open\nfinding_ids: agf_{:016x}\n\n",
            self.repository,
            0xb16_0000 + i
        );
        let content = format!("{head}{}", "x".repeat(content_cap() - head.len()));
        let summary = format!("[LOW][style] app: {}", "y".repeat(summary_cap() - 20));
        let pointer = json!({"type": "concept_create_write", "conceptData": {"shape": "code_finding",
            "source_type": "metabob_annotation", "summary": summary, "content": content}});
        match post(&self.url(replica), &self.key, &pointer)? {
            (201, _) => Ok(()),
            (status, v) => Err(format!("a row at the bound: {status} {v}")),
        }
    }

    /// Gives a working cell's claim back as that cell, as a cell paused past its claim would
    /// find it: another may take the task, and the cell must then neither push nor close. Waits
    /// a few seconds for some cell to be at work; `false` when none was.
    fn pass_claim(&self, rng: &mut Rng) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            let working: Vec<usize> = (0..self.plan.cells)
                .filter(|n| self.cell_dir(*n).join("task/task.json").exists())
                .collect();
            if !working.is_empty() {
                let n = working[rng.below(working.len() as u64) as usize];
                let dir = self.cell_dir(n).join("task").display().to_string();
                let why = "soak: the claim passes on";
                let args = ["task", "release", "--task-dir", &dir, "--reason", why];
                if self.mb(&args, n % self.plan.replicas).is_ok() {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    fn board(&self) -> Res<Value> {
        let out = self.mb(&["task", "list", "--origin", &self.origin, "--json"], 0)?;
        serde_json::from_str(&out).map_err(|e| format!("task list: {e}"))
    }
}

/// The board's task ids in `group`.
fn group(board: &Value, name: &str) -> BTreeSet<String> {
    board["repositories"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r[name].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["task_id"].as_str().map(str::to_owned))
        .collect()
}

/// One request with `Connection: close`: the status and the JSON body.
fn post(url: &str, key: &str, pointer: &Value) -> Res<(u16, Value)> {
    let host = url.trim_start_matches("http://");
    let addr = host
        .parse::<std::net::SocketAddr>()
        .map_err(|e| format!("{host}: {e}"))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect {host}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    let body = json!({ "pointer": pointer }).to_string();
    write!(
        s,
        "POST /resolve HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Authorization: ApiKey {key}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| format!("send: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| format!("read: {e}"))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no header end")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("no status")?;
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = unchunk(&body);
    }
    Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

fn unchunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&raw[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 || raw.len() < eol + 2 + size {
            break;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[(eol + 4 + size).min(raw.len())..];
    }
    out
}

/// Every verdict and claim row of the org, through search pages.
fn verdict_rows(url: &str, key: &str) -> Res<Vec<metabob_wire::verdict::Verdict>> {
    let mut rows = Vec::new();
    let mut offset = 0u64;
    loop {
        let pointer = json!({"type": "conceptSearch", "shape": "finding_verdict", "limit": 1000, "offset": offset});
        let (status, v) = post(url, key, &pointer)?;
        if status != 200 {
            return Err(format!("reading verdicts: {status} {v}"));
        }
        let page = v["concepts"].as_array().cloned().unwrap_or_default();
        let n = page.len() as u64;
        rows.extend(
            page.iter()
                .filter_map(|c| metabob_wire::verdict::Verdict::read(c).ok().flatten()),
        );
        offset = match v["next_offset"].as_u64() {
            Some(next) => next,
            None if n == 1000 => offset + n,
            None => return Ok(rows),
        };
    }
}

const HARNESS: &str = r##"set -eu
# The soak's harness: a short, varying amount of work, then the sample fix, with the cell's name
# in the subject so the checks know who landed it.
task_id=$(grep -o '"task_id": "[^"]*"' "$TASK_DIR/task.json" | head -n 1 | sed 's/.*: "\(.*\)"$/\1/')
echo "$(date +%s%3N) $task_id $VESSEL_ID" >>"$SOAK_STARTS"
sleep "$(awk -v s="$$" 'BEGIN { srand(s); printf "%.1f", 1 + rand() * 4 }')"
cd "$WORK_DIR"
file=$(awk '/"files": \[/ { getline; print; exit }' "$TASK_DIR/task.json" | sed 's/^[[:space:]]*"\(.*\)",\{0,1\}$/\1/')
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

/// The landed fixes: (commit, task, cell) for each `Fixes-Finding:` commit on main.
fn landed(fleet: &Fleet<'_>) -> Res<Vec<(String, String, String)>> {
    let log = git(
        &fleet.plan.vars,
        &fleet.bare,
        &["log", "--format=%H %s", "main"],
    )?;
    Ok(log
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (sha, fix, task, by, cell) =
                (w.next()?, w.next()?, w.next()?, w.next()?, w.next()?);
            (fix == "Fix" && by == "by")
                .then(|| (sha.to_string(), task.to_string(), cell.to_string()))
        })
        .collect())
}

/// When each commit reached main: the push that brought it, from the hook's log.
fn push_times(fleet: &Fleet<'_>) -> Res<BTreeMap<String, i64>> {
    let log = std::fs::read_to_string(fleet.plan.root.join("pushes.log")).unwrap_or_default();
    let mut at = BTreeMap::new();
    for line in log.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let [ms, old, new, "refs/heads/main"] = w[..] else {
            continue;
        };
        let Ok(ms) = ms.parse::<i64>() else { continue };
        let range = if old.bytes().all(|b| b == b'0') {
            new.to_string()
        } else {
            format!("{old}..{new}")
        };
        for sha in git(&fleet.plan.vars, &fleet.bare, &["rev-list", &range])?.lines() {
            at.entry(sha.to_string()).or_insert(ms);
        }
    }
    Ok(at)
}

fn check(
    fleet: &Fleet<'_>,
    normal: &[String],
    poison: &[String],
    acked: Vec<String>,
    events: BTreeMap<&'static str, usize>,
) -> Res<Report> {
    use metabob_wire::claims::holder;
    use metabob_wire::verdict::VerdictKind;
    let board = fleet.board()?;
    let (closed, parked, claimed) = (
        group(&board, "closed"),
        group(&board, "parked"),
        group(&board, "claimed"),
    );
    let url = fleet.url(0);
    let rows = verdict_rows(&url, &fleet.key)?;
    let rows_of = |task: &str| -> Vec<&metabob_wire::verdict::Verdict> {
        rows.iter()
            .filter(|v| v.finding_ids.iter().any(|i| i == task))
            .collect()
    };

    // Who held `task` at ledger time `t`, by the one holder rule over the rows written by then.
    let holder_at = |task: &str, t: i64| {
        let before: Vec<_> = rows_of(task)
            .into_iter()
            .filter(|v| v.created_ms <= t)
            .collect();
        holder(before, t).map(|h| h.holder)
    };
    // A cell set to work (its harness started) while another cell held the task.
    let starts = std::fs::read_to_string(fleet.plan.root.join("starts.log")).unwrap_or_default();
    let mut doubles = Vec::new();
    for line in starts.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let [at, task, cell] = w[..] else { continue };
        let Ok(at) = at.parse::<i64>() else { continue };
        if let Some(other) = holder_at(task, at).filter(|h| h != cell) {
            doubles.push(format!("{task}: {cell} started while {other} held it"));
        }
    }
    let pushed_at = push_times(fleet)?;
    let mut unfenced = Vec::new();
    for (sha, task, cell) in landed(fleet)? {
        let Some(&at) = pushed_at.get(&sha) else {
            continue;
        };
        // The cell held the claim when the push landed, or renewed it as its holder shortly
        // before: the fence renews ahead of the fetch, rebase and push, and a claim that
        // passes on inside that window is the one SPEC names (SPEC.md §The loop).
        let held = |t: i64| holder_at(&task, t).is_some_and(|h| h == cell);
        let fenced = rows_of(&task).into_iter().any(|v| {
            v.kind == metabob_wire::verdict::VerdictKind::Claimed
                && v.reviewed_by.as_deref() == Some(cell.as_str())
                && (at - FENCE_WINDOW_MS..=at).contains(&v.created_ms)
                && held(v.created_ms)
        });
        if !held(at) && !fenced {
            unfenced.push(format!("{task} by {cell} at {at}"));
        }
    }
    let mut lost = Vec::new();
    for id in &acked {
        match post(
            &url,
            &fleet.key,
            &json!({"type": "conceptGraph", "concept_id": id, "limit": 1}),
        ) {
            Ok((200, _)) => {}
            other => lost.push(format!("{id} ({other:?})")),
        }
    }
    let salvaged = (0..fleet.plan.cells)
        .map(|n| {
            std::fs::read_dir(fleet.cell_dir(n).join("salvage"))
                .map(|d| d.count())
                .unwrap_or(0)
        })
        .sum();
    Ok(Report {
        secs: 0.0,
        tasks: normal.len(),
        closed: normal.iter().filter(|t| closed.contains(*t)).count(),
        left_open: normal
            .iter()
            .filter(|t| !closed.contains(*t))
            .cloned()
            .collect(),
        doubles,
        closed_twice: normal
            .iter()
            .filter(|t| {
                rows_of(t)
                    .iter()
                    .filter(|v| v.kind == VerdictKind::Fixed)
                    .count()
                    > 1
            })
            .cloned()
            .collect(),
        unfenced,
        acked: acked.len(),
        lost,
        poison: poison.len(),
        parked: poison.iter().filter(|t| parked.contains(*t)).count(),
        unparked_poison: poison
            .iter()
            .filter(|t| !parked.contains(*t))
            .cloned()
            .collect(),
        held_at_end: claimed.into_iter().collect(),
        salvaged,
        events,
    })
}
