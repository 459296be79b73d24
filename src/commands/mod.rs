//! The CLI surface: one file per command, each an argument struct (its doc comment is the help
//! text) and a `run` that calls the library. No decisions are made here.

pub mod attach;
pub mod doctor;
pub mod finding;
pub mod ledger;
pub mod serve;
pub mod task;
pub mod tool;

use clap::{Parser, Subcommand};

use crate::env::Env;
use crate::error::CliResult;

/// A toolkit for container cells that take tasks from a shared findings ledger.
#[derive(Debug, Parser)]
#[command(name = "metabob-mcp", version, about, propagate_version = true)]
pub struct Cli {
    /// The API key (METABOB_API_KEY); wins over the environment and the config file.
    #[arg(long, global = true, value_name = "KEY")]
    pub api_key: Option<String>,
    /// The ledger's address, exactly as `ledger serve` prints it (http://127.0.0.1:18100); it
    /// wins over DISCOVERY_ENDPOINT and the config file.
    #[arg(long, global = true, value_name = "URL", env = "METABOB_LEDGER")]
    pub ledger: Option<String>,
    /// A substrate's API endpoint (METABOB_ENDPOINT); only its legacy local port 18080 implies
    /// a ledger (18100). To name a ledger, use --ledger.
    #[arg(long, global = true, value_name = "URL")]
    pub endpoint: Option<String>,
    /// Without a command, `serve`: so an MCP client entry `{ "command": "metabob-mcp" }` works.
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the attachment once and print each hop; exit 0 only when attached and a read resolved.
    Attach(attach::AttachArgs),
    /// Diagnose configuration, network path and attachment.
    Doctor(doctor::DoctorArgs),
    /// Findings: close by commit, record.
    Finding(finding::FindingArgs),
    /// The embedded ledger: discovery, identity and concept-db over SQLite or PostgreSQL.
    Ledger(ledger::LedgerArgs),
    /// Serve MCP over stdio (the default command).
    Serve(serve::ServeArgs),
    /// A cell's task: pull, renew, release.
    Task(task::TaskArgs),
    /// Run MCP tools from a shell, in process: list, call.
    Tool(tool::ToolArgs),
}

pub async fn run(cli: Cli, mut env: Env) -> CliResult {
    // Precedence step 1: flags become environment before the loaders read it.
    if let Some(key) = cli.api_key {
        env.set("METABOB_API_KEY", key);
    }
    if let Some(endpoint) = cli.endpoint {
        env.set("METABOB_ENDPOINT", endpoint);
    }
    // The ledger's address is discovery's: the anchor every command attaches through.
    if let Some(ledger) = cli.ledger {
        env.set("DISCOVERY_ENDPOINT", ledger);
    }
    match cli
        .command
        .unwrap_or(Command::Serve(serve::ServeArgs::default()))
    {
        Command::Serve(args) => serve::run(args, env).await,
        Command::Tool(args) => tool::run(args, env).await,
        Command::Attach(args) => attach::run(args, env).await,
        Command::Doctor(args) => doctor::run(args, env).await,
        Command::Finding(args) => finding::run(args, env).await,
        Command::Ledger(args) => ledger::run(args, env).await,
        Command::Task(args) => task::run(args, env).await,
    }
}

/// Prints a reply as pretty JSON on stdout.
pub(crate) fn print_json(v: &impl serde::Serialize) -> Result<(), crate::error::CliError> {
    let text = serde_json::to_string_pretty(v).map_err(|e| {
        crate::error::CliError::failure(format!("cannot render the reply as JSON: {e}"))
    })?;
    crate::outln!("{text}");
    Ok(())
}

/// A cell command's failure as the CLI reports it: exit 2 for the attachment, 1 otherwise.
pub(crate) fn cell_error(context: &str, e: crate::cell::CellError) -> crate::error::CliError {
    use crate::cell::CellError;
    use crate::error::CliError;
    match e {
        CellError::NotAttached(line) => CliError::not_attached(line),
        // Met partway, a lost attachment is still "not attached": the caller's exit code must
        // not depend on when the key was revoked or the ledger went away.
        CellError::Ledger(e) if e.is_detachment() => CliError::not_attached(format!(
            "{context}: not attached: {e}; nothing more was sent (diagnose with `metabob-mcp attach --check`)"
        )),
        // Exit 2 as for an outage, so that whoever waits out the one waits out the other.
        CellError::Ledger(e) if e.is_unavailable() => CliError::not_attached(format!(
            "{context}: the ledger is unavailable for now: {e}; try again shortly"
        )),
        // The guard's refusal already names the command it refused for.
        CellError::Outgoing(refusal) => CliError::failure(refusal.to_string()),
        other => CliError::failure(format!("{context}: {other}")),
    }
}
