use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::cell::task_claim::renew_or_release;
use crate::cell::task_pull::{self, PullOptions, PullStatus};
use crate::env::Env;
use crate::error::{CliError, CliResult, Exit};
use crate::ledger::claims::{ClaimAction, ClaimOutcome};

/// A cell's task: take one from the ledger, keep its claim alive, or give it back.
#[derive(Debug, Args)]
pub struct TaskArgs {
    #[command(subcommand)]
    pub command: TaskCommand,
}

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Claim an open task of the origin's repository, clone the origin at its ref into the work
    /// directory and write task.json and context.md. Exit 0 pulled, 3 nothing open, 4 try later
    /// (retry_after), 2 not attached, 1 any other failure.
    Pull(PullArgs),
    /// Renew the claim recorded in task.json (the entrypoint's heartbeat).
    Renew(ClaimArgs),
    /// Release the claim recorded in task.json, so another cell takes the task at once.
    Release(ClaimArgs),
    /// The board: per repository, the open, claimed, pending, closed and withdrawn tasks, as
    /// the ledger's `taskBoard` derives them. Exit 0, 2 not attached, 1 any other failure.
    List(ListArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this origin's repository (default: every repository of the key's org).
    #[arg(long, value_name = "GIT_URL")]
    pub origin: Option<String>,
    /// Print the board as the ledger answered it, as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
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
    /// New claim length in minutes (default: what task.json recorded).
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=240))]
    pub minutes: Option<i64>,
    /// Why the task is given back, recorded on the withdrawal (release only).
    #[arg(long)]
    pub reason: Option<String>,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: TaskArgs, env: Env) -> CliResult {
    match args.command {
        TaskCommand::Pull(a) => pull(a, env).await,
        TaskCommand::Renew(a) => claim(a, ClaimAction::Renew, env).await,
        TaskCommand::Release(a) => claim(a, ClaimAction::Release, env).await,
        TaskCommand::List(a) => list(a, env).await,
    }
}

/// Thin by design: the grouping is the ledger's (`taskBoard`, SPEC.md §The board).
// anchor: task-list
async fn list(a: ListArgs, mut env: Env) -> CliResult {
    let here = env.cwd().to_path_buf();
    let att = crate::cell::attach_once(&mut env, &here)
        .await
        .map_err(|e| super::cell_error("task list", e))?;
    let mut pointer = serde_json::json!({ "type": "taskBoard" });
    if let Some(origin) = &a.origin {
        pointer["origin"] = origin.as_str().into();
    }
    let board = att
        .resolve(pointer)
        .await
        .and_then(|r| r.ok("taskBoard"))
        .map_err(|e| super::cell_error("task list", e.into()))?;
    if a.json {
        super::print_json(&board)?;
    } else {
        print!("{}", board_text(&board));
    }
    Ok(Exit::Ok)
}

/// The board as text: one block per repository, one line per task with its group's details.
pub fn board_text(board: &serde_json::Value) -> String {
    use serde_json::Value;
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("-").to_string();
    let mut out = String::new();
    let repos = board.get("repositories").and_then(Value::as_array);
    for repo in repos.into_iter().flatten() {
        out.push_str(&format!("{}\n", s(repo, "repository")));
        for group in crate::ledger_server::board::GROUPS {
            for t in repo
                .get(group)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let detail = match group {
                    "claimed" => format!(
                        "by {} until {}{}",
                        s(t, "holder"),
                        s(t, "until"),
                        if t.get("lapsed") == Some(&Value::Bool(true)) {
                            " (lapsed)"
                        } else {
                            ""
                        }
                    ),
                    "pending" => format!(
                        "{} commit {} by {}",
                        s(t, "awaiting"),
                        s(t, "fix_commit"),
                        s(t, "by")
                    ),
                    "closed" => format!(
                        "{} commit {} by {}",
                        s(t, "verdict"),
                        s(t, "fix_commit"),
                        s(t, "closed_by")
                    ),
                    "withdrawn" => format!("reason: {}", s(t, "reason")),
                    _ => s(t, "severity"),
                };
                out.push_str(&format!(
                    "  {group:<9} {} {} ({detail})\n",
                    s(t, "task_id"),
                    s(t, "summary")
                ));
            }
        }
    }
    if repos.is_none_or(|r| r.is_empty()) {
        out.push_str("no tasks\n");
    }
    for c in board
        .get("cells")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.push_str(&format!(
            "cell {} last heartbeat {}\n",
            s(c, "vessel_id"),
            s(c, "last_heartbeat")
        ));
    }
    for g in board
        .get("goals")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.push_str(&format!(
            "goal {} {}: {}\n",
            s(g, "dispatch_id"),
            s(g, "state"),
            s(g, "goal")
        ));
    }
    if board.get("truncated") == Some(&Value::Bool(true)) {
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
            println!(
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
            PullStatus::Pulled => println!(
                "pulled    {}",
                report.task.as_ref().map_or("", |t| t.task_id.as_str())
            ),
            PullStatus::NothingOpen => println!("no open task"),
            PullStatus::TryLater => println!(
                "try later: retry after {}",
                report.retry_after.as_deref().unwrap_or("a moment")
            ),
        }
    }
    Ok(match report.status {
        PullStatus::Pulled => Exit::Ok,
        PullStatus::NothingOpen => Exit::NothingOpen,
        PullStatus::TryLater => Exit::TryLater,
    })
}

async fn claim(a: ClaimArgs, action: ClaimAction, env: Env) -> CliResult {
    let outcome = renew_or_release(&a.task_dir, action, a.minutes, a.reason.as_deref(), env)
        .await
        .map_err(|e| super::cell_error("task", e))?;
    if a.json {
        super::print_json(&outcome)?;
    } else {
        println!("{}", outcome.word());
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
