//! The fleet simulation: N cells in this one process, each running the cell's loop against a
//! real `ledger serve` on loopback with the library's own code (recall, the pull's ordering and
//! claim step, the heartbeat, the closing verdict), leaving out only the clone and the harness.
//! A cell pulls, renews its claim once, closes the task, and pulls again until nothing is open
//! for it; a cell told to try later waits a moment and tries again. Bounded by a deadline, after
//! which cells stop starting work and report what they have.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metabob_cell::ledger::claims::claim_finding;
use metabob_cell::ledger::related;
use metabob_cell::ledger::verdict::{self};
use metabob_cell::task_pull::{CandidateOutcome, ClaimPath, Claimer, PullStatus, classify};
use metabob_net::attachment::Attachment;
use metabob_process::clock::now_ms;
use metabob_process::env::Env;
use metabob_process::random::new_finding_id;
use metabob_wire::claims::{ClaimAction, ClaimOutcome};
use metabob_wire::finding::{FindingStatus, NewFinding, Severity};
use metabob_wire::repo_identity::{Aliases, identity_of_origin, vessel_aliases};
use metabob_wire::verdict::{NewVerdict, VerdictKind, VerdictOrigin};

use super::{Home, Res};

/// The simulated cells' repository: nothing is cloned, so it need not exist.
pub const ORIGIN: &str = "https://fleet.example.invalid/sim/app.git";
/// How many tasks are recorded at once before the cells start.
const RECORDING: usize = 32;
/// How long a cell told to try later waits before it pulls again (plus up to as much jitter).
const TRY_LATER_PAUSE: Duration = Duration::from_millis(100);
/// The most pulls in flight at once. A pull on the read-back path reads the recall window whole
/// (up to 1,200 findings and 1,200 verdicts, about 10 MB once parsed), so a thousand at once
/// would measure this process's memory, not the ledger; past this many, a cell waits its turn
/// before its pull starts, and its pull time is counted from then. Both paths keep the same
/// bound, so they are compared alike.
const PULLS_IN_FLIGHT: usize = 64;

/// One simulation's figures.
#[derive(Default)]
pub struct SimRun {
    /// Tasks closed, each by the cell the claim step handed it to.
    pub closed: usize,
    /// Tasks handed to more than one cell: must be 0.
    pub doubles: usize,
    /// Tasks handed out while a task they wait for was not yet closed: must be 0.
    pub early: usize,
    /// Recorded tasks no cell closed by the end.
    pub left_open: usize,
    /// From the cells' start to the last close.
    pub secs: f64,
    pub lost_claims: usize,
    /// Pulls that ended "try later" (a cell's exit 4).
    pub try_later: usize,
    /// Wall time of each pull that handed out a task: recall, ordering and claim.
    pub pull_times: Vec<Duration>,
    /// Failed steps, by what failed.
    pub errors: BTreeMap<String, usize>,
    pub timed_out: bool,
}

#[derive(Default)]
struct Shared {
    /// Task id → the cells it was handed to.
    handed: BTreeMap<String, Vec<usize>>,
    closed: usize,
    last_close: Option<Instant>,
    lost_claims: usize,
    try_later: usize,
    pull_times: Vec<Duration>,
    errors: BTreeMap<String, usize>,
    timed_out: bool,
    /// Task id → the ids it waits for.
    waits: BTreeMap<String, Vec<String>>,
    /// Tasks whose close is written or being written: marked before the write is sent, so a
    /// task handed out after its blocker's close committed always finds the blocker here.
    closing: std::collections::BTreeSet<String>,
    early: usize,
}

impl Shared {
    fn error(&mut self, what: &str, e: impl std::fmt::Display) {
        let kinds = self.errors.len();
        let key = format!("{what}: {e}");
        // A flood of distinct texts cannot fill memory: past 20 kinds they are lumped.
        let key = if kinds >= 20 && !self.errors.contains_key(&key) {
            format!("{what}: (other)")
        } else {
            key
        };
        *self.errors.entry(key).or_default() += 1;
    }
}

/// Records `tasks` tasks, then runs `cells` cells until every one is done or `deadline`.
/// Cells attach through the run's config.json; given `endpoints` (the replicas of one ledger),
/// cell `i` attaches to `endpoints[i % len]` as a cell given `DISCOVERY_ENDPOINT` would, and
/// the recording alternates between them too.
pub async fn simulate(
    home: &Home,
    endpoints: &[String],
    cells: usize,
    tasks: usize,
    edges: usize,
    deadline: Instant,
) -> Res<SimRun> {
    let atts = attach(home, endpoints).await?;
    let repository = identity_of_origin(ORIGIN);
    let dag = random_dag(tasks, edges);
    let ids = record(&atts, &repository, tasks, &dag).await?;
    // Task id → the ids it waits for, to judge each hand-out by.
    let waits: BTreeMap<String, Vec<String>> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.clone(), dag[i].iter().map(|&b| ids[b].clone()).collect()))
        .collect();

    let shared = Arc::new(Mutex::new(Shared {
        waits,
        ..Shared::default()
    }));
    let pulls = Arc::new(tokio::sync::Semaphore::new(PULLS_IN_FLIGHT));
    let aliases = Arc::new(vessel_aliases(&repository));
    let repository: Arc<str> = repository.into();
    let start = Instant::now();
    let mut running = tokio::task::JoinSet::new();
    for i in 0..cells {
        let att = atts[i % atts.len()].clone();
        let (shared, pulls) = (shared.clone(), pulls.clone());
        let (repository, aliases) = (repository.clone(), aliases.clone());
        running.spawn(async move {
            let cell = Cell {
                i,
                att: &att,
                repository: &repository,
                aliases: &aliases,
                shared: &shared,
                pulls: &pulls,
            };
            cell.run(deadline).await
        });
    }
    while running.join_next().await.is_some() {}

    let s = std::mem::take(&mut *shared.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(SimRun {
        closed: s.closed,
        // A cell handed the same task again (its close failed, so on its next pull it still
        // held it and resumed it) is no double; two cells are.
        doubles: s
            .handed
            .values()
            .filter(|c| c.iter().any(|&x| x != c[0]))
            .count(),
        left_open: tasks.saturating_sub(s.closed),
        early: s.early,
        secs: s
            .last_close
            .map_or(0.0, |t| t.duration_since(start).as_secs_f64()),
        lost_claims: s.lost_claims,
        try_later: s.try_later,
        pull_times: s.pull_times,
        errors: s.errors,
        timed_out: s.timed_out,
    })
}

/// One attachment through the run's config.json, or one per endpoint (the replicas of one
/// ledger) as a cell given `DISCOVERY_ENDPOINT` attaches.
pub async fn attach(home: &Home, endpoints: &[String]) -> Res<Vec<Attachment>> {
    let chosen: Vec<Option<&String>> = if endpoints.is_empty() {
        vec![None]
    } else {
        endpoints.iter().map(Some).collect()
    };
    let mut atts = Vec::with_capacity(chosen.len());
    for endpoint in chosen {
        let vars = home
            .vars
            .iter()
            .cloned()
            .chain(endpoint.map(|url| ("DISCOVERY_ENDPOINT".to_string(), url.clone())));
        let mut env = Env::new(vars, &home.cwd);
        let att = metabob_cell::attach_once(&mut env, &home.cwd)
            .await
            .map_err(|e| format!("attach: {e}"))?;
        atts.push(att);
    }
    Ok(atts)
}

/// A backlog's dependencies: for each task, the earlier tasks it waits for.
pub type Dag = Vec<Vec<usize>>;

/// A random DAG of `edges` edges over `tasks` tasks: each edge joins a task, drawn uniformly, to
/// a task of an earlier recording batch, drawn uniformly among those, so every blocker is
/// stored before its dependents name it. Tasks of the first batch wait for none.
pub fn random_dag(tasks: usize, edges: usize) -> Dag {
    let mut dag: Dag = vec![Vec::new(); tasks];
    let random = |n: usize| {
        let r = (u64::from(metabob_process::random::random_u16()) << 16)
            | u64::from(metabob_process::random::random_u16());
        (r % n as u64) as usize
    };
    let eligible = tasks.saturating_sub(RECORDING);
    let most = (RECORDING..tasks).map(|i| i - i % RECORDING).sum::<usize>();
    let mut placed = 0;
    while placed < edges.min(most) && eligible > 0 {
        let task = RECORDING + random(eligible);
        let before = task - task % RECORDING;
        let blocker = random(before);
        if dag[task].len() < metabob_wire::depends::MAX_BLOCKERS && !dag[task].contains(&blocker) {
            dag[task].push(blocker);
            placed += 1;
        }
    }
    dag
}

/// Records the tasks as `finding record --category task` would, `RECORDING` at a time, taking
/// the attachments in turn; a task of `dag` names its blockers in `blocked-by:` lines, and each
/// batch is stored before the next is sent. Answers each task's id.
pub async fn record(
    atts: &[Attachment],
    repository: &str,
    tasks: usize,
    dag: &Dag,
) -> Res<Vec<String>> {
    let ids: Vec<String> = (0..tasks).map(|_| new_finding_id()).collect();
    for batch in (0..tasks).collect::<Vec<_>>().chunks(RECORDING) {
        let mut writes = tokio::task::JoinSet::new();
        for &i in batch {
            let blockers = dag.get(i).map(Vec::as_slice).unwrap_or_default();
            let details: Vec<String> = blockers
                .iter()
                .map(|&b| format!("{}: {}", metabob_wire::depends::RECORDED_LINE, ids[b]))
                .collect();
            let f = NewFinding {
                finding_ids: vec![ids[i].clone()],
                files: vec![format!("src/m{}.py", i % 97)],
                summary: format!("[HIGH][task] m{}.py: step {i}", i % 97),
                details: details.join("\n"),
                severity: Severity::High,
                category: "task".into(),
                repo: repository.to_string(),
                repo_name: "app".into(),
                workspace: String::new(),
                lines: None,
                status: FindingStatus::Open,
                recorded_by: Some("fleet-bench".into()),
                session: "fleet-bench".into(),
            };
            let att = atts[i % atts.len()].clone();
            writes.spawn(async move {
                metabob_cell::ledger::write_concept(&att, f.to_pointer())
                    .await
                    .map(drop)
                    .map_err(|e| format!("record: {e}"))
            });
        }
        while let Some(done) = writes.join_next().await {
            done.map_err(|e| format!("record: {e}"))??;
        }
    }
    Ok(ids)
}

fn lock(s: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// One simulated cell and what it shares with the others.
struct Cell<'a> {
    i: usize,
    att: &'a Attachment,
    repository: &'a str,
    aliases: &'a Aliases,
    shared: &'a Mutex<Shared>,
    pulls: &'a tokio::sync::Semaphore,
}

impl Cell<'_> {
    /// One cell's loop: pull, renew, close, until nothing is open for it or the deadline.
    async fn run(&self, deadline: Instant) {
        let (i, att, repository, aliases, shared) =
            (self.i, self.att, self.repository, self.aliases, self.shared);
        let me = format!("sim-cell-{i:04}");
        let session = format!("sim-session-{i:04}");
        loop {
            if Instant::now() >= deadline {
                lock(shared).timed_out = true;
                return;
            }
            // Most of a large fleet waits here for its turn, so the deadline bounds the wait too:
            // a cell still queued when it passes starts no pull.
            let turn = match tokio::time::timeout_at(deadline.into(), self.pulls.acquire()).await {
                Ok(Ok(turn)) => turn,
                Ok(Err(_)) => return,
                Err(_) => {
                    lock(shared).timed_out = true;
                    return;
                }
            };
            let began = Instant::now();
            let path = ClaimPath::offered(att).await;
            let view = match path.recall(att, aliases).await {
                Ok(v) => v,
                Err(e) => {
                    drop(turn);
                    lock(shared).error("recall", e);
                    tokio::time::sleep(TRY_LATER_PAUSE).await;
                    continue;
                }
            };
            let tasks = view.as_ref().map(|v| classify(v, &me, now_ms()));
            let truncated = view.as_ref().is_some_and(|v| v.findings_truncated);
            let mut claimer = Claimer::start(
                att,
                tasks.as_ref(),
                path,
                (repository, aliases),
                &me,
                &session,
                60,
            );
            let next = claimer.next().await;
            // A pull also reads what context.md lists: the open findings on the task's files.
            if let Ok(Some((task, _))) = &next {
                let related = match &view {
                    Some(view) => Ok(related::in_view(view, task)),
                    None => related::on_files(att, aliases, task).await,
                };
                if let Err(e) = related {
                    lock(shared).error("related findings", e);
                }
            }
            let pulled = began.elapsed();
            drop(turn);
            let lost = claimer
                .candidates()
                .iter()
                .filter(|c| {
                    c.outcome == CandidateOutcome::Claim(metabob_wire::claims::ClaimWord::Lost)
                })
                .count();
            lock(shared).lost_claims += lost;
            let (task, _held) = match next {
                Ok(Some(got)) => got,
                Ok(None) => match claimer.report(truncated).status {
                    PullStatus::TryLater => {
                        lock(shared).try_later += 1;
                        let jitter = u64::from(metabob_process::random::random_u16()) % 100;
                        tokio::time::sleep(TRY_LATER_PAUSE + Duration::from_millis(jitter)).await;
                        continue;
                    }
                    PullStatus::NothingOpen | PullStatus::Pulled | PullStatus::TaskFailed => return,
                },
                Err(e) => {
                    lock(shared).error("claim", e);
                    tokio::time::sleep(TRY_LATER_PAUSE).await;
                    continue;
                }
            };
            {
                let mut s = lock(shared);
                s.pull_times.push(pulled);
                let id = task.finding.id().to_string();
                let waited = s
                    .waits
                    .get(&id)
                    .is_none_or(|w| w.iter().all(|b| s.closing.contains(b)));
                if !waited {
                    s.early += 1;
                }
                s.handed.entry(id).or_default().push(i);
            }
            let f = &task.finding;
            match claim_finding(att, f, &me, &session, 60, ClaimAction::Renew, None).await {
                Ok(ClaimOutcome::Renewed { .. }) => {}
                Ok(other) => lock(shared).error("renew", other.word()),
                Err(e) => lock(shared).error("renew", e),
            }
            let fix = NewVerdict {
                finding: f,
                kind: VerdictKind::Fixed,
                reviewed_by: Some(me.clone()),
                session: session.clone(),
                origin: VerdictOrigin::Remote,
                lines: vec![("fix", format!("commit {:040x}", now_ms()))],
            };
            lock(shared).closing.insert(f.id().to_string());
            match verdict::write(att, &fix, "fleet-bench").await {
                Ok(_) => {
                    let mut s = lock(shared);
                    s.closed += 1;
                    s.last_close = Some(Instant::now());
                }
                Err(e) => {
                    let mut s = lock(shared);
                    s.closing.remove(f.id());
                    s.error("close", e);
                }
            }
        }
    }
}
