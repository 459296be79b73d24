use clap::Args;

use crate::env::Env;
use crate::error::{CliError, CliResult};

/// Run the attachment once, then one read through discovery; print each hop.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Check the attachment (the only mode).
    #[arg(long)]
    pub check: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(_args: AttachArgs, _env: Env) -> CliResult {
    Err(CliError::failure("attach --check: not built yet"))
}
