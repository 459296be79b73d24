//! The MCP surface over stdio (SPEC.md §The MCP server): rmcp carries the protocol on our own
//! line framing (`framing.rs`, which answers what is not a message); each call goes to the one
//! registry path. stdout is JSON-RPC only; logs go to stderr.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use tokio::io::{AsyncRead, AsyncWrite};

use super::calllog::Via;
use super::ctx::Ctx;
use super::framing;
use super::instructions::INSTRUCTIONS;
use super::tools::{self, Reply, TOOLS};
use super::workspace::Roots;

#[derive(Clone)]
pub struct Server {
    ctx: Arc<Ctx>,
    /// The entry point the call log names: stdio, or MCP over HTTP (`crates/mcp/src/http.rs`).
    via: Via,
}

impl Server {
    pub fn new(ctx: Arc<Ctx>) -> Server {
        Server::over(ctx, Via::Stdio)
    }

    /// The same server for another MCP transport, named `via` in the call log.
    pub fn over(ctx: Arc<Ctx>, via: Via) -> Server {
        Server { ctx, via }
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
        let call = tools::call(&ctx, &name, args, self.via, context.ct.cancelled());
        let Some(reply) = answer_even_if_it_panics(&name, call).await else {
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

/// Why an MCP session stopped other than by its client leaving.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Boxed: rmcp's error is large, and this one is returned through every caller.
    #[error("the MCP session did not start")]
    Start(#[source] Box<rmcp::service::ServerInitializeError>),
    #[error("the MCP session ended abnormally")]
    Ended(#[source] tokio::task::JoinError),
}

/// No advice: the session's own transport failed, and its cause is the line.
impl metabob_wire::report::Hint for SessionError {}

/// Serves MCP on a byte stream until the client closes it (the in-process tests' entry), through
/// the same framing as stdio.
pub async fn serve<R, W>(ctx: Arc<Ctx>, (read, write): (R, W)) -> Result<(), SessionError>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    run(ctx, read, write).await
}

/// Serves MCP on this process's stdin and stdout (anchor: serve_stdio). rmcp logs a failed
/// write and reads on, so a client that closed our stdout would leave the server running: a
/// failed write to stdout ends the session instead (the framing's writer signals it).
pub async fn serve_stdio(ctx: Arc<Ctx>) -> Result<(), SessionError> {
    run(ctx, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Runs a session on framed `read` and `write` until the input ends or the output fails.
async fn run<R, W>(ctx: Arc<Ctx>, read: R, write: W) -> Result<(), SessionError>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let (transport, link) = framing::frame(read, write);
    let gone = link.gone.clone();
    let session = async {
        let running = Server::new(ctx)
            .serve(transport)
            .await
            .map_err(|e| SessionError::Start(Box::new(e)))?;
        let cancel = running.cancellation_token();
        tokio::select! {
            r = running.waiting() => {
                r.map_err(SessionError::Ended)?;
            }
            _ = gone.notified() => {
                tracing::info!("stdout is closed: the client is gone");
                cancel.cancel();
            }
        }
        Ok(())
    };
    let result = session.await;
    link.finish().await;
    result
}

/// A call to a tool that panicked still gets an answer (anchor: answer_even_if_it_panics): the
/// panic is caught here, logged, and the client is told that an internal error stopped the call.
/// Without this the panic would end rmcp's task for the request and the call would never be
/// answered.
pub(crate) async fn answer_even_if_it_panics(
    name: &str,
    call: impl Future<Output = Option<Reply>>,
) -> Option<Reply> {
    let caught = CatchPanic {
        inner: Box::pin(call),
    }
    .await;
    match caught {
        Ok(reply) => reply,
        Err(what) => {
            tracing::error!("tool call {name} panicked: {what}");
            Some(Reply::error(format!(
                "{name}: internal error: the tool stopped unexpectedly and its work may be \
                 incomplete. This is a bug in metabob-mcp; the server's log (stderr) has the \
                 details."
            )))
        }
    }
}

/// A future that turns a panic while it is polled into `Err(message)`. Polled in place rather
/// than spawned as a task, so the call keeps its cancellation and borrows as they are.
struct CatchPanic<F> {
    inner: std::pin::Pin<Box<F>>,
}

impl<F: Future> Future for CatchPanic<F> {
    type Output = Result<F::Output, String>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let inner = self.inner.as_mut();
        // Unwind safety: after a panic the future is dropped, never polled again. What it
        // shared through the context may be left half done, and a lock it held is poisoned; a
        // later call that takes that lock panics in turn and is answered here the same way, so
        // the server stays up and says so instead of going on as if nothing had happened.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(payload) => std::task::Poll::Ready(Err(panic_message(payload.as_ref()))),
        }
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_call_is_answered_with_an_internal_error() {
        let reply = answer_even_if_it_panics("get_metrics", async {
            tokio::task::yield_now().await;
            panic!("boom");
        })
        .await
        .expect("an answer");
        assert!(reply.is_error);
        assert!(
            reply.text.starts_with("get_metrics: internal error:"),
            "{}",
            reply.text
        );
        assert!(!reply.text.contains("boom"), "{}", reply.text);
    }

    #[tokio::test]
    async fn a_call_that_does_not_panic_is_untouched() {
        let reply = answer_even_if_it_panics("x", async { Some(Reply::ok("fine")) }).await;
        assert_eq!(reply.map(|r| r.text), Some("fine".to_string()));
        assert!(
            answer_even_if_it_panics("x", async { None })
                .await
                .is_none()
        );
    }
}
