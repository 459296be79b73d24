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
    }
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
