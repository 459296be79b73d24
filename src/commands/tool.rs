//! `tool list` and `tool call NAME --args JSON`: any MCP tool from a shell, in process, with the
//! answer MCP would give.

use clap::{Args, Subcommand};

use crate::error::{CliError, CliResult, Exit};
use metabob_mcp_server::Ctx;
use metabob_mcp_server::calllog::Via;
use metabob_process::env::Env;

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp tool list
  metabob-mcp tool call get_problems --args '{\"file_path\": \"src/parse.py\"}'")]
pub struct ToolArgs {
    #[command(subcommand)]
    pub command: ToolCommand,
}

#[derive(Debug, Subcommand)]
pub enum ToolCommand {
    /// List the tools with their descriptions (--json: with input schemas, as tools/list).
    #[command(after_help = "\
Examples:
  metabob-mcp tool list
  metabob-mcp tool list --json                     # with each tool's input schema")]
    List {
        /// Print the tools as MCP's tools/list answers them, input schemas included.
        #[arg(long)]
        json: bool,
    },
    /// Run one tool; prints its text answer, exit 1 when the tool reports an error.
    #[command(after_help = "\
Examples:
  metabob-mcp tool call get_problems --args '{\"file_path\": \"src/parse.py\"}'
  metabob-mcp tool call search_codebase --args '{\"query\": \"parse\"}' --json
  metabob-mcp tool call concept_search --args '{\"query\": \"parser last token\"}'")]
    Call {
        /// The tool's name, as `tool list` shows it.
        name: String,
        /// The arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// Print the MCP result object ({content, isError}) instead of the text.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(args: ToolArgs, env: Env) -> CliResult {
    match args.command {
        ToolCommand::List { json } => {
            if json {
                super::print_json(&metabob_mcp_server::server::tool_list())?;
            } else {
                for t in metabob_mcp_server::tools::TOOLS {
                    metabob_process::outln!("{:<22} {}", t.name, t.description);
                }
            }
            Ok(Exit::Ok)
        }
        ToolCommand::Call { name, args, json } => {
            let value: serde_json::Value = serde_json::from_str(&args).map_err(|e| {
                CliError::failure(format!("--args is not JSON ({e})"))
                    .hint("pass an object such as '{\"query\": \"parse\"}'")
                    .because(e)
            })?;
            if !value.is_object() {
                return Err(
                    CliError::failure("--args must be a JSON object").hint("pass one such as '{}'")
                );
            }
            if metabob_mcp_server::tools::spec(&name).is_none() {
                return Err(CliError::failure(metabob_mcp_server::tools::unknown_tool(
                    &name,
                )));
            }
            let ctx = Ctx::new(env, false);
            let reply = metabob_mcp_server::tools::call(
                &ctx,
                &name,
                value,
                Via::Cli,
                std::future::pending(),
            )
            .await
            .expect("a call that is never cancelled answers");
            if json {
                super::print_json(&serde_json::json!({
                    "content": [{"type": "text", "text": reply.text}],
                    "isError": reply.is_error,
                }))?;
            } else {
                metabob_process::outln!("{}", reply.text);
            }
            Ok(if reply.is_error {
                Exit::Failure
            } else {
                Exit::Ok
            })
        }
    }
}
