use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::error::{CliError, CliResult, Exit};
use metabob_cell::task_claim::{
    GiveBack, ask_about_task, change_edge, renew_or_release, reopen_task,
};
use metabob_cell::task_pull::{self, PullOptions, PullStatus};
use metabob_process::env::Env;
use metabob_wire::board::{Board, Entry};
use metabob_wire::claims::ClaimOutcome;
use metabob_wire::depends::{READY_SHAPE, blocked_line};
use metabob_wire::parking::{Parked, Reopen};
use metabob_wire::task_action::{
    ActionDone, TASK_ACTION_SHAPE, TASK_HISTORY_SHAPE, TaskAction, TaskHistory,
};
use metabob_wire::verdict::VerdictKind;

/// A cell's task: take one from the ledger, keep its claim alive or give it back; put a parked
/// task back; show the board.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp task pull --origin https://git.lan/app.git --task-dir ./task --work-dir ./work
  metabob-mcp task renew --task-dir ./task
  metabob-mcp task release --task-dir ./task --reason \"giving up\"
  metabob-mcp task list
  metabob-mcp task show agf_0123456789abcdef")]
pub struct TaskArgs {
    #[command(subcommand)]
    pub command: TaskCommand,
}

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Claim an open task of the origin's repository, clone the origin at its ref into the work
    /// directory and write task.json and context.md. Exit 0 pulled, 3 nothing open, 4 try later
    /// (retry_after; also when the origin cannot be reached), 5 the task failed for a cause of
    /// its own (its ref is refused or missing) and was parked: pull again; 2 not attached, 1 a
    /// failure of this cell.
    Pull(PullArgs),
    /// Renew the claim recorded in task.json (the entrypoint's heartbeat).
    Renew(RenewArgs),
    /// Release the claim recorded in task.json, so another cell takes the task at once; with
    /// TASK_ID --force, free the claim whoever holds it (a dead cell's; needs a write key).
    Release(ReleaseArgs),
    /// Put a parked task back on the board, so cells are offered it again (needs a write key).
    Reopen(ReopenArgs),
    /// The board: per repository, the open, blocked, claimed, pending, closed, withdrawn and
    /// parked tasks, as the ledger's `taskBoard` derives them; with --ready, only what a cell
    /// would be offered now. Exit 0, 2 not attached, 1 any other failure.
    List(ListArgs),
    /// One task's history: every claim, renewal, failure (with the harness's last lines),
    /// park, reopening and verdict in order, and each attempt with its duration.
    Show(ShowArgs),
    /// Withdraw a task for good, with a reason: no cell is offered it again and it cannot be
    /// reopened (needs a write key).
    Cancel(CancelArgs),
    /// Make a task wait for others: no cell is offered it until each is fixed or retracted
    /// (needs a write key). A cycle, an unknown task or the task itself is refused.
    Block(BlockArgs),
    /// Let a task stop waiting for a task it waits for (needs a write key).
    Unblock(UnblockArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp task block agf_0123456789abcdef --by agf_fedcba9876543210
  metabob-mcp task list --ready                    # what cells are offered now")]
pub struct BlockArgs {
    #[command(flatten)]
    pub target: TaskTarget,
    /// A task it waits for, by `agf_` id or concept id (repeat for several).
    #[arg(long = "by", value_name = "TASK_ID", required = true)]
    pub by: Vec<String>,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp task unblock agf_0123456789abcdef --from agf_fedcba9876543210")]
pub struct UnblockArgs {
    #[command(flatten)]
    pub target: TaskTarget,
    /// A task it no longer waits for (repeat for several).
    #[arg(long = "from", value_name = "TASK_ID", required = true)]
    pub from: Vec<String>,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp task show agf_0123456789abcdef
  metabob-mcp task show agf_0123456789abcdef --json")]
pub struct ShowArgs {
    #[command(flatten)]
    pub target: TaskTarget,
}

/// The task an operator's command names, and how to print the ledger's answer.
#[derive(Debug, Args)]
pub struct TaskTarget {
    /// The task's id (`agf_…`) or its concept id.
    #[arg(value_name = "TASK_ID")]
    pub task: String,
    /// Print the ledger's answer as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp task cancel agf_0123456789abcdef --reason \"superseded by agf_fedcba9876543210\"")]
pub struct CancelArgs {
    #[command(flatten)]
    pub target: TaskTarget,
    /// Why, recorded on the task and shown on the board.
    #[arg(long)]
    pub reason: String,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp task list                            # parked tasks show their reason
  metabob-mcp task reopen agf_0123456789abcdef")]
pub struct ReopenArgs {
    #[command(flatten)]
    pub target: TaskTarget,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp task list
  metabob-mcp task list --origin https://git.lan/app.git
  metabob-mcp task list --ready --origin https://git.lan/app.git
  metabob-mcp task list --json --ledger http://ledger.lan:18100 --api-key mb_live_…")]
pub struct ListArgs {
    /// Only this origin's repository (default: every repository of the key's org).
    #[arg(long, value_name = "GIT_URL")]
    pub origin: Option<String>,
    /// Only the tasks a cell would be offered now (ready, and nobody holds them), most severe
    /// first, as the ledger's take weighs them (`taskReady`).
    #[arg(long)]
    pub ready: bool,
    /// Print the board as the ledger answered it, as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp task pull --origin https://git.lan/app.git --task-dir ./task --work-dir ./work
  metabob-mcp task pull --origin /srv/git/app.git --minutes 30 --json
  VESSEL_ID=cell-7 metabob-mcp task pull --origin git@git.lan:org/app.git    # /task and /work, as in a cell")]
pub struct PullArgs {
    /// The repository to work on; its identity keys the ledger.
    #[arg(long, value_name = "GIT_URL")]
    pub origin: String,
    /// Where task.json and context.md go; must be empty or missing.
    #[arg(long, default_value = "/task")]
    pub task_dir: PathBuf,
    /// Where the origin is cloned; must be empty or missing.
    #[arg(long, default_value = "/work")]
    pub work_dir: PathBuf,
    /// How long the claim lasts before it must be renewed (1-240).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(i64).range(1..=240))]
    pub minutes: i64,
    /// Authors whose project conventions count, comma-separated (default: METABOB_TASK_TRUST,
    /// else the task's recorder).
    #[arg(long, value_name = "VESSEL_ID,...")]
    pub trust: Option<String>,
    /// Print the reply as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ClaimArgs {
    /// The task directory `task pull` wrote.
    #[arg(long, default_value = "/task")]
    pub task_dir: PathBuf,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp task renew                           # the claim in /task/task.json, for its minutes
  metabob-mcp task renew --task-dir ./task --minutes 30")]
pub struct RenewArgs {
    #[command(flatten)]
    pub claim: ClaimArgs,
    /// New claim length in minutes (default: what task.json recorded).
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=240))]
    pub minutes: Option<i64>,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp task release --reason \"rebase conflict on src/parse.py\"
  metabob-mcp task release --failed --reason \"tests still fail\" --task-dir ./task
  metabob-mcp task release agf_0123456789abcdef --force --reason \"cell-3 is gone\"")]
pub struct ReleaseArgs {
    /// With --force: the task whose claim to free, whoever holds it.
    #[arg(value_name = "TASK_ID", requires = "force")]
    pub task: Option<String>,
    /// Free the claim of TASK_ID on its holder's behalf (a cell that died holding it).
    #[arg(long, requires = "task", conflicts_with = "failed")]
    pub force: bool,
    #[command(flatten)]
    pub claim: ClaimArgs,
    /// Why the task is given back, recorded on the withdrawal.
    #[arg(long)]
    pub reason: Option<String>,
    /// The task failed in this cell (its harness gave up): the release counts toward parking
    /// it, and once cells numbering --park-after have failed it, it is parked.
    #[arg(long)]
    pub failed: bool,
    /// How many distinct cells' failures park a task (the fleet's setting).
    #[arg(long, env = "METABOB_PARK_AFTER", default_value_t = 2,
          value_parser = clap::value_parser!(u16).range(1..=100))]
    pub park_after: u16,
}

pub async fn run(args: TaskArgs, env: Env) -> CliResult {
    match args.command {
        TaskCommand::Pull(a) => pull(a, env).await,
        TaskCommand::Renew(a) => {
            let given = GiveBack::Renew { minutes: a.minutes };
            claim(a.claim, given, env).await
        }
        TaskCommand::Release(ReleaseArgs {
            task: Some(task),
            force: true,
            reason,
            claim,
            ..
        }) => act(TaskAction::Release, task, reason, claim.json, env).await,
        TaskCommand::Release(a) => {
            let given = if a.failed {
                GiveBack::Fail {
                    reason: a.reason,
                    park_after: usize::from(a.park_after),
                }
            } else {
                GiveBack::Release { reason: a.reason }
            };
            claim(a.claim, given, env).await
        }
        TaskCommand::Reopen(a) => reopen(a.target, env).await,
        TaskCommand::List(a) => list(a, env).await,
        TaskCommand::Show(a) => show(a.target, env).await,
        TaskCommand::Cancel(a) => {
            let t = a.target;
            act(TaskAction::Cancel, t.task, Some(a.reason), t.json, env).await
        }
        TaskCommand::Block(a) => edges(a.target, a.by, VerdictKind::Blocked, env).await,
        TaskCommand::Unblock(a) => edges(a.target, a.from, VerdictKind::Unblocked, env).await,
    }
}

/// The answer of `shape` read into its model, or one line saying it is none.
fn read_answer<T: serde::de::DeserializeOwned>(
    command: &str,
    shape: &str,
    answer: &serde_json::Value,
) -> Result<T, CliError> {
    T::deserialize(answer).map_err(|e| {
        CliError::failure(format!(
            "{command}: the ledger's {shape} answer does not read: {}",
            metabob_wire::text::one_line(&e.to_string(), 200)
        ))
        .hint("--json prints the answer as it came; check that --ledger names a metabob ledger (`ledger serve`), which answers it")
    })
}

/// Thin: the history is the ledger's (`taskHistory`, SPEC.md §Operator actions).
async fn show(a: TaskTarget, env: Env) -> CliResult {
    let answer = ask_about_task(&a.task, None, None, env)
        .await
        .map_err(|e| super::cell_error("task show", e))?;
    let history: TaskHistory = read_answer("task show", TASK_HISTORY_SHAPE, &answer)?;
    if history.task.is_none() {
        return Err(CliError::failure(format!(
            "task show: no task {} in this key's org",
            metabob_wire::text::one_line(&a.task, 200)
        ))
        .hint("`metabob-mcp task list` names the tasks"));
    }
    if a.json {
        super::print_json(&answer)?;
    } else {
        metabob_process::out!("{}", history_text(&history));
    }
    Ok(Exit::Ok)
}

/// A history as text: the task, its attempts with their durations, then every row in order.
pub fn history_text(h: &TaskHistory) -> String {
    let mut out = String::new();
    if let Some(t) = &h.task {
        out.push_str(&format!(
            "{} {} ({}, {})\n  repository {}\n  recorded {} by {}\n",
            t.task_id,
            t.summary,
            t.severity,
            t.group,
            t.repository.as_deref().unwrap_or("-"),
            t.recorded_at,
            t.recorded_by.as_deref().unwrap_or("-"),
        ));
    }
    out.push_str(&format!("attempts ({})\n", h.attempts.len()));
    for a in &h.attempts {
        let took = a.duration_ms.map_or_else(|| "-".into(), took);
        out.push_str(&format!(
            "  {} {} for {took}, {}{}\n",
            a.vessel_id,
            a.began_at,
            a.ending,
            a.reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ));
    }
    out.push_str(&format!("events ({})\n", h.events.len()));
    for e in &h.events {
        out.push_str(&format!(
            "  {} {}{}{}\n",
            e.at,
            e.kind,
            e.by.as_deref()
                .map(|b| format!(" by {b}"))
                .unwrap_or_default(),
            e.detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        ));
    }
    out
}

/// A duration to the second: `45s`, `12m 5s`, `2h 0m 9s`.
fn took(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m {sec}s"),
        (h, m, sec) => format!("{h}h {m}m {sec}s"),
    }
}

/// An operator's action: the ledger decides and writes it (`taskAction_write`).
async fn act(
    action: TaskAction,
    task: String,
    reason: Option<String>,
    json: bool,
    env: Env,
) -> CliResult {
    let command = format!("task {}", action.as_str());
    let answer = ask_about_task(&task, Some(action), reason.as_deref(), env)
        .await
        .map_err(|e| super::cell_error(&command, e))?;
    if json {
        super::print_json(&answer)?;
    }
    match answer.get("outcome").and_then(serde_json::Value::as_str) {
        Some("done") => {
            let done: ActionDone = read_answer(&command, TASK_ACTION_SHAPE, &answer)?;
            if !json {
                metabob_process::outln!("{} {}: {}", done.action.as_str(), done.task_id, done.done);
            }
            Ok(Exit::Ok)
        }
        Some(_) => {
            let detail = answer.get("detail").and_then(serde_json::Value::as_str);
            Err(CliError::failure(format!(
                "{command}: {}: {}",
                metabob_wire::text::one_line(&task, 200),
                metabob_wire::text::one_line(detail.unwrap_or("refused"), 300)
            )))
        }
        None => Err(
            CliError::failure(format!("{command}: the ledger's answer names no outcome")).hint(
                "check that --ledger names a metabob ledger (`ledger serve`), which answers it",
            ),
        ),
    }
}

/// `task block|unblock`: one row per other task named, in order; the first refusal stops.
async fn edges(t: TaskTarget, others: Vec<String>, kind: VerdictKind, env: Env) -> CliResult {
    let command = format!(
        "task {}",
        if kind == VerdictKind::Blocked {
            "block"
        } else {
            "unblock"
        }
    );
    let mut done = Vec::new();
    for other in others {
        let blocker = change_edge(&t.task, &other, kind, env.clone())
            .await
            .map_err(|e| super::cell_error(&command, e))?;
        if !t.json {
            match kind {
                VerdictKind::Blocked => metabob_process::outln!("{} waits for {blocker}", t.task),
                _ => metabob_process::outln!("{} no longer waits for {blocker}", t.task),
            }
        }
        done.push(blocker);
    }
    if t.json {
        let word = if kind == VerdictKind::Blocked {
            "blocked_by"
        } else {
            "unblocked_from"
        };
        super::print_json(&serde_json::json!({ "task": t.task, word: done }))?;
    }
    Ok(Exit::Ok)
}

/// Thin by design: the grouping is the ledger's (`taskBoard`, SPEC.md §The board), and so is
/// what is ready (`taskReady`, SPEC.md §Dependencies).
// anchor: task-list
async fn list(a: ListArgs, mut env: Env) -> CliResult {
    let here = env.cwd().to_path_buf();
    let att = metabob_cell::attach_once(&mut env, &here)
        .await
        .map_err(|e| super::cell_error("task list", e))?;
    let shape = if a.ready { READY_SHAPE } else { "taskBoard" };
    let mut pointer = serde_json::json!({ "type": shape });
    if let Some(origin) = &a.origin {
        pointer["origin"] = origin.as_str().into();
    }
    let board = att
        .resolve(pointer)
        .await
        .and_then(|r| r.ok(shape))
        .map_err(|e| super::cell_error("task list", e.into()))?;
    if a.ready && !a.json {
        let ready: Ready = read_answer("task list --ready", READY_SHAPE, &board)?;
        metabob_process::out!("{}", ready_text(&ready));
        return Ok(Exit::Ok);
    }
    if a.json {
        super::print_json(&board)?;
    } else {
        // Read once into the board's model; an answer that is no board is one error line.
        let board: Board = read_answer("task list", "taskBoard", &board)?;
        metabob_process::out!("{}", board_text(&board));
    }
    Ok(Exit::Ok)
}

/// `taskReady`'s answer, as `task list --ready` reads it.
#[derive(serde::Deserialize)]
struct Ready {
    ready: Vec<ReadyTask>,
    #[serde(default)]
    truncated: bool,
}

#[derive(serde::Deserialize)]
struct ReadyTask {
    task_id: String,
    summary: String,
    severity: String,
    #[serde(default)]
    repository: String,
}

/// One line per task a cell would be offered now, in the take's order.
fn ready_text(r: &Ready) -> String {
    let mut out = String::new();
    for t in &r.ready {
        out.push_str(&format!(
            "ready     {} {} ({}, {})\n",
            t.task_id, t.summary, t.severity, t.repository
        ));
    }
    if r.ready.is_empty() {
        out.push_str("no task is ready\n");
    }
    if r.truncated {
        out.push_str("(only the first tasks are shown)\n");
    }
    out
}

/// The board as text: one block per repository, one line per task with its group's details.
pub fn board_text(board: &Board) -> String {
    let or_dash = |v: &Option<String>| v.as_deref().unwrap_or("-").to_string();
    let mut out = String::new();
    for repo in &board.repositories {
        out.push_str(&format!("{}\n", repo.repository));
        for entry in repo.entries() {
            let detail = match entry {
                Entry::Open(t) => t.severity.clone(),
                Entry::Blocked(t) => blocked_line(&t.blocked_by),
                Entry::Claimed(t) => format!(
                    "by {} until {}{}",
                    t.holder,
                    t.until,
                    if t.lapsed { " (lapsed)" } else { "" }
                ),
                Entry::Pending(t) => format!(
                    "{} commit {} by {}",
                    t.awaiting,
                    or_dash(&t.fix_commit),
                    or_dash(&t.by)
                ),
                Entry::Closed(t) => format!(
                    "{} commit {} by {}",
                    t.verdict,
                    or_dash(&t.fix_commit),
                    or_dash(&t.closed_by)
                ),
                Entry::Withdrawn(t) => format!("reason: {}", t.reason),
                Entry::Parked(t) => format!("reason: {}", t.reason),
            };
            let task = entry.task();
            out.push_str(&format!(
                "  {:<9} {} {} ({detail})\n",
                entry.group(),
                task.task_id,
                task.summary
            ));
        }
    }
    if board.repositories.is_empty() {
        out.push_str("no tasks\n");
    }
    for c in &board.cells {
        out.push_str(&format!(
            "cell {} last heartbeat {}\n",
            c.vessel_id,
            or_dash(&c.last_heartbeat)
        ));
    }
    for g in &board.goals {
        let waits = if g.waits_for.is_empty() {
            String::new()
        } else {
            format!(" (waits for {})", g.waits_for.join(", "))
        };
        out.push_str(&format!(
            "goal {} {}: {}{waits}\n",
            g.dispatch_id, g.state, g.goal
        ));
    }
    if board.truncated {
        out.push_str("(only the newest tasks are shown)\n");
    }
    out
}

async fn pull(a: PullArgs, env: Env) -> CliResult {
    let opts = PullOptions {
        origin: a.origin,
        task_dir: a.task_dir,
        work_dir: a.work_dir,
        minutes: a.minutes,
        trust: a.trust,
        progress: std::io::stderr().is_terminal(),
    };
    let report = task_pull::run(opts, env)
        .await
        .map_err(|e| super::cell_error("task pull", e))?;
    if a.json {
        super::print_json(&report)?;
    } else {
        for c in &report.candidates {
            metabob_process::outln!(
                "{:<9} {} {}{}",
                c.outcome.as_str(),
                c.task_id,
                c.summary,
                c.detail
                    .as_ref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            );
        }
        match report.status {
            PullStatus::Pulled => metabob_process::outln!(
                "pulled    {}",
                report.task.as_ref().map_or("", |t| t.task_id.as_str())
            ),
            PullStatus::NothingOpen => metabob_process::outln!("no open task"),
            PullStatus::TryLater => metabob_process::outln!(
                "try later: retry after {}",
                report.retry_after.as_deref().unwrap_or("a moment")
            ),
            PullStatus::TaskFailed => metabob_process::outln!(
                "task failed: {}; pull the next task",
                report.failed.as_ref().map_or("", |f| if f.parked {
                    "it is parked"
                } else {
                    "its park was not written, its claim was withdrawn"
                })
            ),
        }
    }
    Ok(match report.status {
        PullStatus::Pulled => Exit::Ok,
        PullStatus::NothingOpen => Exit::NothingOpen,
        PullStatus::TryLater => Exit::TryLater,
        PullStatus::TaskFailed => Exit::TaskFailed,
    })
}

async fn reopen(a: TaskTarget, env: Env) -> CliResult {
    let outcome = reopen_task(&a.task, env)
        .await
        .map_err(|e| super::cell_error("task reopen", e))?;
    if a.json {
        super::print_json(&serde_json::json!({ "task": a.task, "outcome": outcome }))?;
    }
    match outcome {
        Reopen::Reopened => {
            if !a.json {
                metabob_process::outln!("reopened {}", a.task);
            }
            Ok(Exit::Ok)
        }
        Reopen::NotParked => Err(CliError::failure(format!(
            "task reopen: {} is not parked; only a parked task can be reopened",
            a.task
        ))),
        Reopen::Closed => Err(CliError::failure(format!(
            "task reopen: {} is closed or its fix is pending; record a new task instead",
            a.task
        ))),
    }
}

/// `task renew|release --json`: the claim's outcome, and the park a failure led to.
#[derive(serde::Serialize)]
struct ClaimReply<'a> {
    #[serde(flatten)]
    outcome: &'a ClaimOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    parked: Option<&'a Parked>,
}

async fn claim(a: ClaimArgs, given: GiveBack, env: Env) -> CliResult {
    let (outcome, parked) = renew_or_release(&a.task_dir, given, env)
        .await
        .map_err(|e| super::cell_error("task", e))?;
    if a.json {
        super::print_json(&ClaimReply {
            outcome: &outcome,
            parked: parked.as_ref(),
        })?;
    } else {
        metabob_process::outln!("{}", outcome.word());
        if let Some(p) = &parked {
            metabob_process::outln!("parked: {}", p.reason);
        }
    }
    match outcome {
        ClaimOutcome::Renewed { .. } | ClaimOutcome::Released => Ok(Exit::Ok),
        ClaimOutcome::Refused { reason } => Err(CliError::failure(format!("task: {reason}"))),
        other => Err(CliError::failure(format!(
            "task: the claim was {}; not renewed",
            other.word()
        ))),
    }
}
