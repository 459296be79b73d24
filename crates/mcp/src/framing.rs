//! JSON-RPC framing for MCP over a byte stream (SPEC.md §The MCP server): one message a line in,
//! one message a line out, and an error answer for every line that is not a message.
//!
//! rmcp's own stream transport cannot be told to answer malformed input, so this module is the
//! transport rmcp runs on. What rmcp 3.11 does by itself (`transport/async_rw.rs`): a line that is
//! not JSON is dropped in silence (a deliberate choice upstream, against error storms between
//! peers that echo garbage); well-formed JSON that is not a message is answered `-32600` with no
//! `id` at all, not `id: null`; a line over its length limit is dropped in silence; and a request
//! whose params do not fit falls through to a custom request, answered `-32601` as if the method
//! did not exist. JSON-RPC 2.0 asks for `-32700` with `id: null`, `-32600` with the id when it can
//! be read, and `-32602` for params, so the lines are read and sorted here first: a message goes
//! to rmcp already parsed, everything else is answered here.
//!
//! Both rmcp's messages and the answers made here go out through one writer task, whole line by
//! whole line, so two lines never interleave on stdout.

use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, ErrorCode, InitializeRequestParams,
    JsonRpcMessage, PaginatedRequestParams, RequestId, ServerJsonRpcMessage,
};
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use metabob_wire::report;

/// The longest line read as a message, not counting its line end (anchor: MAX_LINE_BYTES). A
/// longer line is read to its end without being kept, and answered with an error.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// How long the end of a session waits for answers already made to reach stdout: as long as rmcp
/// waits for its handlers' answers at the end of input.
const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// Messages read but not yet taken by rmcp. Small: rmcp takes each one at once.
const INCOMING: usize = 16;
/// Lines made but not yet written. Bounded, so a client that sends and never reads slows the
/// reading of its input instead of growing this queue.
const OUTGOING: usize = 64;

/// The transport rmcp runs on: parsed messages in, whole lines out.
pub struct Framed {
    incoming: mpsc::Receiver<ClientJsonRpcMessage>,
    outgoing: mpsc::Sender<Vec<u8>>,
}

/// The reader and writer tasks behind a [`Framed`], for the end of the session.
pub struct Link {
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
    /// Signalled once when a write fails: the client closed our output.
    pub gone: Arc<Notify>,
}

/// Frames `read` and `write` (anchor: frame): starts the reader and writer tasks.
pub fn frame<R, W>(read: R, write: W) -> (Framed, Link)
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let (to_rmcp, incoming) = mpsc::channel(INCOMING);
    let (outgoing, lines) = mpsc::channel(OUTGOING);
    let gone = Arc::new(Notify::new());
    let reader = tokio::spawn(read_loop(read, to_rmcp, outgoing.clone()));
    let writer = tokio::spawn(write_loop(write, lines, gone.clone()));
    (
        Framed { incoming, outgoing },
        Link {
            reader,
            writer,
            gone,
        },
    )
}

impl Link {
    /// Ends the session's framing once rmcp is done with its transport: stops reading, then
    /// waits (bounded) until every line already made is written.
    pub async fn finish(self) {
        // The reader may be parked in a read of stdin that only the client can end; its queue
        // sender goes with it, and then the writer sees its queue close.
        self.reader.abort();
        if tokio::time::timeout(FLUSH_WAIT, self.writer).await.is_err() {
            tracing::warn!("the last answers were not all written to stdout in time");
        }
    }
}

impl rmcp::transport::Transport<RoleServer> for Framed {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let outgoing = self.outgoing.clone();
        async move {
            let mut line = serde_json::to_vec(&item)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            line.push(b'\n');
            // Once queued, the line is written whole by the writer task, even if this future
            // is dropped afterwards.
            outgoing.send(line).await.map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the output is closed")
            })
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        // Cancel-safe: rmcp polls this inside a select! and may drop it; a message is only
        // taken from the queue when this resolves.
        self.incoming.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.incoming.close();
        Ok(())
    }
}

/// Writes queued lines in order until the queue closes or a write fails.
async fn write_loop<W: AsyncWrite + Unpin>(
    mut write: W,
    mut lines: mpsc::Receiver<Vec<u8>>,
    gone: Arc<Notify>,
) {
    while let Some(line) = lines.recv().await {
        let written = match write.write_all(&line).await {
            Ok(()) => write.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            // rmcp would log a failed write and read on; a client that closed our output is
            // gone, so the session ends instead (SPEC.md §The MCP server).
            tracing::info!("cannot write to the client ({e})");
            gone.notify_one();
            return;
        }
    }
    let _ = write.shutdown().await;
}

/// Reads lines until the input ends, handing messages to rmcp and answering the rest.
async fn read_loop<R: AsyncRead + Unpin>(
    read: R,
    to_rmcp: mpsc::Sender<ClientJsonRpcMessage>,
    outgoing: mpsc::Sender<Vec<u8>>,
) {
    let mut lines = Lines::new(read);
    loop {
        let verdict = match lines.next().await {
            Ok(Line::Whole) => classify(lines.line()),
            Ok(Line::TooLong) => Verdict::Answer(too_long()),
            Ok(Line::End) => return,
            Err(e) => {
                tracing::warn!("cannot read the client's input ({e}); ending the session");
                return;
            }
        };
        match verdict {
            Verdict::Deliver(msg) => {
                if to_rmcp.send(*msg).await.is_err() {
                    return;
                }
            }
            Verdict::Answer(answer) => {
                tracing::info!("answered a malformed message: {}", answer.error.message);
                let mut line = match serde_json::to_vec(&answer) {
                    Ok(line) => line,
                    // An id already parsed from JSON and a string: this cannot fail.
                    Err(e) => {
                        tracing::error!("cannot serialize an error answer: {e}");
                        continue;
                    }
                };
                line.push(b'\n');
                if outgoing.send(line).await.is_err() {
                    return;
                }
            }
            Verdict::Ignore(why) => tracing::warn!("ignored a message: {}", report::line(&why)),
            Verdict::Blank => {}
        }
    }
}

/// What one read gave.
enum Line {
    /// A line, in [`Lines::line`]; the last one may lack its newline.
    Whole,
    /// A line over [`MAX_LINE_BYTES`], read to its end and not kept.
    TooLong,
    /// The input ended.
    End,
}

/// Newline-delimited lines, each bounded by [`MAX_LINE_BYTES`] before it is buffered.
struct Lines<R> {
    read: BufReader<R>,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    fn new(read: R) -> Lines<R> {
        Lines {
            read: BufReader::with_capacity(64 * 1024, read),
            buf: Vec::new(),
        }
    }

    fn line(&self) -> &[u8] {
        &self.buf
    }

    /// Reads the next line. `read_until` could not be bounded: it buffers the whole line before
    /// its length can be looked at, so the limit is checked here before each append.
    async fn next(&mut self) -> std::io::Result<Line> {
        self.buf.clear();
        let mut too_long = false;
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                return Ok(if too_long {
                    Line::TooLong
                } else if self.buf.is_empty() {
                    Line::End
                } else {
                    Line::Whole
                });
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |i| i + 1);
            let content = take - usize::from(newline.is_some());
            if !too_long && self.buf.len() + content > MAX_LINE_BYTES {
                too_long = true;
                self.buf = Vec::new();
            }
            if !too_long {
                self.buf.extend_from_slice(&available[..content]);
            }
            self.read.consume(take);
            if newline.is_some() {
                return Ok(if too_long { Line::TooLong } else { Line::Whole });
            }
        }
    }
}

/// What to do with one line, or with one `POST` body over HTTP (`super::http`).
#[derive(Debug)]
pub(crate) enum Verdict {
    /// A message for rmcp.
    Deliver(Box<ClientJsonRpcMessage>),
    /// Not a message rmcp can take: this error response is the answer.
    Answer(ErrorAnswer),
    /// A malformed notification or response: JSON-RPC answers neither, so it is only logged.
    Ignore(Ignored),
    /// An empty line: framing, not a message.
    Blank,
}

/// Why a message was passed over without an answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Ignored {
    #[error("a response that does not parse ({0})")]
    Response(#[source] serde_json::Error),
    /// `why` is the check's own words: the params are not an object, or do not fit the method.
    #[error("notification {method}: {why}")]
    Notification { method: String, why: String },
}

/// Sorts one line (anchor: classify): a message for rmcp, or the JSON-RPC error that answers it.
/// MCP over HTTP sorts each body with it too, so both surfaces answer alike.
pub(crate) fn classify(line: &[u8]) -> Verdict {
    // A UTF-8 byte order mark may lead a line (RFC 8259 §8.1 lets a parser ignore it), and a
    // line may end in CR LF.
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Blank;
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            return Verdict::Answer(error_answer(
                Value::Null,
                ErrorCode::PARSE_ERROR,
                &format!("Parse error: the line is not JSON ({e})"),
            ));
        }
    };
    let Value::Object(object) = value else {
        let what = if value.is_array() {
            "a batch (JSON array) is not accepted; send one message per line"
        } else {
            "a message is a JSON object"
        };
        return Verdict::Answer(invalid_request(Value::Null, what));
    };
    // The id is echoed as sent when it is one JSON-RPC allows; otherwise the answer has none.
    let id = match object.get("id") {
        None => None,
        Some(id) if readable_id(id) => Some(id.clone()),
        Some(_) => {
            return Verdict::Answer(invalid_request(
                Value::Null,
                "id must be a string or an integer",
            ));
        }
    };
    let answer_id = id.clone().unwrap_or(Value::Null);
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Verdict::Answer(invalid_request(answer_id, "jsonrpc must be \"2.0\""));
    }
    let method = match object.get("method") {
        Some(Value::String(m)) => m.clone(),
        Some(_) => return Verdict::Answer(invalid_request(answer_id, "method must be a string")),
        None if id.is_some() && (object.contains_key("result") || object.contains_key("error")) => {
            // A response to a request of ours (roots/list).
            return match serde_json::from_value(Value::Object(object)) {
                Ok(msg) => Verdict::Deliver(Box::new(msg)),
                Err(e) => Verdict::Ignore(Ignored::Response(e)),
            };
        }
        None => {
            return Verdict::Answer(invalid_request(
                answer_id,
                "no method, and not a response (no result or error)",
            ));
        }
    };
    let params = object.get("params").cloned();
    let bad_params = |why: String| match &id {
        Some(id) => Verdict::Answer(error_answer(
            id.clone(),
            ErrorCode::INVALID_PARAMS,
            &format!("Invalid params: {method}: {why}"),
        )),
        None => Verdict::Ignore(Ignored::Notification {
            method: method.clone(),
            why,
        }),
    };
    if params.as_ref().is_some_and(|p| !p.is_object()) {
        return bad_params("params must be an object".into());
    }
    match serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(object)) {
        Ok(JsonRpcMessage::Request(request)) => {
            // rmcp reads a served method whose params do not fit as a custom request, which it
            // answers as an unknown method; the method is known, the params are wrong.
            if let ClientRequest::CustomRequest(custom) = &request.request
                && let Some(why) = misfit(&custom.method, custom.params.as_ref())
            {
                return bad_params(why);
            }
            Verdict::Deliver(Box::new(JsonRpcMessage::Request(request)))
        }
        Ok(msg) if id.is_none() => Verdict::Deliver(Box::new(msg)),
        // An id and a method, read as something other than a request.
        Ok(_) => Verdict::Answer(invalid_request(answer_id, "not a request")),
        // rmcp's own error here only says that no kind of message matched; for the methods
        // served the typed params say what is wrong.
        Err(_) => bad_params(
            misfit(&method, params.as_ref())
                .unwrap_or_else(|| "params do not fit this method".into()),
        ),
    }
}

/// Why `params` do not fit `method`, for the methods this server serves that take params;
/// `None` for any other method (rmcp answers those) or when they fit.
fn misfit(method: &str, params: Option<&Value>) -> Option<String> {
    let params = params.cloned().unwrap_or(Value::Null);
    let fit = match method {
        "tools/list" => {
            serde_json::from_value::<Option<PaginatedRequestParams>>(params).map(|_| ())
        }
        "tools/call" | "initialize" if params.is_null() => {
            return Some("params are required".into());
        }
        "tools/call" => serde_json::from_value::<CallToolRequestParams>(params).map(|_| ()),
        "initialize" => serde_json::from_value::<InitializeRequestParams>(params).map(|_| ()),
        _ => return None,
    };
    fit.err().map(|e| e.to_string())
}

/// An id JSON-RPC allows and rmcp reads: a string or an integer (not null, not fractional).
fn readable_id(id: &Value) -> bool {
    match id {
        Value::String(_) => true,
        Value::Number(_) => serde_json::from_value::<RequestId>(id.clone()).is_ok(),
        _ => false,
    }
}

fn invalid_request(id: Value, why: &str) -> ErrorAnswer {
    error_answer(
        id,
        ErrorCode::INVALID_REQUEST,
        &format!("Invalid Request: {why}"),
    )
}

/// The answer to a message over [`MAX_LINE_BYTES`], whichever surface it came by.
pub(crate) fn too_long() -> ErrorAnswer {
    error_answer(
        Value::Null,
        ErrorCode::INVALID_REQUEST,
        &format!(
            "Invalid Request: the line is longer than {MAX_LINE_BYTES} bytes, the most this \
             server reads as one message"
        ),
    )
}

pub(crate) fn error_answer(id: Value, code: ErrorCode, message: &str) -> ErrorAnswer {
    ErrorAnswer {
        jsonrpc: "2.0",
        id,
        error: ErrorBody {
            code: code.0,
            message: message.to_string(),
        },
    }
}

/// A JSON-RPC error response, its members in the order rmcp writes them. The `id` is always
/// there: `null` when the line had none that could be read, as JSON-RPC asks.
#[derive(Debug, Serialize)]
pub(crate) struct ErrorAnswer {
    jsonrpc: &'static str,
    pub(crate) id: Value,
    pub(crate) error: ErrorBody,
}

#[derive(Debug, Serialize)]
pub(crate) struct ErrorBody {
    code: i32,
    pub(crate) message: String,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn answer(line: &str) -> Value {
        match classify(line.as_bytes()) {
            Verdict::Answer(v) => serde_json::to_value(v).unwrap(),
            other => panic!("{line}: expected an answer, got {other:?}"),
        }
    }

    #[test]
    fn malformed_lines_get_the_json_rpc_answer() {
        let cases = [
            ("not json", -32700, Value::Null),
            ("{\"jsonrpc\":\"2.0\",\"id\":7", -32700, Value::Null),
            ("[1,2]", -32600, Value::Null),
            ("[]", -32600, Value::Null),
            ("5", -32600, Value::Null),
            (
                r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
                -32600,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                -32600,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
                -32600,
                Value::Null,
            ),
            (r#"{"jsonrpc":"2.0","id":7}"#, -32600, json!(7)),
            (r#"{"id":"a","method":"ping"}"#, -32600, json!("a")),
            (
                r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#,
                -32600,
                json!(3),
            ),
            (r#"{"jsonrpc":"2.0","id":3,"method":5}"#, -32600, json!(3)),
            (
                r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":"x"}"#,
                -32602,
                json!(8),
            ),
            (
                r#"{"jsonrpc":"2.0","id":8,"method":"tools/list","params":[1]}"#,
                -32602,
                json!(8),
            ),
            (
                r#"{"jsonrpc":"2.0","id":8,"method":"tools/call"}"#,
                -32602,
                json!(8),
            ),
            (
                r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"x","arguments":5}}"#,
                -32602,
                json!(9),
            ),
            (
                r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":3}}"#,
                -32602,
                json!(9),
            ),
            (
                r#"{"jsonrpc":"2.0","id":9,"method":"initialize","params":{}}"#,
                -32602,
                json!(9),
            ),
        ];
        for (line, code, id) in cases {
            let a = answer(line);
            assert_eq!(a["error"]["code"], code, "{line}: {a}");
            assert_eq!(a["id"], id, "{line}: {a}");
            assert!(a.as_object().unwrap().contains_key("id"), "{line}: {a}");
            assert_eq!(a["jsonrpc"], "2.0");
        }
    }

    #[test]
    fn messages_go_to_rmcp_and_bad_notifications_are_not_answered() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\r",
            r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"get_metrics","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"no/such/method"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":0,"result":{"roots":[]}}"#,
        ] {
            assert!(
                matches!(classify(line.as_bytes()), Verdict::Deliver(_)),
                "{line}"
            );
        }
        for line in [
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}"#,
            r#"{"jsonrpc":"2.0","id":4,"error":5}"#,
        ] {
            assert!(
                matches!(classify(line.as_bytes()), Verdict::Ignore(_)),
                "{line}"
            );
        }
        assert!(matches!(classify(b""), Verdict::Blank));
        assert!(matches!(classify(b" \r"), Verdict::Blank));
    }

    #[tokio::test]
    async fn a_line_over_the_limit_is_read_to_its_end_and_not_kept() {
        let mut input = vec![b'x'; MAX_LINE_BYTES + 1];
        input.push(b'\n');
        input.extend_from_slice(&[b'y'; MAX_LINE_BYTES]);
        input.extend_from_slice(b"\nlast");
        let mut lines = Lines::new(&input[..]);
        assert!(matches!(lines.next().await.unwrap(), Line::TooLong));
        assert!(matches!(lines.next().await.unwrap(), Line::Whole));
        assert_eq!(lines.line().len(), MAX_LINE_BYTES);
        assert!(matches!(lines.next().await.unwrap(), Line::Whole));
        assert_eq!(lines.line(), b"last");
        assert!(matches!(lines.next().await.unwrap(), Line::End));
    }
}
