//! The MCP test client: an in-process rmcp client over a duplex pipe to the server of
//! `metabob_mcp_server`, as the MCP tests and the tests of other tools' MCP halves speak to it.

// Roots are deprecated by SEP-2577, and still what MCP clients send.
#![allow(deprecated)]

use std::path::Path;
use std::sync::Arc;

use metabob_mcp_server::Ctx;
use metabob_process::env::Env;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ListRootsResult, Root,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::Value;

use super::{TestEnv, normalize};

#[derive(Clone, Default)]
pub struct Client {
    /// `Some`: the client declares roots and answers with these URIs (which a test may change).
    pub roots: Option<Arc<std::sync::Mutex<Vec<String>>>>,
}

impl Client {
    pub fn with_roots(roots: Vec<String>) -> Client {
        Client {
            roots: Some(Arc::new(std::sync::Mutex::new(roots))),
        }
    }
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let caps = match self.roots {
            Some(_) => ClientCapabilities::builder().enable_roots().build(),
            None => ClientCapabilities::default(),
        };
        ClientConfig::new(caps, Implementation::new("metabob-tests", "0"))
    }

    #[allow(deprecated)]
    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let roots = match &self.roots {
            Some(r) => r.lock().expect("roots lock").clone(),
            None => Vec::new(),
        };
        Ok(ListRootsResult::new(
            roots.into_iter().map(Root::new).collect(),
        ))
    }
}

pub struct Session {
    pub client: RunningService<RoleClient, Client>,
}

impl Session {
    /// A server with `env`'s variables launched in `cwd`, and a connected client.
    pub async fn start(env: &TestEnv, cwd: &Path, client: Client) -> Session {
        let ctx = Arc::new(Ctx::new(Env::new(env.vars.clone(), cwd), true));
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        tokio::spawn(async move {
            metabob_mcp_server::server::serve(ctx, tokio::io::split(theirs))
                .await
                .expect("the server runs until the client leaves");
        });
        let client = client
            .serve(tokio::io::split(ours))
            .await
            .expect("initialize");
        Session { client }
    }

    /// Calls a tool; returns (text, is_error).
    pub async fn call(&self, name: &str, args: Value) -> (String, bool) {
        let mut p = CallToolRequestParams::new(name.to_string());
        if let Value::Object(m) = args {
            p = p.with_arguments(m);
        }
        let r = self.client.call_tool(p).await.expect("tools/call answers");
        let text = r
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect::<Vec<_>>()
            .join("\n");
        (text, r.is_error.unwrap_or(false))
    }

    /// Calls a tool and returns its reply as a snapshot shows it (see [`shown`]).
    pub async fn shown(&self, env: &TestEnv, name: &str, args: Value) -> String {
        let (text, err) = self.call(name, args).await;
        shown(&text, err, env)
    }

    pub async fn ok(&self, name: &str, args: Value) -> String {
        let (text, err) = self.call(name, args).await;
        assert!(!err, "{name} failed: {text}");
        text
    }
}

/// A tool reply as its snapshot shows it: normalised, and marked when it is an error.
pub fn shown(text: &str, is_error: bool, env: &TestEnv) -> String {
    let text = normalize(text, env);
    if is_error {
        format!("[tool error]\n{text}")
    } else {
        text
    }
}
