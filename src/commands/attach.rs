use clap::Args;

use crate::error::{CliResult, Exit};
use metabob_net::attachment::check::{attach_check, render_text};
use metabob_process::env::Env;

/// Run the attachment once, as the server does, then one read through discovery; print each
/// hop. Exit 0 only when attached and the read resolved. Writes nothing.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp attach --check
  metabob-mcp attach --check --ledger http://ledger.lan:18100 --api-key mb_live_…
  metabob-mcp attach --check --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"attached\"])'")]
pub struct AttachArgs {
    /// Check the attachment (required: it is the command's only mode).
    #[arg(long, required = true)]
    pub check: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: AttachArgs, env: Env) -> CliResult {
    let report = attach_check(env).await;
    if args.json {
        super::print_json(&report)?;
    } else {
        metabob_process::out!("{}", render_text(&report));
    }
    Ok(exit_for(&report))
}

/// Exit 0 only when attached and the read resolved.
pub(crate) fn exit_for(report: &metabob_net::attachment::check::CheckReport) -> Exit {
    if report.ok() { Exit::Ok } else { Exit::Failure }
}
