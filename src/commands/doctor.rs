use clap::Args;

use crate::env::Env;
use crate::error::{CliError, CliResult};

/// Diagnose configuration, the network path and the attachment.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(_args: DoctorArgs, _env: Env) -> CliResult {
    Err(CliError::failure("doctor: not built yet"))
}
