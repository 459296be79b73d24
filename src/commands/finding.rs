use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::{cell_error, print_json};
use crate::error::{CliError, CliResult, Exit};
use metabob_cell::finding_close::{self, CloseOptions, Commits, Outcome, SweepOptions};
use metabob_cell::record::{self, RecordOptions, RecordOutcome};
use metabob_process::env::Env;
use metabob_wire::depends;
use metabob_wire::finding::{FindingStatus, Severity};
use metabob_wire::record::FindingDraft;

/// Findings on the shared ledger: close them by commit, or record one.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp finding record --file src/parse.py --severity HIGH --category correctness --summary \"drops the last token\"
  metabob-mcp finding close --commits origin/main..HEAD
  metabob-mcp finding close --pending --origin https://git.lan/app.git")]
pub struct FindingArgs {
    #[command(subcommand)]
    pub command: FindingCommand,
}

#[derive(Debug, Subcommand)]
pub enum FindingCommand {
    /// Close the findings the commits name in `Fixes-Finding:` trailers, once merged into the
    /// target; pending, reverted and unpushed fixes are reported, never closed. With --pending,
    /// close the origin's pending fixes whose review has been merged since.
    Close(CloseArgs),
    /// Record a finding (or, with --category task, a task) and print its ids.
    Record(RecordArgs),
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["commits_from", "commits", "pending"]))]
#[command(after_help = "\
Examples:
  git rev-list origin/main..HEAD > commits && git push origin HEAD:main
  metabob-mcp finding close --commits-from commits --task /task/task.json --work-dir /work
  metabob-mcp finding close --commits origin/main..HEAD      # after your own push, in the checkout
  metabob-mcp finding close --commits HEAD~3..HEAD --target release --json
  metabob-mcp finding close --pending --origin https://git.lan/app.git   # after merging task/<id>")]
pub struct CloseArgs {
    /// A file of commit ids, one per line (`git rev-list origin/<target>..HEAD > FILE`).
    #[arg(long, value_name = "FILE")]
    pub commits_from: Option<PathBuf>,
    /// A commit range, e.g. `origin/main..HEAD`, after your own push.
    #[arg(long, value_name = "RANGE")]
    pub commits: Option<String>,
    /// Judge every pending fix of --origin's repository again, in a clone of its own, and close
    /// those whose review has been merged.
    #[arg(long, conflicts_with_all = ["target", "work_dir", "task"])]
    pub pending: bool,
    /// The repository to sweep, as git clones it (with --pending).
    #[arg(long, value_name = "GIT_URL")]
    pub origin: Option<String>,
    /// The branch the fix must be merged into (default: the task's policy, else the origin's
    /// default branch).
    #[arg(long)]
    pub target: Option<String>,
    /// The checkout to read.
    #[arg(long, default_value = ".")]
    pub work_dir: PathBuf,
    /// task.json from `task pull`: its policy's target and the cell's identity.
    #[arg(long, value_name = "TASK_JSON")]
    pub task: Option<PathBuf>,
    /// Print the reply as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp finding record --file src/parse.py --line-start 40 --line-end 52 \\
      --severity HIGH --category correctness --summary \"parser drops the last token\"
  metabob-mcp finding record --origin https://git.lan/app.git --category task --severity MEDIUM \\
      --file src/parse.py --summary \"keep the last token\" --details \"ref: main\"
  metabob-mcp finding record --origin https://git.lan/app.git --category task --severity MEDIUM \
      --file src/use.py --summary \"call the new parser\" --blocked-by agf_0123456789abcdef")]
pub struct RecordArgs {
    /// A file the finding is about, relative to the repository root (repeat for several).
    #[arg(long = "file", required = true, value_name = "PATH")]
    pub files: Vec<String>,
    /// One-line description.
    #[arg(long)]
    pub summary: String,
    /// CRITICAL, HIGH, MEDIUM, LOW or INFO.
    #[arg(long)]
    pub severity: Severity,
    /// A slug: security, correctness, task, …
    #[arg(long)]
    pub category: String,
    /// Longer explanation; for a task, its policy lines (`ref:`, `push_to:`, …).
    #[arg(long, default_value = "")]
    pub details: String,
    /// A task this task waits for (repeat for several): no cell is offered it until each is
    /// fixed or retracted. Written as a `blocked-by:` line of the details.
    #[arg(long = "blocked-by", value_name = "TASK_ID")]
    pub blocked_by: Vec<String>,
    /// The first line (1-based) of the code it is about, in the first --file.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub line_start: Option<u32>,
    /// The last line of that code; needs --line-start, and is not before it.
    #[arg(long, value_name = "N", requires = "line_start")]
    pub line_end: Option<u32>,
    /// Record even when the same finding is already open.
    #[arg(long)]
    pub force: bool,
    /// Record for this origin's repository (a coordinator with no checkout).
    #[arg(long, value_name = "GIT_URL")]
    pub origin: Option<String>,
    /// The checkout whose repository the finding belongs to.
    #[arg(long, default_value = ".")]
    pub work_dir: PathBuf,
    /// Print the reply as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: FindingArgs, env: Env) -> CliResult {
    match args.command {
        FindingCommand::Close(a) => close(a, env).await,
        FindingCommand::Record(a) => record(a, env).await,
    }
}

async fn close(a: CloseArgs, env: Env) -> CliResult {
    // The group `which` lets exactly one of --commits-from, --commits and --pending through.
    let commits = if let Some(file) = a.commits_from {
        Commits::File(file)
    } else if let Some(range) = a.commits {
        Commits::Range(range)
    } else {
        return match a.origin {
            Some(origin) => sweep(origin, a.json, env).await,
            None => Err(
                CliError::failure("finding close --pending: no origin named")
                    .hint("give --origin URL, the repository whose merged reviews to close"),
            ),
        };
    };
    if a.origin.is_some() {
        return Err(
            CliError::failure("finding close: --origin names the repository to sweep")
                .hint("add --pending, or drop --origin to close by commits in a checkout"),
        );
    }
    let opts = CloseOptions {
        commits,
        target: a.target,
        work_dir: a.work_dir,
        task: a.task,
    };
    let report = finding_close::run(opts, env)
        .await
        .map_err(|e| cell_error("finding close", e))?;
    if a.json {
        print_json(&report)?;
    } else {
        metabob_process::outln!(
            "target origin/{}; {} commit(s); {} finding(s) named",
            report.target,
            report.commits,
            report.findings.len()
        );
        for f in &report.findings {
            let line = match &f.outcome {
                Outcome::Closed {
                    commit,
                    via,
                    verdict,
                } => format!("closed    fixed in {commit} (via {via}); verdict {verdict}"),
                Outcome::Pending {
                    commit, branches, ..
                } => format!(
                    "pending   {commit} is on {} but not merged into {}",
                    branches.join(", "),
                    report.target
                ),
                Outcome::Reverted {
                    commit,
                    reverted_by,
                } => format!("reverted  {commit} was reverted by {reverted_by}; not closed"),
                Outcome::Unpushed { commit } => format!(
                    "unpushed  {commit} is on no remote branch; push it, then run finding close again"
                ),
                Outcome::Missing { commit } => {
                    format!("missing   {commit} is on no branch of the origin; not closed")
                }
                Outcome::NotOpen { why } => format!("not open  {why}"),
                Outcome::Refused { why } => format!("refused   {why}"),
            };
            metabob_process::outln!("{} {line}", f.finding_id);
        }
    }
    Ok(Exit::Ok)
}

/// `finding close --pending --origin URL`: every pending fix judged again, one line each.
async fn sweep(origin: String, json: bool, env: Env) -> CliResult {
    let opts = SweepOptions {
        origin,
        cache_dir: None,
    };
    let report = finding_close::sweep_pending(opts, env)
        .await
        .map_err(|e| cell_error("finding close --pending", e))?;
    if json {
        print_json(&report)?;
        return Ok(Exit::Ok);
    }
    let mut closed = 0;
    for t in &report.tasks {
        let (id, target, fix) = (&t.task_id, &t.target, &t.fix_commit);
        let line = match &t.outcome {
            Outcome::Closed { commit, via, .. } => {
                closed += 1;
                format!("closed    {id} fixed in {commit} (via {via}), merged into {target}")
            }
            Outcome::Pending { branches, .. } => format!(
                "pending   {id} fix {fix} waits on {} (not merged into {target})",
                branches.join(", ")
            ),
            Outcome::Reverted { reverted_by, .. } => format!(
                "reverted  {id} fix {fix} was merged into {target}, then reverted by {reverted_by}; still pending"
            ),
            Outcome::Unpushed { .. } | Outcome::Missing { .. } => format!(
                "missing   {id} fix {fix} is on no branch of the origin (its branch deleted unmerged?); still pending"
            ),
            Outcome::NotOpen { why } => format!("not open  {id} {why}"),
            Outcome::Refused { why } => format!("refused   {id} {why}"),
        };
        metabob_process::outln!("{line}");
    }
    let truncated = if report.recall_truncated {
        "; the ledger's window was full, so older ones were not seen"
    } else {
        ""
    };
    let judged = report.tasks.len();
    metabob_process::outln!(
        "{}: {judged} pending fix(es) judged, {closed} closed, {} still pending{truncated}",
        report.repository,
        judged - closed
    );
    Ok(Exit::Ok)
}

async fn record(a: RecordArgs, env: Env) -> CliResult {
    if let (Some(start), Some(end)) = (a.line_start, a.line_end)
        && end < start
    {
        return Err(CliError::failure(format!(
            "finding record: --line-end {end} is before --line-start {start}"
        ))
        .hint("give the code's last line"));
    }
    let mut details = a.details;
    if !a.blocked_by.is_empty() {
        if !a.category.eq_ignore_ascii_case("task") {
            return Err(CliError::failure(
                "finding record: --blocked-by is for tasks, and this is no task",
            )
            .hint("record it with --category task"));
        }
        if let Some(bad) = a.blocked_by.iter().find(|b| !depends::is_task_id(b)) {
            return Err(CliError::failure(format!(
                "finding record: --blocked-by {}: not a task id",
                metabob_wire::text::one_line(bad, 80)
            ))
            .hint("name the task it waits for by its agf_… id (`task list` shows them)"));
        }
        for b in &a.blocked_by {
            details = format!("{}\n{}: {b}", details.trim_end(), depends::RECORDED_LINE);
        }
        details = details.trim_start().to_string();
    }
    let draft = FindingDraft {
        files: a.files,
        summary: a.summary,
        details,
        severity: a.severity,
        category: a.category,
        line_start: a.line_start,
        line_end: a.line_end,
        status: FindingStatus::Open,
    };
    let opts = RecordOptions {
        draft,
        force: a.force,
        origin: a.origin,
        work_dir: a.work_dir,
    };
    let outcome = record::run(opts, env)
        .await
        .map_err(|e| cell_error("finding record", e))?;
    if a.json {
        print_json(&outcome)?;
    } else {
        match &outcome {
            RecordOutcome::Recorded {
                concept_id,
                finding_ids,
                ..
            } => metabob_process::outln!("{} {concept_id}", finding_ids.join(" ")),
            RecordOutcome::AlreadyRecorded(d) => metabob_process::outln!(
                "Already recorded (open): {} — add details there, or pass --force. {} ({})",
                d.id,
                d.summary,
                d.files.join(", ")
            ),
        }
    }
    Ok(Exit::Ok)
}
