//! One request must not stall the ledger: bounded searches, a pool of readers, a time budget per
//! request, one error body everywhere, and connections that cannot be held open half-sent.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use metabob_ledger::concepts::{MAX_QUERY_TERMS, max_query_bytes};
use metabob_ledger::routes::MAX_BODY_BYTES;
use metabob_ledger::{IDLE_TIMEOUT_VAR, READERS_VAR, REQUEST_BUDGET_VAR};
use serde_json::{Value, json};

use super::{apikey, create, http, id, ids, resolve, resolve_url};
use crate::support::{Ledger, TestEnv, closed_port, wait_until};

/// Words that never name the ledger's database in an answer.
const DATABASE_WORDS: &[&str] = &["sqlite", "fts5", "syntax error", "sql ", "database disk"];

fn assert_no_database_text(v: &Value) {
    let text = v.to_string().to_ascii_lowercase();
    for word in DATABASE_WORDS {
        assert!(!text.contains(word), "database text {word:?} in {v}");
    }
}

/// Sends `request` as it is on a fresh connection and reads until the server closes it; the
/// status, the head, and the body as JSON (`Value::Null` when it is not).
fn raw(url: &str, request: &[u8]) -> (u16, String, Value) {
    let host = url.strip_prefix("http://").unwrap().trim_end_matches('/');
    let mut stream = TcpStream::connect(host).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut got = Vec::new();
    stream.read_to_end(&mut got).unwrap();
    let text = String::from_utf8_lossy(&got).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (
        status,
        head.to_ascii_lowercase(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

fn conn_close_request(method: &str, path: &str, extra_headers: &str) -> Vec<u8> {
    format!("{method} {path} HTTP/1.1\r\nHost: ledger\r\nConnection: close\r\n{extra_headers}\r\n")
        .into_bytes()
}

#[test]
fn search_queries_are_bounded_and_database_text_never_answers() {
    let env = TestEnv::new();
    let l = env.ledger("bounds", &[]);
    let (_, writer) = l.create_key(&env, "default", "read,write");
    // The attacker held only a read-only key.
    let (_, reader) = l.create_key(&env, "default", "read");
    let max_bytes = max_query_bytes();
    assert_eq!(
        max_bytes,
        metabob_wire::fields::field_rule("query").cap,
        "the ledger's bound is the client's own cap on a query"
    );
    let search = |q: &str| resolve(&l, &reader, json!({"type": "conceptSearch", "query": q}));

    // At the bounds a query is answered.
    let (status, v) = search(&"x".repeat(max_bytes));
    assert_eq!(status, 200, "{v}");
    let (status, v) = search(&vec!["word"; MAX_QUERY_TERMS].join(" "));
    assert_eq!((status, v["mode"].clone()), (200, json!("query")), "{v}");
    // Words with no letter or digit are not searched, so they do not count.
    let (status, v) = search(&format!("{} word", vec!["--"; MAX_QUERY_TERMS].join(" ")));
    assert_eq!(status, 200, "{v}");

    // One over a bound: 400 naming it.
    let (status, v) = search(&"x".repeat(max_bytes + 1));
    assert_eq!(status, 400, "{v}");
    assert_eq!(
        (v["error"].clone(), v["bound"].clone(), v["max"].clone()),
        (json!("query_too_large"), json!("bytes"), json!(max_bytes))
    );
    let detail = v["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("query: ") && detail.contains(&max_bytes.to_string()),
        "{v}"
    );
    let (status, v) = search(&vec!["word"; MAX_QUERY_TERMS + 1].join(" "));
    assert_eq!(status, 400, "{v}");
    assert_eq!(
        (v["error"].clone(), v["bound"].clone(), v["max"].clone()),
        (
            json!("query_too_large"),
            json!("terms"),
            json!(MAX_QUERY_TERMS)
        )
    );
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains(&MAX_QUERY_TERMS.to_string()),
        "{v}"
    );

    // The query: 100,000 words is refused, not searched.
    let (status, v) = search(&vec!["lorem"; 100_000].join(" "));
    assert_eq!((status, v["bound"].clone()), (400, json!("bytes")), "{v}");

    // A NUL byte is refused by name, never answered with the database's words.
    let (status, v) = search("alpha\u{0}beta");
    assert_eq!(
        (status, v["error"].clone()),
        (400, json!("bad_request")),
        "{v}"
    );
    assert!(v["detail"].as_str().unwrap().contains("NUL"), "{v}");
    assert_no_database_text(&v);

    // An edge-type filter repeated past SQLite's variable limit is still one filter.
    let c = id(&create(&l, &writer, "root", "memo"));
    let (status, v) = resolve(
        &l,
        &reader,
        json!({"type": "conceptGraph", "concept_id": c, "edge_types": vec!["related_to"; 50_000]}),
    );
    assert_eq!(status, 200, "{v}");
    assert_no_database_text(&v);
}

#[test]
fn every_error_answers_one_json_body() {
    let env = TestEnv::new();
    let l = env.ledger("errors", &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    let auth = format!("Authorization: {}\r\n", apikey(&k));
    let too_long = format!(
        "{auth}Content-Type: application/json\r\nContent-Length: {}\r\n",
        MAX_BODY_BYTES + 1
    );
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "unknown path",
            conn_close_request("GET", "/nope", ""),
            404,
            "not_found",
        ),
        (
            "GET on a POST path",
            conn_close_request("GET", "/resolve", ""),
            405,
            "method_not_allowed",
        ),
        (
            "POST on a GET path",
            conn_close_request("POST", "/health", "Content-Length: 0\r\n"),
            405,
            "method_not_allowed",
        ),
        (
            "body over the bound",
            conn_close_request("POST", "/resolve", &too_long),
            413,
            "payload_too_large",
        ),
        (
            "path that is not UTF-8",
            conn_close_request("GET", "/concepts/%FF%FE/usage", &auth),
            400,
            "bad_request",
        ),
        (
            "no key",
            conn_close_request("POST", "/resolve", "Content-Length: 2\r\n")
                .into_iter()
                .chain(*b"{}")
                .collect(),
            401,
            "key_rejected",
        ),
    ];
    for (what, request, status, token) in cases {
        let (got, head, body) = raw(&l.url, &request);
        assert_eq!(
            (got, body["error"].clone()),
            (status, json!(token)),
            "{what}: {head}\n{body}"
        );
        assert!(
            head.contains("content-type: application/json"),
            "{what}: {head}"
        );
        assert!(
            body["detail"].is_string(),
            "{what}: every error has a detail: {body}"
        );
        assert_no_database_text(&body);
        if status == 405 {
            assert!(
                head.contains("\r\nallow: "),
                "{what}: 405 names what is allowed: {head}"
            );
        }
        if status == 413 {
            assert_eq!(body["max_bytes"], json!(MAX_BODY_BYTES), "{body}");
        }
    }
}

/// Puts `rows` concepts into `org` straight into the ledger's store (a server write per row
/// would take minutes), each holding every one of `terms`, so a search for them is slow but
/// within every bound.
fn seed_concepts(l: &Ledger, org_id: &str, rows: u32, terms: &str) {
    if let Some(url) = &l.store {
        crate::support::pg::sql(
            url,
            &format!(
                "INSERT INTO concepts (id, org_id, shape, source_type, summary, content, pointer,
                                       priority, created_at, updated_at)
                 SELECT 'concept_seed' || lpad(i::text, 12, '0'), '{org_id}', 'bulk', 'memo',
                        'bulk row', '{terms}', '{{\"type\":\"bulk\"}}', 0.5, 1, 1
                 FROM generate_series(1, {rows}) AS i"
            ),
        );
        return;
    }
    let mut conn = rusqlite::Connection::open(l.data.join("ledger.db")).unwrap();
    conn.busy_timeout(Duration::from_secs(30)).unwrap();
    let tx = conn.transaction().unwrap();
    tx.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
         INSERT INTO concepts (id, org_id, shape, source_type, summary, content, pointer, priority,
                               created_at, updated_at)
         SELECT printf('concept_seed%012d', i), ?2, 'bulk', 'memo', 'bulk row', ?3,
                '{\"type\":\"bulk\"}', 0.5, 1, 1
         FROM n",
        rusqlite::params![rows, org_id, terms],
    )
    .unwrap();
    tx.commit().unwrap();
}

fn org_id(l: &Ledger, key: &str) -> String {
    let (status, who) = http(&l.url, "POST", "/v1/auth/resolve", Some(&apikey(key)), None);
    assert_eq!(status, 200, "{who}");
    who["org_id"].as_str().unwrap().to_string()
}

#[test]
fn a_slow_search_blocks_no_other_org_and_its_budget_stops_it() {
    let mut env = TestEnv::new();
    let l = env.ledger("slow", &[]);
    let (_, attacker) = l.create_key(&env, "attacker", "read");
    let (_, victim) = l.create_key(&env, "victim", "read,write");
    let terms: Vec<String> = (0..MAX_QUERY_TERMS).map(|i| format!("term{i}")).collect();
    let terms = terms.join(" ");
    seed_concepts(&l, &org_id(&l, &attacker), 200_000, &terms);
    let mine = id(&create(&l, &victim, "the victim's one row", "memo"));
    let slow_search = json!({"type": "conceptSearch", "query": terms, "limit": 10});
    let small_search = json!({"type": "conceptSearch", "query": "victim", "limit": 1});

    // While the attacker's search holds a reader, the victim's search is answered.
    let slow_done = Arc::new(AtomicBool::new(false));
    let slow = {
        let (url, key, pointer, done) = (
            l.url.clone(),
            attacker.clone(),
            slow_search.clone(),
            slow_done.clone(),
        );
        std::thread::spawn(move || {
            let answer = resolve_url(&url, &key, pointer);
            done.store(true, Ordering::SeqCst);
            answer
        })
    };
    let busy = || {
        http(&l.url, "GET", "/health", None, None).1["readers_busy"]
            .as_u64()
            .unwrap()
    };
    assert!(
        wait_until(Duration::from_secs(30), || busy() >= 1
            || slow_done.load(Ordering::SeqCst)),
        "the slow search reached the database"
    );
    let (status, v) = resolve(&l, &victim, small_search.clone());
    assert_eq!(status, 200, "{v}");
    assert_eq!(ids(&v["concepts"]), vec![mine.clone()]);
    // Checked by the server's own count after the answer, not by a clock: the attacker's search
    // still holds its reader, so the victim's was served beside it, not after it.
    assert!(
        busy() >= 1 && !slow_done.load(Ordering::SeqCst),
        "the victim's search was answered only after the attacker's left the database"
    );
    let (status, v) = slow.join().unwrap();
    assert_eq!(
        (status, v["total"].clone()),
        (200, json!(200_000)),
        "{}",
        v["error"]
    );

    // With a budget the same search cannot fill, it is stopped and named; the reader it held
    // serves the next request.
    drop(l);
    env.set(REQUEST_BUDGET_VAR, "50");
    let l = env.ledger("slow", &[]);
    let (status, v) = resolve(&l, &attacker, slow_search);
    assert_eq!(status, 503, "{v}");
    assert_eq!(
        (v["error"].clone(), v["budget_ms"].clone()),
        (json!("request_budget_exceeded"), json!(50))
    );
    assert!(v["detail"].as_str().unwrap().contains("50 ms"), "{v}");
    assert_no_database_text(&v);
    // A small read fits the budget; allow a loaded machine a few tries.
    assert!(wait_until(Duration::from_secs(20), || {
        resolve(&l, &victim, small_search.clone()).0 == 200
    }));
}

/// Whether the server closes `stream` (end of file or reset) before the read times out.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            // An answer before the close (a 408, or the previous answer) is read past.
            Ok(_) => continue,
            Err(e) => {
                return matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                );
            }
        }
    }
}

#[test]
fn idle_and_half_sent_connections_are_closed() {
    let mut env = TestEnv::new();
    env.set(IDLE_TIMEOUT_VAR, "300");
    let l = env.ledger("idle", &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    let host = l.url.strip_prefix("http://").unwrap().to_string();
    let connect = || TcpStream::connect(&host).unwrap();

    // Connected, and nothing sent.
    let mut idle = connect();
    assert!(closed_by_server(&mut idle), "an idle connection is closed");

    // Half a request head.
    let mut half_head = connect();
    half_head
        .write_all(b"POST /resolve HTTP/1.1\r\nHost: ledger\r\nContent-")
        .unwrap();
    assert!(
        closed_by_server(&mut half_head),
        "a half-sent head is closed"
    );

    // A whole head, half a body: answered 408 with the one error body, then closed.
    let head = format!(
        "POST /resolve HTTP/1.1\r\nHost: ledger\r\nAuthorization: {}\r\nContent-Length: 100\r\n\r\n{{\"pointer\"",
        apikey(&k)
    );
    let (status, _, body) = raw(&l.url, head.as_bytes());
    assert_eq!(
        (status, body["error"].clone(), body["timeout_ms"].clone()),
        (408, json!("request_timeout"), json!(300)),
        "{body}"
    );

    // A keep-alive connection is answered, then closed once it sits idle.
    let mut kept = connect();
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: ledger\r\n\r\n")
        .unwrap();
    assert!(
        closed_by_server(&mut kept),
        "an idle keep-alive connection is closed"
    );

    // A prompt request is unaffected by the short timeout.
    let (status, v) = resolve(&l, &k, json!({"type": "vesselRegistry"}));
    assert_eq!(status, 200, "{v}");
}

/// Text holding U+0000 is refused with the field named, on every store (PostgreSQL text cannot
/// hold it), and nothing is written.
#[test]
fn a_nul_byte_in_a_text_field_is_a_bad_request_naming_the_field() {
    let env = TestEnv::new();
    let l = env.ledger("nul", &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    let (status, v) = resolve(
        &l,
        &k,
        json!({"type": "concept_create_write",
               "conceptData": {"content": "a\u{0}b", "shape": "memo", "source_type": "memo"}}),
    );
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"], "bad_request");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .starts_with("conceptData.content: contains a NUL byte"),
        "{v}"
    );
    let (_, all) = resolve(&l, &k, json!({"type": "conceptSearch", "shape": "memo"}));
    assert_eq!(all["total"], 0, "{all}");
}

/// A store the ledger cannot use is one line naming it and what to do, with no password in it.
#[test]
fn a_bad_store_is_one_line_without_its_password() {
    let env = TestEnv::new();
    let out = env.run(&[
        "ledger",
        "serve",
        "--store",
        "mysql://u:hunter2pass@127.0.0.1/x",
    ]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("only postgres:// URLs"), "{out:?}");
    let port = closed_port().to_string();
    let url = format!("postgres://u:hunter2pass@127.0.0.1:{port}/ledger");
    for args in [
        vec![
            "ledger",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            url.as_str(),
        ],
        vec!["ledger", "key", "list", "--store", url.as_str()],
    ] {
        let out = env.run(&args);
        assert_eq!(out.code, 1, "{out:?}");
        let line = out.stderr.trim();
        assert_eq!(line.lines().count(), 1, "{out:?}");
        assert!(line.contains("cannot connect"), "{out:?}");
        assert!(line.contains(&format!("127.0.0.1:{port}")), "{out:?}");
        assert!(
            !line.contains("hunter2pass"),
            "the password is never shown: {out:?}"
        );
    }
}

/// A limit flag wins over its environment variable; a value out of range is refused at start,
/// naming the flag or the variable it came from.
#[test]
fn a_limit_flag_wins_over_its_variable_and_a_bad_value_is_named() {
    let mut env = TestEnv::new();
    env.set(READERS_VAR, "lots");
    let data = env.path("flags").display().to_string();
    let serve = |extra: &[&str]| {
        let mut args = vec![
            "ledger",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data",
            &data,
        ];
        args.extend_from_slice(extra);
        env.run(&args)
    };
    for (extra, named) in [
        (
            &[][..],
            "METABOB_LEDGER_READERS=\"lots\": expected a whole number in 1..=64",
        ),
        (
            &["--readers", "65"][..],
            "--readers 65: expected a whole number in 1..=64",
        ),
        (
            &["--readers", "8", "--request-budget-ms", "0"][..],
            "--request-budget-ms 0: expected a whole number in 1..=3600000",
        ),
    ] {
        let out = serve(extra);
        assert_eq!(out.code, 1, "{extra:?}: {out:?}");
        assert_eq!(out.stderr.trim().lines().count(), 1, "{out:?}");
        assert!(out.stderr.contains(named), "{extra:?}: {out:?}");
    }
    // With the flag given, the variable's bad value is never read.
    let l = env.ledger("flags", &["--readers", "8", "--idle-timeout-ms", "5000"]);
    let (status, body) = l.http("GET", "/health", None, "");
    assert_eq!(status, 200, "{body}");
}
