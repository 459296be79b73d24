//! The bench's command line: the options every mode reads, the claim paths and the stores.

use std::path::PathBuf;
use std::time::Duration;

use super::{Res, USAGE};

pub struct Opts {
    pub clients: Vec<usize>,
    pub cells: Vec<usize>,
    /// Each mode's own default when not given (see `seconds_or`).
    pub seconds: Option<f64>,
    pub pullers: Vec<usize>,
    pub tasks: usize,
    pub paths: Vec<ClaimPath>,
    pub stores: Vec<Store>,
    pub deadline: Duration,
    pub run_deadline: Option<Duration>,
    pub dir: Option<PathBuf>,
    /// `history`: how many findings of the repository the ledger holds before the pulls.
    pub findings: Vec<usize>,
    /// Ledgers and pulls run this binary instead of this build's (a baseline build).
    pub bin: Option<PathBuf>,
    /// `fleet` and `edges`: dependency edges per task of the backlog, each a run of its own.
    pub dag: Vec<usize>,
    /// `capacity`: the claim's length, which sets the renewal period (a third of it); `None`
    /// picks one per run (see capacity.rs).
    pub claim_minutes: Option<i64>,
    /// `capacity`: a task's mean length at 60-minute claims, scaled with the claim.
    pub task_minutes: f64,
}

impl Opts {
    pub fn parse(args: &[String]) -> Res<Opts> {
        let mut o = Opts {
            clients: vec![1, 8, 32, 128],
            // Each mode's own default when not given (see `cells_or`).
            cells: Vec::new(),
            seconds: None,
            pullers: vec![1, 32],
            tasks: 50,
            paths: vec![ClaimPath::Take, ClaimPath::ReadBack],
            stores: vec![Store::Sqlite],
            deadline: Duration::from_secs(600),
            run_deadline: None,
            dir: None,
            findings: vec![0, 3000, 30_000],
            bin: None,
            dag: vec![0],
            claim_minutes: None,
            task_minutes: 10.0,
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
                "--cells" => {
                    o.cells = value
                        .split(',')
                        .map(|n| {
                            n.trim()
                                .parse()
                                .ok()
                                .filter(|n| (1..=MAX_HOLDERS).contains(n))
                        })
                        .collect::<Option<Vec<usize>>>()
                        .ok_or_else(|| bad("counts from 1 to 100000"))?
                }
                "--seconds" => {
                    o.seconds = Some(
                        value
                            .parse()
                            .ok()
                            .filter(|s: &f64| *s > 0.0 && *s <= 3600.0)
                            .ok_or_else(|| bad("seconds in (0, 3600]"))?,
                    )
                }
                "--claim-minutes" => {
                    o.claim_minutes = Some(
                        value
                            .parse()
                            .ok()
                            .filter(|m| (1..=metabob_wire::claims::MAX_CLAIM_MINUTES).contains(m))
                            .ok_or_else(|| bad("whole minutes, 1 to 240"))?,
                    )
                }
                "--task-minutes" => {
                    o.task_minutes = value
                        .parse()
                        .ok()
                        .filter(|m: &f64| *m > 0.0 && *m <= 1440.0)
                        .ok_or_else(|| bad("minutes in (0, 1440]"))?
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
                "--dag" => {
                    o.dag = value
                        .split(',')
                        .map(|n| n.trim().parse().ok().filter(|n| *n <= 16))
                        .collect::<Option<Vec<usize>>>()
                        .ok_or_else(|| bad("edges per task, 0 to 16"))?
                }
                "--dir" => o.dir = Some(PathBuf::from(value)),
                "--bin" => o.bin = Some(PathBuf::from(value)),
                "--findings" => {
                    o.findings = value
                        .split(',')
                        .map(|n| n.trim().parse().ok().filter(|n| *n <= 1_000_000))
                        .collect::<Option<Vec<usize>>>()
                        .ok_or_else(|| bad("counts from 0 to 1000000"))?
                }
                _ => return Err(format!("unknown option {flag}\n{USAGE}")),
            }
        }
        Ok(o)
    }
}

impl Opts {
    pub fn seconds_or(&self, default: f64) -> f64 {
        self.seconds.unwrap_or(default)
    }

    pub fn cells_or(&self, default: &[usize]) -> Vec<usize> {
        if self.cells.is_empty() {
            default.to_vec()
        } else {
            self.cells.clone()
        }
    }
}

/// The most cells `capacity` simulates: there a cell is a few hundred bytes of state, not a
/// process or a socket.
pub const MAX_HOLDERS: usize = 100_000;

/// The most cells of the modes that give each cell a task, a process or a socket of its own.
pub const MAX_CELL_PROCESSES: usize = 1024;

/// A comma-separated list of counts, each 1 to 1024 (more processes or sockets than that is a
/// typo on this machine, not a measurement).
fn counts(s: &str) -> Option<Vec<usize>> {
    s.split(',')
        .map(|n| {
            n.trim()
                .parse()
                .ok()
                .filter(|n| (1..=MAX_CELL_PROCESSES).contains(n))
        })
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ClaimPath {
    Take,
    ReadBack,
}

impl ClaimPath {
    /// As `task pull --json` names it in `claim_path`.
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimPath::Take => "take",
            ClaimPath::ReadBack => "read_back",
        }
    }
}

/// Which store a ledger run is on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// One `ledger serve --data DIR`.
    Sqlite,
    /// `replicas` `ledger serve --store URL` processes over one PostgreSQL database.
    Pg { replicas: usize },
}

impl Store {
    pub fn parse(s: &str) -> Option<Store> {
        match s.trim() {
            "sqlite" => Some(Store::Sqlite),
            pg => pg
                .strip_prefix("pg")
                .and_then(|n| n.parse().ok())
                .filter(|n| (1..=8).contains(n))
                .map(|replicas| Store::Pg { replicas }),
        }
    }

    pub fn name(self) -> String {
        match self {
            Store::Sqlite => "sqlite".into(),
            Store::Pg { replicas } => format!("pg{replicas}"),
        }
    }
}
