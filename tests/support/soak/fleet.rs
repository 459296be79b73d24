//! The fleet the soak runs: its `ledger serve` replicas and its cells, started, signalled and
//! killed as a container runtime would, and the CLI calls made as one of them.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::ledger::post;
use super::{Plan, Res};

/// A small deterministic generator: the chaos of one seed is the same chaos.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

pub(super) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

pub(super) fn signal(sig: &str, target: &str) {
    let _ = Command::new("kill")
        .args([sig, "--", target])
        .stderr(Stdio::null())
        .status();
}

/// One `ledger serve` on a fixed port, so a restart is found where the cells look.
pub(super) struct Replica {
    pub(super) port: u16,
    pub(super) child: Option<Child>,
}

/// Everything the soak runs, shared by the chaos thread and the checks.
pub(super) struct Fleet<'p> {
    pub(super) plan: &'p Plan,
    pub(super) key: String,
    pub(super) origin: String,
    pub(super) bare: PathBuf,
    pub(super) repository: String,
    pub(super) replicas: Mutex<Vec<Replica>>,
    pub(super) cells: Mutex<Vec<Option<Child>>>,
    pub(super) normal: Mutex<Vec<String>>,
    pub(super) poison: Mutex<Vec<String>>,
}

impl Fleet<'_> {
    pub(super) fn cmd(&self, program: &Path) -> Command {
        let mut c = Command::new(program);
        c.env_clear()
            .envs(self.plan.vars.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.plan.root)
            .stdin(Stdio::null());
        c
    }

    pub(super) fn url(&self, replica: usize) -> String {
        let port = self.replicas.lock().map(|r| r[replica].port).unwrap_or(0);
        format!("http://127.0.0.1:{port}")
    }

    pub(super) fn mb(&self, args: &[&str], replica: usize) -> Res<String> {
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

    pub(super) fn start_replica(&self, port: u16) -> Res<Child> {
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

    pub(super) fn kill_replica(&self, r: usize) {
        let mut replicas = self.replicas.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut c) = replicas[r].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub(super) fn restart_replica(&self, r: usize) -> Res<()> {
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

    pub(super) fn cell_dir(&self, n: usize) -> PathBuf {
        self.plan.root.join(format!("cells/{n}"))
    }

    pub(super) fn start_cell(&self, n: usize) -> Res<Child> {
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
    pub(super) fn signal_cell(&self, sig: &str, n: usize) -> bool {
        let pids = self.cell_pids(n);
        for pid in &pids {
            signal(sig, pid);
        }
        !pids.is_empty()
    }

    pub(super) fn kill_cell(&self, n: usize) {
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut c) = cells[n].take() {
            signal("-KILL", &format!("-{}", c.id()));
            let _ = c.wait();
        }
        // The harness runs in a session of its own: a killed container takes it too.
        self.signal_cell("-KILL", n);
    }

    pub(super) fn record(&self, details: &str, replica: usize) -> Res<String> {
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
    pub(super) fn big_row(&self, i: u64, replica: usize) -> Res<()> {
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
    pub(super) fn pass_claim(&self, rng: &mut Rng) -> bool {
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

    pub(super) fn board(&self) -> Res<Value> {
        let out = self.mb(&["task", "list", "--origin", &self.origin, "--json"], 0)?;
        serde_json::from_str(&out).map_err(|e| format!("task list: {e}"))
    }
}
