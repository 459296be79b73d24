//! The embedded ledger as a real process: first start, identity, org isolation, scopes, the
//! concept shapes, durability through kill -9, forwarding to a test producer, the limits
//! that keep one request from stalling the rest, and the modes of its files.

mod access;
mod connections;
mod durability;
mod files;
mod limits;
mod metrics;
mod prometheus;
pub(crate) use prometheus::{family_of, ledger_with_a_claim};
mod restore;
mod shapes;
mod tls;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Ledger;

/// One HTTP/1.1 exchange with `Connection: close`; the answer's status and JSON body
/// (`Value::Null` when the body is not JSON).
fn http(
    url: &str,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: Option<&str>,
) -> (u16, Value) {
    try_http(url, method, path, auth, body).expect("HTTP exchange with the ledger")
}

fn try_http(
    url: &str,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: Option<&str>,
) -> std::io::Result<(u16, Value)> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let host = url
        .strip_prefix("http://")
        .ok_or_else(|| bad("not an http URL"))?
        .trim_end_matches('/');
    let mut stream = TcpStream::connect(host)?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    let body = body.unwrap_or("");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(a) = auth {
        req.push_str(&format!("Authorization: {a}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    stream.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| bad("no HTTP head"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    Ok((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

fn apikey(key: &str) -> String {
    format!("ApiKey {key}")
}

fn resolve(l: &Ledger, key: &str, pointer: Value) -> (u16, Value) {
    resolve_url(&l.url, key, pointer)
}

fn resolve_url(url: &str, key: &str, pointer: Value) -> (u16, Value) {
    let body = json!({ "pointer": pointer }).to_string();
    http(url, "POST", "/resolve", Some(&apikey(key)), Some(&body))
}

fn create(l: &Ledger, key: &str, content: &str, shape: &str) -> Value {
    let (status, v) = resolve(
        l,
        key,
        json!({"type": "concept_create_write",
               "conceptData": {"content": content, "shape": shape, "source_type": "memo", "summary": content}}),
    );
    assert_eq!(status, 201, "{v}");
    v["concept"].clone()
}

fn id(concept: &Value) -> String {
    concept["id"].as_str().expect("concept id").to_string()
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array().expect("array").iter().map(id).collect()
}

/// `ledger backup --data DATA --to TO`, run to its end.
fn backup_to(
    env: &crate::support::TestEnv,
    data: &std::path::Path,
    to: &std::path::Path,
) -> crate::support::Output {
    env.run(&[
        "ledger",
        "backup",
        "--data",
        &data.display().to_string(),
        "--to",
        &to.display().to_string(),
    ])
}
