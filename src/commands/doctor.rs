use clap::Args;

use crate::attachment::check::{attach_check, render_text};
use crate::env::Env;
use crate::error::CliResult;

/// Diagnose configuration, the network path and the attachment: the attach check plus the
/// whole state object (warnings, proxy, TLS, each hop). Exit 0 only when attached.
#[derive(Debug, Args)]
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
        crate::out!("{}", render_text(&report));
        if !args.attach {
            for w in &report.config.warnings {
                crate::outln!("{:<10} {w}", "warning");
            }
            crate::outln!("state");
            super::print_json(&report.state)?;
        }
    }
    Ok(super::attach::exit_for(&report))
}
