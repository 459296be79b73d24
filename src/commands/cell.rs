//! `cell run`: the container cell's loop. Flags set the variables of the same meaning (a flag
//! wins), so the entrypoint, compose files and a shell all configure it the same way.

use clap::{Args, Subcommand};

use crate::error::{CliError, CliResult, Exit};
use metabob_cell::cell_run::{self, config::CellConfig};
use metabob_process::env::Env;
use metabob_wire::report::Hint;

/// A container cell: pull tasks, run the harness, integrate, push and close until none is left.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ORIGIN=git://git/app.git HARNESS='sh /harness.sh' metabob-mcp cell run
  metabob-mcp cell run --origin /srv/git/app.git --harness ./fix.sh --task-dir ./task --work-dir ./work
  ON_EMPTY=wait IDLE_POLL=30 metabob-mcp cell run --log-format json    # a standing cell")]
pub struct CellArgs {
    #[command(subcommand)]
    pub command: CellCommand,
}

#[derive(Debug, Subcommand)]
pub enum CellCommand {
    /// Run the loop: exit 0 once nothing is left (ON_EMPTY=exit), 1 when the cell fails
    /// (FAIL_MAX tasks failed in a row), 2 not attached or the ledger away past LEDGER_WAIT,
    /// 143/130 on TERM/INT (the claim is given back first). A task that fails, conflicts or is
    /// refused by the origin is given back or parked, and the cell goes on.
    Run(RunArgs),
}

/// Every flag names its variable; unset, the variable's value or the default applies.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ORIGIN=git://git/app.git HARNESS='sh /harness.sh' metabob-mcp cell run    # what the image's entrypoint runs
  metabob-mcp cell run --origin /srv/git/app.git --harness ./fix.sh --task-dir ./task --work-dir ./work --vessel-id cell-1
  metabob-mcp cell run --on-empty wait --idle-poll 30 --log-format json       # a standing cell")]
pub struct RunArgs {
    /// [ORIGIN] The repository's git URL (required).
    #[arg(long, value_name = "GIT_URL")]
    pub origin: Option<String>,
    /// [HARNESS] The command (run by `sh -c` in the work directory) that fixes the task and
    /// commits with a `Fixes-Finding: <task_id>` trailer (required).
    #[arg(long, value_name = "COMMAND")]
    pub harness: Option<String>,
    /// [TASK_DIR] Where task.json and context.md go (default /task).
    #[arg(long, value_name = "DIR")]
    pub task_dir: Option<String>,
    /// [WORK_DIR] Where the origin is cloned (default /work).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<String>,
    /// [CLAIM_MINUTES] How long a claim lasts between renewals, 1-240 (default 60).
    #[arg(long, value_name = "MINUTES")]
    pub claim_minutes: Option<String>,
    /// [RENEW_EVERY] Seconds between renewals (default a third of the claim).
    #[arg(long, value_name = "SECONDS")]
    pub renew_every: Option<String>,
    /// [RETRY_MAX] The longest wait, in seconds, when others hold every open task (default 60).
    #[arg(long, value_name = "SECONDS")]
    pub retry_max: Option<String>,
    /// [PUSH_TRIES] Push attempts when other pushes keep moving the branch (default 5).
    #[arg(long, value_name = "N")]
    pub push_tries: Option<String>,
    /// [CONFLICT_RETRIES] Under `conflicts: retry`, harness runs on the fresh target before the
    /// task is given back as failed (default 2).
    #[arg(long, value_name = "N")]
    pub conflict_retries: Option<String>,
    /// [FAIL_MAX] Tasks failed in a row (harness failed, no commit, timed out) that stop the
    /// cell with exit 1 (default 3).
    #[arg(long, value_name = "N")]
    pub fail_max: Option<String>,
    /// [METABOB_PARK_AFTER] Distinct cells whose failures park a task (default 2).
    #[arg(long, value_name = "N")]
    pub park_after: Option<String>,
    /// [LEDGER_WAIT] Seconds a ledger that does not answer is waited out (default 600).
    #[arg(long, value_name = "SECONDS")]
    pub ledger_wait: Option<String>,
    /// [ORIGIN_WAIT] Seconds an origin that does not answer is waited out (default 600).
    #[arg(long, value_name = "SECONDS")]
    pub origin_wait: Option<String>,
    /// [HARNESS_TIMEOUT] Seconds the harness may run before its process group is killed and
    /// the task failed (default 7200).
    #[arg(long, value_name = "SECONDS")]
    pub harness_timeout: Option<String>,
    /// [SALVAGE_DIR] Where unpushed commits are kept as bundles (default $HOME/metabob-salvage).
    #[arg(long, value_name = "DIR")]
    pub salvage_dir: Option<String>,
    /// [ON_EMPTY] `exit` once nothing is open (default), or `wait` and poll: a standing cell,
    /// which also closes merged reviews on each idle poll.
    #[arg(long, value_name = "exit|wait")]
    pub on_empty: Option<String>,
    /// [IDLE_POLL] Seconds between polls under ON_EMPTY=wait (default 10).
    #[arg(long, value_name = "SECONDS")]
    pub idle_poll: Option<String>,
    /// [VESSEL_ID] The claimer's identity (default cell-<hostname>).
    #[arg(long, value_name = "ID")]
    pub vessel_id: Option<String>,
    /// [METABOB_LOG_FORMAT] `human` (default) or `json`: one JSON line per step.
    #[arg(long, value_name = "human|json")]
    pub log_format: Option<String>,
}

impl RunArgs {
    /// The flags given, as (variable, value).
    fn given(&self) -> Vec<(&'static str, &str)> {
        let all = [
            ("ORIGIN", &self.origin),
            ("HARNESS", &self.harness),
            ("TASK_DIR", &self.task_dir),
            ("WORK_DIR", &self.work_dir),
            ("CLAIM_MINUTES", &self.claim_minutes),
            ("RENEW_EVERY", &self.renew_every),
            ("RETRY_MAX", &self.retry_max),
            ("PUSH_TRIES", &self.push_tries),
            ("CONFLICT_RETRIES", &self.conflict_retries),
            ("FAIL_MAX", &self.fail_max),
            ("METABOB_PARK_AFTER", &self.park_after),
            ("LEDGER_WAIT", &self.ledger_wait),
            ("ORIGIN_WAIT", &self.origin_wait),
            ("HARNESS_TIMEOUT", &self.harness_timeout),
            ("SALVAGE_DIR", &self.salvage_dir),
            ("ON_EMPTY", &self.on_empty),
            ("IDLE_POLL", &self.idle_poll),
            ("VESSEL_ID", &self.vessel_id),
            ("METABOB_LOG_FORMAT", &self.log_format),
        ];
        all.into_iter()
            .filter_map(|(k, v)| v.as_deref().map(|v| (k, v)))
            .collect()
    }
}

pub async fn run(args: CellArgs, mut env: Env) -> CliResult {
    let CellCommand::Run(a) = args.command;
    for (name, value) in a.given() {
        env.set(name, value);
    }
    let host = hostname();
    let cfg = CellConfig::from_env(&env, &host).map_err(|e| {
        // Every setting is a variable or a flag; an ORIGIN of no form a clone takes also gets
        // the forms it may take.
        let set = "set it, or pass its flag (see --help)";
        let hint = match e.hint() {
            Some(forms) => format!("{forms}; {set}"),
            None => set.to_string(),
        };
        CliError::caused_by("cell run", e).hint(hint)
    })?;
    Ok(match cell_run::run(cfg, env).await {
        0 => Exit::Ok,
        2 => Exit::NotAttached,
        130 => Exit::Interrupted,
        143 => Exit::Terminated,
        _ => Exit::Failure,
    })
}

/// This machine's name, as `uname -n` prints it: distinct per container and kept across a
/// `docker restart`, so a restarted cell is the same claimer.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unnamed".into())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Each setting has its flag, whose help names the variable it sets.
    #[test]
    fn every_setting_has_a_flag_that_names_its_variable() {
        let cli = crate::commands::Cli::command();
        let run = cli
            .find_subcommand("cell")
            .and_then(|c| c.find_subcommand("run"))
            .expect("cell run");
        let mut named: Vec<String> = run
            .get_arguments()
            .filter_map(|a| {
                let help = a.get_help()?.to_string();
                let var = help.strip_prefix('[')?.split(']').next()?.to_string();
                Some(var)
            })
            .collect();
        named.sort();
        let mut want: Vec<String> = metabob_cell::cell_run::config::SETTINGS
            .iter()
            .map(|s| s.to_string())
            .collect();
        want.sort();
        assert_eq!(named, want);
    }
}
