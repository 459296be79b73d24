use clap::Args;

use crate::env::Env;
use crate::error::{CliError, CliResult};

/// The embedded ledger.
#[derive(Debug, Args)]
pub struct LedgerArgs {}

pub async fn run(_args: LedgerArgs, _env: Env) -> CliResult {
    Err(CliError::failure("ledger: not built yet"))
}
