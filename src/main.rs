//! Thin entry: parse, dispatch, map errors to exit codes. Behaviour lives in the library.
// One future holds every subcommand's state machine (the ledger's layered router among them);
// laying it out takes rustc past its default query depth.
#![recursion_limit = "256"]

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use metabob_mcp::commands::{self, Cli};
use metabob_mcp::error::Exit;
use metabob_process::env::Env;

// The ledger's writer thread frees what the runtime's workers allocated for each request; with
// glibc's allocator those frees took the workers' arena locks, and malloc and its lock waits were
// about a fifth of a ledger write's CPU (docs/benchmarks.md, issue 44's fifth round).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // clap exits 2 on a usage error; here 2 means "not attached", which a cell entrypoint
        // acts on, so a mistyped command line is an ordinary failure. Help and version exit 0.
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                Exit::Failure.into()
            } else {
                Exit::Ok.into()
            };
        }
    };
    tracing_subscriber::fmt()
        .with_writer(metabob_process::out::LogWriter)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .without_time()
        .init();
    // `tool` answers one question and exits: the worker threads of a multi-thread runtime (made,
    // their stacks faulted in, then joined) cost it more than they could save. Its heavy reads
    // run on the blocking pool either way.
    let mut builder = if cli.is_one_tool_call() {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            metabob_process::errln!("error: cannot start the async runtime: {e}");
            return Exit::Failure.into();
        }
    };
    // A panic is a bug, never an answer: the hook has printed where it happened, and the exit
    // is the ordinary failure code, not the 101 no caller expects.
    let env = Env::from_process();
    let verbose = cli.verbose;
    let run = std::panic::AssertUnwindSafe(|| run_command(&runtime, cli, env));
    let result = match std::panic::catch_unwind(run) {
        Ok(r) => r,
        Err(_) => {
            runtime.shutdown_background();
            metabob_process::errln!(
                "error: internal error (a bug: the line above says where); nothing more was done, please report it"
            );
            return Exit::Failure.into();
        }
    };
    // A read of stdin on a blocking thread cannot be interrupted (the MCP server's, once its
    // client left by closing stdout); the command is done, so the process does not wait for it.
    runtime.shutdown_background();
    match result {
        Err(err) => {
            metabob_process::errln!("error: {err}");
            let chain = err.chain();
            if verbose && !chain.is_empty() {
                metabob_process::errln!("caused by:");
                for (n, cause) in chain.iter().enumerate() {
                    metabob_process::errln!("  {}: {cause}", n + 1);
                }
            }
            err.exit.into()
        }
        // The output was cut short by something other than a reader that left early.
        Ok(exit) => match metabob_process::out::stdout_failure() {
            Some(e) => {
                metabob_process::errln!(
                    "error: cannot write to stdout: {e}; the command ran but its output is incomplete: run it again with stdout somewhere writable"
                );
                Exit::Failure.into()
            }
            None => exit.into(),
        },
    }
}

/// Kept apart from `main` so the unwind boundary wraps a plain call, not the command's future.
fn run_command(
    runtime: &tokio::runtime::Runtime,
    cli: Cli,
    env: Env,
) -> metabob_mcp::error::CliResult {
    runtime.block_on(commands::run(cli, env))
}
