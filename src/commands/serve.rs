//! `serve` (also the bare `metabob-mcp`): the MCP server on stdio, or over HTTP with `--http`
//! (SPEC.md §MCP over HTTP), with the loopback resolver beside it (SPEC.md §Loopback resolver).

use std::io::Write;
use std::sync::Arc;

use clap::Args;

use crate::error::{CliError, CliResult, Exit};
use metabob_mcp_server::Ctx;
use metabob_mcp_server::{http, loopback};
use metabob_process::env::Env;
use metabob_wire::report;

/// Serve MCP over stdio: JSON-RPC on stdin/stdout, logs on stderr (RUST_LOG). The loopback
/// resolver (POST /v2/impulses/resolve, GET /health) listens on 127.0.0.1 beside it, its address
/// announced on stderr.
#[derive(Debug, Args, Default)]
#[command(after_help = "\
Examples:
  metabob-mcp serve                                # MCP on stdio; or a client entry { \"command\": \"metabob-mcp\" }
  METABOB_CALL_LOG=/task/calls.jsonl metabob-mcp serve --resolver-port 7777
  METABOB_HTTP_KEY=secret metabob-mcp serve --http 0.0.0.0:8787")]
pub struct ServeArgs {
    /// Serve MCP over HTTP at ADDR (HOST:PORT), path /mcp, instead of stdio: one JSON body per
    /// request, no session. The process then serves HTTP only and ends on SIGTERM or SIGINT.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// The key every --http request must carry (Authorization: Bearer KEY); required when ADDR
    /// is not loopback. Default: METABOB_HTTP_KEY, which keeps it out of the process list.
    #[arg(long, value_name = "KEY")]
    pub http_key: Option<String>,
    /// The loopback resolver's port on 127.0.0.1 (0: a free one). Default: METABOB_RESOLVER_PORT,
    /// else a free one.
    #[arg(long, value_name = "N")]
    pub resolver_port: Option<u16>,
    /// Do not start the loopback resolver.
    #[arg(long)]
    pub no_resolver: bool,
}

// anchor: run
pub async fn run(args: ServeArgs, env: Env) -> CliResult {
    // An address that cannot be served safely is refused before anything starts.
    let plan = match &args.http {
        Some(addr) => {
            let key = args
                .http_key
                .clone()
                .or_else(|| env.get("METABOB_HTTP_KEY").map(str::to_string));
            Some(http::plan(addr, key).map_err(http_failure)?)
        }
        None => None,
    };
    let port = if args.no_resolver {
        None
    } else {
        Some(loopback::requested_port(args.resolver_port, &env))
    };
    let ctx = Arc::new(Ctx::new(env, true));
    if let Some(port) = port {
        start_resolver(&ctx, port).await;
    }
    match plan {
        Some(plan) => serve_http(ctx, plan).await,
        None => {
            metabob_mcp_server::server::serve_stdio(ctx).await?;
            Ok(Exit::Ok)
        }
    }
}

/// Starts the resolver in the background and announces it on stderr (stdout carries JSON-RPC
/// only). A resolver that cannot start is said in one line and MCP is served regardless: the
/// client that launched this process needs its tools more than a local caller needs the port.
async fn start_resolver(ctx: &Arc<Ctx>, port: Result<u16, loopback::LoopbackError>) {
    let bound = match port {
        Ok(port) => loopback::bind(port).await,
        Err(e) => Err(e),
    };
    match bound {
        Ok((listener, addr)) => {
            announce(&format!("loopback resolver on http://{addr}"));
            let resolver = Arc::new(loopback::Resolver::new(ctx.clone()));
            tokio::spawn(loopback::serve(
                listener,
                resolver,
                std::future::pending::<()>(),
            ));
        }
        Err(e) => announce(&format!(
            "loopback resolver not started: {}",
            report::with_hint(&e)
        )),
    }
}

/// Serves MCP over HTTP until SIGTERM or SIGINT.
async fn serve_http(ctx: Arc<Ctx>, plan: http::Plan) -> CliResult {
    let (listener, addr) = http::bind(&plan).await.map_err(http_failure)?;
    announce(&format!("MCP over HTTP on http://{addr}{}", http::MCP_PATH));
    http::serve(listener, http::router(ctx, &plan), stop_signal()).await;
    Ok(Exit::Ok)
}

/// A refused start: exit 2 when the key is missing (as for any missing credential), 1 otherwise.
fn http_failure(e: http::HttpError) -> CliError {
    let exit = if e.is_missing_key() {
        Exit::NotAttached
    } else {
        Exit::Failure
    };
    CliError::from(e).exit(exit)
}

/// One plain line on stderr, whatever RUST_LOG says: callers read addresses from it.
fn announce(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "metabob-mcp: {line}");
    let _ = err.flush();
}

async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
    }
    tracing::info!("serve --http: stopping");
}
