//! The MCP surface over stdio (SPEC.md §The MCP server): rmcp carries the protocol; each call goes
//! to the one registry path. stdout is JSON-RPC only; logs go to stderr.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

use super::calllog::Via;
use super::ctx::Ctx;
use super::instructions::INSTRUCTIONS;
use super::tools::{self, TOOLS};
use super::workspace::Roots;

#[derive(Clone)]
pub struct Server {
    ctx: Arc<Ctx>,
}

impl Server {
    pub fn new(ctx: Arc<Ctx>) -> Server {
        Server { ctx }
    }

    /// Asks a client that declared roots for them; the workspace waits for the answer.
    fn ask_roots(&self, peer: rmcp::Peer<RoleServer>) {
        let declares = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.roots.is_some());
        if !declares {
            return;
        }
        self.ctx.workspace.set_roots(Roots::Pending);
        let ctx = self.ctx.clone();
        tokio::spawn(async move {
            #[allow(deprecated)] // roots are deprecated by SEP-2577, and still what clients send
            match peer.list_roots().await {
                Ok(r) => {
                    let uris: Vec<String> = r.roots.into_iter().map(|r| r.uri).collect();
                    ctx.workspace.answer_roots(&uris);
                }
                Err(e) => {
                    tracing::info!(
                        "the client did not answer roots/list ({e}); going on without roots"
                    );
                    ctx.workspace.set_roots(Roots::NotAsked);
                }
            }
        });
    }
}

/// The tool list as MCP describes it.
pub fn tool_list() -> Vec<Tool> {
    TOOLS
        .iter()
        .map(|t| Tool::new(t.name, t.description, Arc::new((t.schema)())))
        .collect()
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "metabob-mcp",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tool_list()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request
            .arguments
            .map(serde_json::Value::Object)
            .unwrap_or(serde_json::Value::Null);
        let ctx = self.ctx.clone();
        let name = request.name.to_string();
        // rmcp sends no answer for a cancelled request; the call stops being awaited here.
        let Some(reply) = tools::call(&ctx, &name, args, Via::Stdio, context.ct.cancelled()).await
        else {
            return Err(ErrorData::internal_error("cancelled by the client", None));
        };
        let content = vec![ContentBlock::text(reply.text)];
        Ok(if reply.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        }
        .into())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.ask_roots(context.peer);
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.ask_roots(context.peer);
    }
}

/// Serves MCP on `transport` until the client closes it (the in-process tests' entry).
pub async fn serve<T, E, A>(ctx: Arc<Ctx>, transport: T) -> Result<(), String>
where
    T: rmcp::transport::IntoTransport<RoleServer, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    run(ctx, transport, Arc::new(tokio::sync::Notify::new())).await
}

/// Serves MCP on this process's stdin and stdout (anchor: serve_stdio). rmcp logs a failed
/// write and reads on, so a client that closed our stdout would leave the server running: a
/// failed write to stdout ends the session instead.
pub async fn serve_stdio(ctx: Arc<Ctx>) -> Result<(), String> {
    let gone = Arc::new(tokio::sync::Notify::new());
    let stdout = WatchedWriter {
        inner: tokio::io::stdout(),
        gone: gone.clone(),
    };
    run(ctx, (tokio::io::stdin(), stdout), gone).await
}

/// Runs a session until the transport closes or `gone` is signalled.
async fn run<T, E, A>(
    ctx: Arc<Ctx>,
    transport: T,
    gone: Arc<tokio::sync::Notify>,
) -> Result<(), String>
where
    T: rmcp::transport::IntoTransport<RoleServer, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let running = Server::new(ctx)
        .serve(transport)
        .await
        .map_err(|e| format!("the MCP session did not start: {e}"))?;
    let cancel = running.cancellation_token();
    tokio::select! {
        r = running.waiting() => {
            r.map_err(|e| format!("the MCP session ended abnormally: {e}"))?;
        }
        _ = gone.notified() => {
            tracing::info!("stdout is closed: the client is gone");
            cancel.cancel();
        }
    }
    Ok(())
}

/// An async writer that signals the first write error.
struct WatchedWriter<W> {
    inner: W,
    gone: Arc<tokio::sync::Notify>,
}

impl<W: tokio::io::AsyncWrite + Unpin> WatchedWriter<W> {
    fn watch<T>(
        &self,
        r: std::task::Poll<std::io::Result<T>>,
    ) -> std::task::Poll<std::io::Result<T>> {
        if let std::task::Poll::Ready(Err(_)) = &r {
            self.gone.notify_one();
        }
        r
    }
}

impl<W: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for WatchedWriter<W> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(r)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(r)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
