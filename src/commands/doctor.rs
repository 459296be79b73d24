use clap::Args;

use crate::error::CliResult;
use metabob_net::attachment::check::{attach_check, render_text};
use metabob_process::env::Env;

/// Diagnose configuration, the network path and the attachment: each hop, the warnings, the
/// network's cause and when the attachment settled (`--json`: the whole state object). Exit 0
/// only when attached.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp doctor                               # every hop, warnings, the network's cause
  metabob-mcp doctor --json                        # the whole state object
  HTTPS_PROXY=http://proxy.lan:3128 metabob-mcp doctor --ledger https://ledger.lan")]
pub struct DoctorArgs {
    /// Print only the attach check's hops (same as `attach --check`).
    #[arg(long)]
    pub attach: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: DoctorArgs, env: Env) -> CliResult {
    let report = attach_check(env).await;
    if args.json {
        super::print_json(&report)?;
    } else {
        metabob_process::out!("{}", render_text(&report));
        if !args.attach {
            for w in &report.config.warnings {
                metabob_process::outln!("{:<10} {w}", "warning");
            }
            let state = &report.state;
            metabob_process::outln!(
                "{:<10} {}",
                "network",
                state
                    .network
                    .cause_line
                    .as_deref()
                    .unwrap_or("no network failure")
            );
            metabob_process::outln!(
                "{:<10} started {}; settled {}",
                "timing",
                state.started_at,
                state.settled_at.as_deref().unwrap_or("not yet")
            );
            metabob_process::outln!(
                "{:<10} the whole state object: metabob-mcp doctor --json",
                "more"
            );
        }
    }
    Ok(super::attach::exit_for(&report))
}
