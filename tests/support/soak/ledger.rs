//! The soak's reads and writes straight to a ledger: one HTTP request at a time, the verdict
//! rows through search pages, and the board's groups.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};

use super::Res;

/// The board's task ids in `group`.
pub(super) fn group(board: &Value, name: &str) -> BTreeSet<String> {
    board["repositories"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r[name].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["task_id"].as_str().map(str::to_owned))
        .collect()
}

/// One request with `Connection: close`: the status and the JSON body.
pub(super) fn post(url: &str, key: &str, pointer: &Value) -> Res<(u16, Value)> {
    let host = url.trim_start_matches("http://");
    let addr = host
        .parse::<std::net::SocketAddr>()
        .map_err(|e| format!("{host}: {e}"))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect {host}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    let body = json!({ "pointer": pointer }).to_string();
    write!(
        s,
        "POST /resolve HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Authorization: ApiKey {key}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| format!("send: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| format!("read: {e}"))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no header end")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("no status")?;
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = unchunk(&body);
    }
    Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

fn unchunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&raw[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 || raw.len() < eol + 2 + size {
            break;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[(eol + 4 + size).min(raw.len())..];
    }
    out
}

/// Every verdict and claim row of the org, through search pages.
pub(super) fn verdict_rows(url: &str, key: &str) -> Res<Vec<metabob_wire::verdict::Verdict>> {
    let mut rows = Vec::new();
    let mut offset = 0u64;
    loop {
        let pointer = json!({"type": "conceptSearch", "shape": "finding_verdict", "limit": 1000, "offset": offset});
        let (status, v) = post(url, key, &pointer)?;
        if status != 200 {
            return Err(format!("reading verdicts: {status} {v}"));
        }
        let page = v["concepts"].as_array().cloned().unwrap_or_default();
        let n = page.len() as u64;
        rows.extend(
            page.iter()
                .filter_map(|c| metabob_wire::verdict::Verdict::read(c).ok().flatten()),
        );
        offset = match v["next_offset"].as_u64() {
            Some(next) => next,
            None if n == 1000 => offset + n,
            None => return Ok(rows),
        };
    }
}
