//! `serve` (also the bare `metabob-mcp`): the MCP server on stdio.

use std::sync::Arc;

use clap::Args;

use crate::env::Env;
use crate::error::{CliError, CliResult, Exit};
use crate::mcp::Ctx;

/// Serve MCP over stdio: JSON-RPC on stdin/stdout, logs on stderr (RUST_LOG).
#[derive(Debug, Args, Default)]
pub struct ServeArgs {}

pub async fn run(_args: ServeArgs, env: Env) -> CliResult {
    let ctx = Arc::new(Ctx::new(env, true));
    crate::mcp::server::serve_stdio(ctx)
        .await
        .map_err(CliError::failure)?;
    Ok(Exit::Ok)
}
