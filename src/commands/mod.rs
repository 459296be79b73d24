//! The CLI surface: one file per command, each an argument struct (its doc comment is the help
//! text) and a `run` that calls the library. No decisions are made here.

pub mod attach;
pub mod cell;
pub mod doctor;
pub mod finding;
pub mod ledger;
pub mod serve;
pub mod task;
pub mod tool;

use clap::{Args, Parser, Subcommand};

use crate::error::CliResult;
use metabob_process::env::Env;

/// A toolkit for container cells that take tasks from a shared findings ledger.
#[derive(Debug, Parser)]
#[command(name = "metabob-mcp", version, about, propagate_version = true, after_help = EXAMPLES)]
pub struct Cli {
    /// Declared once for every command: those that talk to the ledger take them before or after
    /// their name; the others refuse them by name (`Command::ledger_free`).
    #[command(flatten)]
    pub connect: Connect,
    /// On a failure, print each cause under the error line, outermost first.
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// Without a command, `serve`: so an MCP client entry `{ "command": "metabob-mcp" }` works.
    #[command(subcommand)]
    pub command: Option<Command>,
}

impl Cli {
    /// `tool …`: one question, answered in process, then the exit.
    pub fn is_one_tool_call(&self) -> bool {
        matches!(self.command, Some(Command::Tool(_)))
    }
}

const EXAMPLES: &str = "\
Examples:
  metabob-mcp ledger serve                         # a ledger on 127.0.0.1:18100, data in ~/.substrate
  metabob-mcp attach --check                       # is this machine attached to it?
  metabob-mcp task pull --origin URL --task-dir ./task --work-dir ./work
  metabob-mcp --ledger http://ledger.lan:18100 --api-key mb_live_… task list
  metabob-mcp                                      # the agent's MCP server on stdio";

/// How a command reaches the ledger: global flags, so they may stand before or after the command.
/// Only the commands that talk to a ledger act on them: `ledger …` reads its store directly and
/// `tool list` asks nothing, so those refuse them.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Reaching the ledger")]
pub struct Connect {
    /// The API key; wins over METABOB_API_KEY and the config file.
    #[arg(long, value_name = "KEY", global = true)]
    pub api_key: Option<String>,
    /// The ledger's address, exactly as `ledger serve` prints it (http://127.0.0.1:18100); wins
    /// over METABOB_LEDGER, then DISCOVERY_ENDPOINT and the config file.
    #[arg(long, value_name = "URL", global = true)]
    pub ledger: Option<String>,
    /// A substrate's API endpoint; wins over METABOB_ENDPOINT. Only its legacy local port 18080
    /// implies a ledger (18100): to name a ledger, use --ledger.
    #[arg(long, value_name = "URL", global = true)]
    pub endpoint: Option<String>,
}

impl Connect {
    fn given(&self) -> Option<&'static str> {
        [
            (self.api_key.is_some(), "--api-key"),
            (self.ledger.is_some(), "--ledger"),
            (self.endpoint.is_some(), "--endpoint"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }

    /// Precedence step 1: flags become environment before the configuration is read.
    fn apply(self, env: &mut Env) {
        if let Some(key) = self.api_key {
            env.set("METABOB_API_KEY", key);
        }
        if let Some(endpoint) = self.endpoint {
            env.set("METABOB_ENDPOINT", endpoint);
        }
        // The ledger's address is discovery's: the anchor every command attaches through.
        let ledger = self
            .ledger
            .or_else(|| env.get("METABOB_LEDGER").map(str::to_string));
        if let Some(ledger) = ledger {
            env.set("DISCOVERY_ENDPOINT", ledger);
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the attachment once and print each hop; exit 0 only when attached and a read resolved.
    Attach(attach::AttachArgs),
    /// A container cell's loop: pull, harness, integrate, push, verify, close, again.
    Cell(Box<cell::CellArgs>),
    /// Diagnose configuration, network path and attachment.
    Doctor(doctor::DoctorArgs),
    /// Findings: close by commit, record.
    Finding(finding::FindingArgs),
    /// The embedded ledger: discovery, identity and concept-db over SQLite or PostgreSQL.
    Ledger(ledger::LedgerArgs),
    /// Serve MCP over stdio (the default command).
    Serve(serve::ServeArgs),
    /// A cell's task: pull, renew, release, reopen, and the board (list).
    Task(task::TaskArgs),
    /// Run MCP tools from a shell, in process: list, call.
    Tool(tool::ToolArgs),
}

impl Command {
    /// For a command that never talks to a ledger, what it is and why; `None` for the others.
    fn ledger_free(&self) -> Option<&'static str> {
        match self {
            Command::Ledger(_) => Some("`ledger …`, which works on its store (--data or --store)"),
            Command::Tool(tool::ToolArgs {
                command: tool::ToolCommand::List { .. },
            }) => Some("`tool list`, which asks nothing of a ledger"),
            _ => None,
        }
    }
}

pub async fn run(cli: Cli, mut env: Env) -> CliResult {
    let command = cli
        .command
        .unwrap_or(Command::Serve(serve::ServeArgs::default()));
    match (command.ledger_free(), cli.connect.given()) {
        // Taken silently, a key or address meant for a ledger would hide the user's mistake.
        (Some(name), Some(flag)) => {
            return Err(
                crate::error::CliError::failure(format!("{flag} does not act on {name}"))
                    .hint("drop it"),
            );
        }
        (Some(_), None) => {}
        (None, _) => cli.connect.apply(&mut env),
    }
    match command {
        Command::Serve(args) => serve::run(args, env).await,
        Command::Tool(args) => tool::run(args, env).await,
        Command::Attach(args) => attach::run(args, env).await,
        Command::Cell(args) => cell::run(*args, env).await,
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
    metabob_process::outln!("{text}");
    Ok(())
}

/// A cell command's failure as the CLI reports it: exit 2 for the attachment, 1 otherwise.
pub(crate) fn cell_error(context: &str, e: metabob_cell::CellError) -> crate::error::CliError {
    use crate::error::{CliError, Exit};
    use metabob_cell::CellError;
    match e {
        CellError::NotAttached(cause) => CliError::from(cause).exit(Exit::NotAttached),
        // Met partway, a lost attachment is still "not attached": the caller's exit code must
        // not depend on when the key was revoked or the ledger went away.
        CellError::Ledger(e) if e.is_detachment() => {
            let hint = hint_then(
                &e,
                "nothing more was sent (diagnose with `metabob-mcp attach --check`)",
            );
            CliError::caused_by(&format!("{context}: not attached"), e)
                .exit(Exit::NotAttached)
                .hint(hint)
        }
        // Exit 2 as for an outage, so that whoever waits out the one waits out the other.
        CellError::Ledger(e) if e.is_unavailable() => {
            let hint = hint_then(&e, "try again shortly");
            CliError::caused_by(&format!("{context}: the ledger is unavailable for now"), e)
                .exit(Exit::NotAttached)
                .hint(hint)
        }
        CellError::Ledger(e) => CliError::caused_by(&format!("{context}: the ledger"), e),
        // The guard's refusal already names the command it refused for.
        CellError::Outgoing(refusal) => CliError::from(refusal),
        other => CliError::caused_by(context, other),
    }
}

/// `e`'s own hint, then what the command adds to it.
fn hint_then(e: &impl metabob_wire::report::Hint, more: &str) -> String {
    match e.hint() {
        Some(own) => metabob_wire::report::join(own, Some(more)),
        None => more.to_string(),
    }
}
