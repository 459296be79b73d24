//! The opt-in call log (SPEC.md §Call log): one JSON line per tool call, on this machine only.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use serde_json::json;

use metabob_process::env::Env;

/// Which entry point a call came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Stdio,
    /// `tool call` from a shell.
    Cli,
    /// The loopback resolver's `POST /v2/impulses/resolve` (crates/mcp/src/loopback.rs).
    Loopback,
    /// MCP over HTTP, `serve --http` (crates/mcp/src/http.rs).
    Http,
}

impl Via {
    fn as_str(self) -> &'static str {
        match self {
            Via::Stdio => "stdio",
            Via::Cli => "cli",
            Via::Loopback => "loopback",
            Via::Http => "http",
        }
    }
}

pub struct CallLog {
    path: PathBuf,
}

/// One call as the log records it: names and sizes, never values.
pub struct Entry<'a> {
    pub session: &'a str,
    pub tool: &'a str,
    pub via: Via,
    pub args: &'a str,
    pub outcome: &'a str,
    pub result: Option<&'a str>,
    pub ms: u128,
}

impl CallLog {
    pub fn from_env(env: &Env) -> Option<CallLog> {
        env.get("METABOB_CALL_LOG")
            .filter(|p| !p.trim().is_empty())
            .map(|p| CallLog {
                path: PathBuf::from(p),
            })
    }

    /// Appends one line (anchor: log_call). A failed write is logged and never fails the call.
    pub fn log(&self, e: &Entry<'_>) {
        let mut line = json!({
            "ts": metabob_wire::text::rfc3339_ms(metabob_process::clock::now_ms()),
            "session": e.session,
            "tool": e.tool,
            "via": e.via.as_str(),
            "args": e.args,
            "outcome": e.outcome,
            "ms": e.ms,
        });
        if let Some(r) = e.result {
            line["result"] = json!(r);
        }
        let write = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(err) = write {
            tracing::warn!(
                "the call log {} could not be written ({err}); the call went on",
                self.path.display()
            );
        }
    }
}
