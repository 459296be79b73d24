//! The embedded ledger as a real process: first start, identity, org isolation, scopes, the
//! concept shapes, durability through kill -9, forwarding to a test producer, and the limits
//! that keep one request from stalling the rest.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metabob_ledger::concepts::{MAX_QUERY_TERMS, max_query_bytes};
use metabob_ledger::routes::MAX_BODY_BYTES;
use metabob_ledger::{IDLE_TIMEOUT_VAR, REQUEST_BUDGET_VAR};
use serde_json::{Value, json};

use crate::support::{Ledger, TestEnv, closed_port, snapshot, wait_until};

/// The help names both stores a ledger runs on.
#[test]
fn ledger_help_names_both_stores() {
    let env = TestEnv::new();
    for args in [&["ledger", "--help"][..], &["--help"]] {
        let out = env.run(args);
        assert_eq!(out.code, 0, "{out:?}");
        let line = out
            .stdout
            .lines()
            .find(|l| l.contains("embedded ledger"))
            .unwrap_or_default();
        assert!(
            line.contains("SQLite") && line.contains("PostgreSQL"),
            "{}: {out:?}",
            args.join(" ")
        );
    }
}

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

#[test]
fn first_start_writes_client_config_once() {
    let env = TestEnv::new();
    let mut l = env.ledger("first", &[]);
    let path = env.home().join(".substrate/config.json");
    let text = std::fs::read_to_string(&path).expect("first start wrote the client config");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let cfg: Value = serde_json::from_str(&text).expect("config is JSON");
    assert_eq!(cfg["metabob"]["discoveryEndpoint"], json!(l.url));
    let key = cfg["metabob"]["apiKey"]
        .as_str()
        .expect("apiKey")
        .to_string();
    assert!(key.starts_with("mb_live_") && key.len() == 8 + 32, "{key}");

    let nested = json!({"impulse": {"type": "authentication", "pointer": {"type": "apiKey", "apiKey": key}}});
    let (status, who) = http(
        &l.url,
        "POST",
        "/v1/auth/resolve",
        None,
        Some(&nested.to_string()),
    );
    assert_eq!(status, 200, "{who}");
    assert_eq!(who["orgName"], "default");
    assert_eq!(who["scopes"], json!(["read", "write", "admin"]));

    l.kill_and_restart();
    let out = l.key(&env, &["list", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let list: Value = serde_json::from_str(&out.stdout).expect("key list --json");
    assert_eq!(
        list.as_array().map(Vec::len),
        Some(1),
        "a restart mints no second admin key: {list}"
    );
    assert!(list[0].get("key").is_none(), "key list never shows a key");
    assert_eq!(std::fs::read_to_string(&path).expect("config"), text);
}

#[test]
fn key_commands_show_a_key_once_and_list_and_revoke_by_id() {
    let env = TestEnv::new();
    let data = env.path("ledger-keys").display().to_string();
    let out = env.run(&[
        "ledger",
        "key",
        "create",
        "--data",
        &data,
        "--org",
        "acme",
        "--scopes",
        "read,write",
        "--label",
        "ci runner",
    ]);
    insta::assert_snapshot!("ledger_key_create", snapshot(&out, &env));
    let out = env.run(&[
        "ledger", "key", "create", "--data", &data, "--org", "acme", "--scopes", "read", "--json",
    ]);
    insta::assert_snapshot!("ledger_key_create_json", snapshot(&out, &env));
    let second: Value = serde_json::from_str(&out.stdout).expect("key create --json");
    let key_id = second["key_id"].as_str().expect("key_id").to_string();
    let out = env.run(&["ledger", "key", "revoke", &key_id, "--data", &data]);
    insta::assert_snapshot!("ledger_key_revoke", snapshot(&out, &env));
    let out = env.run(&["ledger", "key", "revoke", &key_id, "--data", &data]);
    insta::assert_snapshot!("ledger_key_revoke_again", snapshot(&out, &env));
    let out = env.run(&[
        "ledger",
        "key",
        "revoke",
        "key_000000000000",
        "--data",
        &data,
    ]);
    insta::assert_snapshot!("ledger_key_revoke_unknown", snapshot(&out, &env));
    let out = env.run(&["ledger", "key", "list", "--data", &data]);
    insta::assert_snapshot!("ledger_key_list", snapshot(&out, &env));
    let out = env.run(&["ledger", "key", "list", "--data", &data, "--json"]);
    insta::assert_snapshot!("ledger_key_list_json", snapshot(&out, &env));
    let out = env.run(&[
        "ledger",
        "key",
        "create",
        "--data",
        &data,
        "--scopes",
        "read,root",
    ]);
    insta::assert_snapshot!("ledger_key_create_bad_scope", snapshot(&out, &env));
}

#[test]
fn first_start_never_overwrites_existing_config() {
    for existing in [r#"{"metabob":{"apiKey":"mine"}}"#, r#"{"other_tool":true}"#] {
        let env = TestEnv::new();
        let path = env.home().join(".substrate/config.json");
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, existing).expect("write config");
        let _l = env.ledger("keep", &[]);
        assert_eq!(std::fs::read_to_string(&path).expect("config"), existing);
    }
}

#[test]
fn bootstrap_health_and_both_auth_forms() {
    let env = TestEnv::new();
    let l = env.ledger("auth", &[]);
    let (key_id, key) = l.create_key(&env, "acme", "read,write");

    let (status, boot) = http(&l.url, "GET", "/bootstrap", None, None);
    assert_eq!(status, 200);
    assert_eq!(boot["service"], "metabob-ledger");
    assert_eq!(boot["discovery_endpoint"], json!(l.url));
    assert_eq!(boot["identity_endpoint"], json!(l.url));

    let (status, health) = http(&l.url, "GET", "/health", None, None);
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");
    assert_eq!(health["resolves"], 0);

    let nested = |k: &str| {
        json!({"impulse": {"type": "authentication", "pointer": {"type": "apiKey", "apiKey": k}}})
            .to_string()
    };
    let (status, who) = http(
        &l.url,
        "POST",
        "/v1/auth/resolve",
        None,
        Some(&nested(&key)),
    );
    assert_eq!(status, 200, "{who}");
    assert_eq!(who["keyId"], json!(key_id));
    assert_eq!(who["orgName"], "acme");
    let user_id = format!("user_{key_id}");
    assert_eq!(who["userId"], json!(user_id));
    assert_eq!(who["scopes"], json!(["read", "write"]));

    let (status, flat) = http(
        &l.url,
        "POST",
        "/v1/auth/resolve",
        Some(&apikey(&key)),
        None,
    );
    assert_eq!(status, 200, "{flat}");
    assert_eq!(flat["key_id"], json!(key_id));
    assert_eq!(flat["org_id"], who["orgId"]);
    assert!(flat.get("scopes").is_none());

    // Nested wins: a bad nested key is refused even beside a good header.
    let (status, _) = http(
        &l.url,
        "POST",
        "/v1/auth/resolve",
        Some(&apikey(&key)),
        Some(&nested("mb_live_0000")),
    );
    assert_eq!(status, 401);

    let unknown = "mb_live_00000000000000000000000000000000";
    let (status, body) = http(
        &l.url,
        "POST",
        "/v1/auth/resolve",
        Some(&apikey(unknown)),
        None,
    );
    assert_eq!(
        (status, body["error"].clone()),
        (401, json!("key_rejected"))
    );
    let (status, body) = resolve(&l, unknown, json!({"type": "vesselRegistry"}));
    assert_eq!(
        (status, body["error"].clone()),
        (401, json!("key_rejected"))
    );
    let (status, _) = http(
        &l.url,
        "POST",
        "/resolve",
        None,
        Some(r#"{"pointer":{"type":"vesselRegistry"}}"#),
    );
    assert_eq!(status, 401);

    let (status, _) = resolve(&l, &key, json!({"type": "vesselRegistry"}));
    assert_eq!(status, 200);
    let out = l.key(&env, &["revoke", &key_id]);
    assert_eq!(out.code, 0, "{out:?}");
    let (status, body) = resolve(&l, &key, json!({"type": "vesselRegistry"}));
    assert_eq!(
        (status, body["error"].clone()),
        (401, json!("key_rejected")),
        "revoked at the next request"
    );
    let (status, _) = http(
        &l.url,
        "POST",
        "/v1/auth/resolve",
        None,
        Some(&nested(&key)),
    );
    assert_eq!(status, 401);

    let (_, health) = http(&l.url, "GET", "/health", None, None);
    assert_eq!(
        health["resolves"], 4,
        "every POST /resolve is counted, refused ones too"
    );
}

#[test]
fn orgs_are_isolated() {
    let env = TestEnv::new();
    let l = env.ledger("orgs", &[]);
    let (_, a) = l.create_key(&env, "org-a", "read,write");
    let (_, b) = l.create_key(&env, "org-b", "read,write,admin");
    let c1 = id(&create(&l, &a, "alpha secret", "finding"));
    let c2 = id(&create(&l, &a, "alpha other", "finding"));
    let mine = id(&create(&l, &b, "bravo", "finding"));

    let (status, found) = resolve(&l, &b, json!({"type": "conceptSearch"}));
    assert_eq!(status, 200);
    assert_eq!(ids(&found["concepts"]), vec![mine.clone()]);
    let (_, found) = resolve(
        &l,
        &b,
        json!({"type": "conceptSearch", "query": "alpha secret"}),
    );
    assert_eq!(found["total"], 0);

    let not_found = |(status, body): (u16, Value)| {
        assert_eq!(status, 404, "{body}");
        assert_eq!(body["error"], "concept_not_found");
    };
    not_found(resolve(
        &l,
        &b,
        json!({"type": "conceptGraph", "concept_id": c1}),
    ));
    not_found(resolve(
        &l,
        &b,
        json!({"type": "conceptUsageStats", "concept_id": c1}),
    ));
    not_found(resolve(
        &l,
        &b,
        json!({"type": "conceptSequence", "concept_id": c1}),
    ));
    not_found(http(
        &l.url,
        "GET",
        &format!("/concepts/{c1}/usage"),
        Some(&apikey(&b)),
        None,
    ));
    not_found(resolve(
        &l,
        &b,
        json!({"type": "conceptLink_write",
               "linkData": {"from_concept_id": mine, "to_concept_id": c1, "edge_type": "related_to"}}),
    ));
    not_found(resolve(
        &l,
        &b,
        json!({"type": "conceptLink_write",
               "linkData": {"from_concept_id": c1, "to_concept_id": c2, "edge_type": "related_to"}}),
    ));
    not_found(resolve(
        &l,
        &b,
        json!({"type": "conceptUsage_write",
               "usageData": {"concept_id": c1, "trace_id": "t", "outcome": "success"}}),
    ));

    // Org A's data is untouched by B's attempts.
    let (_, graph) = resolve(&l, &a, json!({"type": "conceptGraph", "concept_id": c1}));
    assert_eq!(graph["root"]["times_loaded"], 0);
    assert_eq!(graph["edges"], json!([]));
}

#[test]
fn read_only_key_cannot_write() {
    let env = TestEnv::new();
    let l = env.ledger("scopes", &[]);
    let (_, ro) = l.create_key(&env, "default", "read");
    let (status, body) = resolve(
        &l,
        &ro,
        json!({"type": "concept_create_write", "conceptData": {"content": "x", "shape": "s", "source_type": "memo"}}),
    );
    assert_eq!(status, 403);
    assert_eq!(
        body,
        json!({"error": "forbidden", "detail": "key lacks write scope"})
    );
    let (status, _) = resolve(&l, &ro, json!({"type": "conceptSearch"}));
    assert_eq!(status, 200);
}

#[test]
fn concept_search_orders_pages_and_queries() {
    let env = TestEnv::new();
    let l = env.ledger("search", &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    let made: Vec<Value> = (0..5)
        .map(|i| {
            create(
                &l,
                &k,
                &format!("note number{i} about parsing"),
                if i % 2 == 0 { "even" } else { "odd" },
            )
        })
        .collect();
    let made_ids: Vec<String> = made.iter().map(id).collect();
    for pair in made.windows(2) {
        assert!(pair[1]["seq"].as_i64() > pair[0]["seq"].as_i64());
        assert!(pair[1]["created_at"].as_str() > pair[0]["created_at"].as_str());
    }
    assert_eq!(made[0]["relevance"], 0.5);

    // All equally relevant: newest first, and offset pages through that order.
    let (status, all) = resolve(&l, &k, json!({"type": "conceptSearch"}));
    assert_eq!(status, 200);
    assert_eq!(all["mode"], "list");
    assert_eq!(all["total"], 5);
    let newest_first: Vec<String> = made_ids.iter().rev().cloned().collect();
    assert_eq!(ids(&all["concepts"]), newest_first);
    let (_, page) = resolve(
        &l,
        &k,
        json!({"type": "conceptSearch", "limit": 2, "offset": 2}),
    );
    assert_eq!(ids(&page["concepts"]), newest_first[2..4].to_vec());
    assert_eq!(
        (
            page["total"].clone(),
            page["limit"].clone(),
            page["offset"].clone()
        ),
        (json!(5), json!(2), json!(2))
    );

    // A success lifts the oldest concept above the rest.
    let (status, _) = resolve(
        &l,
        &k,
        json!({"type": "conceptUsage_write",
               "usageData": {"concept_id": made_ids[0], "trace_id": "t1", "outcome": "success"}}),
    );
    assert_eq!(status, 201);
    let (_, all) = resolve(&l, &k, json!({"type": "conceptSearch", "limit": 1}));
    assert_eq!(ids(&all["concepts"]), vec![made_ids[0].clone()]);
    let (_, rel) = resolve(
        &l,
        &k,
        json!({"type": "conceptSearch", "min_relevance": 0.6}),
    );
    assert_eq!(ids(&rel["concepts"]), vec![made_ids[0].clone()]);

    let (_, q) = resolve(&l, &k, json!({"type": "conceptSearch", "query": "number3"}));
    assert_eq!(q["mode"], "query");
    assert_eq!(ids(&q["concepts"]), vec![made_ids[3].clone()]);
    let (_, q) = resolve(
        &l,
        &k,
        json!({"type": "conceptSearch", "query": "parsing", "shape": "odd"}),
    );
    assert_eq!(
        ids(&q["concepts"]),
        vec![made_ids[3].clone(), made_ids[1].clone()]
    );
    let (_, q) = resolve(
        &l,
        &k,
        json!({"type": "conceptSearch", "query": "parsing", "limit": 2, "offset": 1}),
    );
    assert_eq!(q["total"], 5);
    assert_eq!(
        ids(&q["concepts"]),
        newest_first[0..2].to_vec(),
        "the boosted one is first, then newest"
    );
    for hostile in [
        r#""unbalanced (* OR AND NEAR"#,
        "!!! ---",
        "number1\" OR \"x",
    ] {
        let (status, q) = resolve(&l, &k, json!({"type": "conceptSearch", "query": hostile}));
        assert_eq!(status, 200, "{hostile}: {q}");
    }
    let (_, q) = resolve(&l, &k, json!({"type": "conceptSearch", "query": "!!! ---"}));
    assert_eq!(q["total"], 0);
    let (_, q) = resolve(
        &l,
        &k,
        json!({"type": "conceptSearch", "source_type": "goal"}),
    );
    assert_eq!(q["total"], 0);
}

#[test]
fn graph_links_usage_stats_and_sequence() {
    let env = TestEnv::new();
    let l = env.ledger("graph", &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    let [a, b, c, d] =
        ["a", "b", "c", "d"].map(|n| id(&create(&l, &k, &format!("concept {n}"), "s")));
    let link = |from: &str, to: &str, edge_type: &str, weight: Option<f64>| {
        let mut data =
            json!({"from_concept_id": from, "to_concept_id": to, "edge_type": edge_type});
        if let Some(w) = weight {
            data["weight"] = json!(w);
        }
        resolve(
            &l,
            &k,
            json!({"type": "conceptLink_write", "linkData": data}),
        )
    };

    // EMA upsert: new edge at the given weight, then weight += 0.3 * (w - weight).
    let (status, first) = link(&a, &b, "related_to", Some(0.2));
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["created"], true);
    assert_eq!(first["edge"]["weight"], 0.2);
    assert_eq!(first["edge"]["traversal_count"], 1);
    let (status, second) = link(
        &format!("concept:{a}"),
        &format!("⟨{b}⟩"),
        "related_to",
        Some(1.0),
    );
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["created"], false);
    assert_eq!(second["previous_weight"], 0.2);
    assert!((second["edge"]["weight"].as_f64().unwrap() - 0.44).abs() < 1e-9);
    assert_eq!(second["edge"]["id"], first["edge"]["id"]);
    let (_, third) = link(&a, &b, "related_to", None);
    assert!((third["edge"]["weight"].as_f64().unwrap() - 0.608).abs() < 1e-9);
    assert_eq!(third["edge"]["traversal_count"], 3);
    let (status, fresh) = link(&c, &a, "example_of", None);
    assert_eq!((status, fresh["edge"]["weight"].clone()), (201, json!(0.5)));

    // Graph: newest edge first, directions and edge-type filter; ids answered bare.
    let (status, g) = resolve(
        &l,
        &k,
        json!({"type": "conceptGraph", "concept_id": format!("⟨{a}⟩")}),
    );
    assert_eq!(status, 200, "{g}");
    assert_eq!(g["root"]["id"], json!(a));
    let dirs: Vec<(Value, Value)> = g["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["direction"].clone(), e["neighbor"]["id"].clone()))
        .collect();
    assert_eq!(
        dirs,
        vec![(json!("incoming"), json!(c)), (json!("outgoing"), json!(b))]
    );
    let (_, g) = resolve(
        &l,
        &k,
        json!({"type": "conceptGraph", "concept_id": a, "direction": "outgoing"}),
    );
    assert_eq!(g["edges"].as_array().unwrap().len(), 1);
    assert_eq!(g["edges"][0]["edge"]["to_concept_id"], json!(b));
    let (_, g) = resolve(
        &l,
        &k,
        json!({"type": "conceptGraph", "concept_id": a, "edge_types": ["related_to"]}),
    );
    assert_eq!(g["edges"].as_array().unwrap().len(), 1);
    assert_eq!(g["edges"][0]["edge"]["edge_type"], "related_to");
    let (status, missing) = resolve(
        &l,
        &k,
        json!({"type": "conceptGraph", "concept_id": "concept_000000000000000000000000"}),
    );
    assert_eq!(status, 404);
    assert_eq!(missing["error"], "concept_not_found");
    assert_eq!(missing["concept_id"], "concept_000000000000000000000000");

    // Usage counters, relevance and stats.
    for (outcome, trace) in [("success", "t1"), ("failure", "t2"), ("neutral", "t3")] {
        let (status, u) = resolve(
            &l,
            &k,
            json!({"type": "conceptUsage_write",
                   "usageData": {"concept_id": format!("concept:{d}"), "trace_id": trace, "outcome": outcome,
                                 "task_id": "task-1"}}),
        );
        assert_eq!(status, 201, "{u}");
        assert_eq!(u["usage"]["outcome"], outcome);
        assert_eq!(u["usage"]["concept_id"], json!(d));
    }
    let (_, g) = resolve(&l, &k, json!({"type": "conceptGraph", "concept_id": d}));
    let root = &g["root"];
    assert_eq!(
        (
            root["times_loaded"].clone(),
            root["times_succeeded"].clone(),
            root["times_failed"].clone()
        ),
        (json!(3), json!(1), json!(1))
    );
    assert!((root["relevance"].as_f64().unwrap() - 0.4).abs() < 1e-9);
    let (status, stats) = resolve(
        &l,
        &k,
        json!({"type": "conceptUsageStats", "concept_id": d}),
    );
    assert_eq!(status, 200);
    assert_eq!(stats["total_uses"], 3);
    assert_eq!(
        (
            stats["successes"].clone(),
            stats["failures"].clone(),
            stats["neutral"].clone()
        ),
        (json!(1), json!(1), json!(1))
    );
    assert!((stats["success_rate"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-9);
    assert!((stats["relevance"].as_f64().unwrap() - 0.4).abs() < 1e-9);
    let (status, hist) = http(
        &l.url,
        "GET",
        &format!("/concepts/{d}/usage?limit=2"),
        Some(&apikey(&k)),
        None,
    );
    assert_eq!(status, 200, "{hist}");
    let traces: Vec<Value> = hist["usage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["trace_id"].clone())
        .collect();
    assert_eq!(traces, vec![json!("t3"), json!("t2")]);

    // Sequence: a -next-> b, c -prev-> a (c follows a), d -next-> a (d precedes a).
    link(&a, &b, "sequence_next", Some(0.9));
    link(&c, &a, "sequence_prev", Some(0.4));
    link(&d, &a, "sequence_next", None);
    let seq_of = |direction: &str| {
        let (status, s) = resolve(
            &l,
            &k,
            json!({"type": "conceptSequence", "concept_id": a, "direction": direction}),
        );
        assert_eq!(status, 200, "{s}");
        s["sequence"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["direction"].as_str().unwrap().to_string(),
                    id(&e["concept"]),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        seq_of("next"),
        vec![
            ("next".to_string(), b.clone()),
            ("next".to_string(), c.clone())
        ]
    );
    assert_eq!(seq_of("prev"), vec![("prev".to_string(), d.clone())]);
    assert_eq!(seq_of("both").len(), 3);
}

#[test]
fn discovery_shapes_and_refusals() {
    let env = TestEnv::new();
    let l = env.ledger("refusals", &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");

    let (status, body) = resolve(&l, &k, json!({"type": "goalStatus", "goal_id": "g"}));
    assert_eq!(
        (status, body),
        (404, json!({"error": "Not found", "shape": "goalStatus"}))
    );

    let (status, cap) = resolve(
        &l,
        &k,
        json!({"type": "vesselCapability", "shape": "conceptSearch"}),
    );
    assert_eq!(status, 200);
    assert_eq!(cap["vessels"][0]["vessel_id"], "metabob-ledger");
    assert_eq!(cap["vessels"][0]["endpoint"], json!(l.url));
    let (_, cap) = resolve(
        &l,
        &k,
        json!({"type": "vesselCapability", "shape": "goalStatus"}),
    );
    assert_eq!(cap["vessels"], json!([]));

    let bad = |body: &str, field: &str| {
        let (status, v) = http(&l.url, "POST", "/resolve", Some(&apikey(&k)), Some(body));
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(v["error"], "bad_request");
        assert!(
            v["detail"].as_str().unwrap().contains(field),
            "{field} in {v}"
        );
    };
    bad("not json", "body");
    bad("{}", "pointer");
    bad(r#"{"pointer":{}}"#, "pointer.type");
    bad(r#"{"pointer":{"type":"vesselCapability"}}"#, "shape");
    bad(
        r#"{"pointer":{"type":"concept_create_write"}}"#,
        "conceptData",
    );
    bad(
        r#"{"pointer":{"type":"concept_create_write","conceptData":{"shape":"s","source_type":"memo"}}}"#,
        "conceptData.content",
    );
    bad(
        r#"{"pointer":{"type":"concept_create_write","conceptData":{"content":"c","shape":"s","source_type":"memo","priority":2}}}"#,
        "conceptData.priority",
    );
    bad(r#"{"pointer":{"type":"conceptSearch","limit":0}}"#, "limit");
    bad(
        r#"{"pointer":{"type":"conceptSearch","offset":-1}}"#,
        "offset",
    );
    bad(r#"{"pointer":{"type":"conceptGraph"}}"#, "concept_id");
    bad(
        r#"{"pointer":{"type":"conceptGraph","concept_id":"x","direction":"up"}}"#,
        "direction",
    );
    bad(
        r#"{"pointer":{"type":"conceptLink_write","linkData":{"from_concept_id":"a","to_concept_id":"b","edge_type":"likes"}}}"#,
        "linkData.edge_type",
    );
    bad(
        r#"{"pointer":{"type":"conceptUsage_write","usageData":{"concept_id":"a","trace_id":"t","outcome":"maybe"}}}"#,
        "usageData.outcome",
    );
    bad(
        r#"{"pointer":{"type":"conceptSearch","client_claim":"me"}}"#,
        "client_claim",
    );

    // A client claim travels with the written row and comes back on the concept.
    let claim = json!({"operator": "op", "session": "s-1", "client": "metabob-mcp/test"});
    let (status, made) = resolve(
        &l,
        &k,
        json!({"type": "concept_create_write", "client_claim": claim,
               "conceptData": {"content": "c", "shape": "s", "source_type": "memo", "budget": 100, "priority": 0.9}}),
    );
    assert_eq!(status, 201);
    assert_eq!(made["concept"]["client_claim"], claim);
    assert_eq!(made["concept"]["pointer"], json!({"type": "s"}));
    assert_eq!(
        (
            made["concept"]["budget"].clone(),
            made["concept"]["priority"].clone()
        ),
        (json!(100), json!(0.9))
    );
}

/// Writers that create concepts without pause through `urls` (writer `t` through
/// `urls[t % len]`) until stopped, keeping the id of every write a 201 acknowledged.
struct WriteLoad {
    acked: Arc<Mutex<Vec<String>>>,
    count: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    writers: Vec<std::thread::JoinHandle<()>>,
}

impl WriteLoad {
    fn start(urls: &[String], k: &str, writers: usize) -> WriteLoad {
        let acked: Arc<Mutex<Vec<String>>> = Arc::default();
        let count = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let writers = (0..writers)
            .map(|t| {
                let url = urls[t % urls.len()].clone();
                let (k, acked, count, stop) = (k.to_string(), acked.clone(), count.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = 0;
                    while !stop.load(Ordering::SeqCst) {
                        i += 1;
                        let pointer = json!({"type": "concept_create_write",
                            "conceptData": {"content": format!("writer {t} item {i}"), "shape": "load", "source_type": "memo"}});
                        // A request cut by the kill is not acknowledged, and that is allowed to be lost.
                        let body = json!({ "pointer": pointer }).to_string();
                        match try_http(&url, "POST", "/resolve", Some(&apikey(&k)), Some(&body)) {
                            Ok((201, v)) => {
                                acked.lock().unwrap().push(id(&v["concept"]));
                                count.fetch_add(1, Ordering::SeqCst);
                            }
                            _ => std::thread::sleep(Duration::from_millis(20)),
                        }
                    }
                })
            })
            .collect();
        WriteLoad {
            acked,
            count,
            stop,
            writers,
        }
    }

    /// Waits until `n` more writes than now are acknowledged.
    fn wait_for(&self, n: usize) {
        let from = self.count.load(Ordering::SeqCst);
        assert!(
            wait_until(Duration::from_secs(20), || self
                .count
                .load(Ordering::SeqCst)
                >= from + n),
            "{n} more writes were acknowledged"
        );
    }

    /// Stops the writers; the ids of every acknowledged write.
    fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        for w in self.writers {
            w.join().expect("writer thread");
        }
        self.acked.lock().unwrap().clone()
    }
}

/// Every acknowledged concept reads back through `l`.
fn all_readable(l: &Ledger, k: &str, acked: &[String]) {
    for cid in acked {
        let (status, g) = resolve(
            l,
            k,
            json!({"type": "conceptGraph", "concept_id": cid, "limit": 1}),
        );
        assert_eq!(status, 200, "acknowledged {cid} lost: {g}");
    }
}

#[test]
fn killing_one_postgres_replica_under_load_loses_no_acknowledged_write() {
    let env = TestEnv::new();
    let mut a = env.ledger_on("kill9-a", &crate::support::pg::fresh_database(), &[]);
    let b = a.replica(&env);
    let (_, k) = a.create_key(&env, "default", "read,write");
    let load = WriteLoad::start(&[a.url.clone(), b.url.clone()], &k, 16);
    load.wait_for(40);
    a.kill_and_restart();
    // The restarted replica serves at once: its first request is answered.
    let (status, v) = resolve(&a, &k, json!({"type": "conceptSearch", "limit": 1}));
    assert_eq!(status, 200, "{v}");
    load.wait_for(8);
    let acked = load.stop();
    all_readable(&b, &k, &acked);
}

#[test]
fn sigterm_under_a_write_load_drains_exits_0_and_loses_no_acknowledged_write() {
    let env = TestEnv::new();
    let mut l = env.ledger("term", &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    let load = WriteLoad::start(std::slice::from_ref(&l.url), &k, 16);
    load.wait_for(40);
    // Both stores: the PostgreSQL one used to abort (134) closing its client inside the runtime.
    assert_eq!(
        l.terminate(),
        Some(0),
        "a ledger stopped by SIGTERM exits 0"
    );
    let acked = load.stop();
    l.restart();
    all_readable(&l, &k, &acked);
}

/// A tmpfs of its own, unmounted when dropped (after whatever used it).
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(at: std::path::PathBuf, size: &str) -> SmallDisk {
        std::fs::create_dir_all(&at).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a tmpfs for the full-disk test needs root (CI runs as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallDisk(at)
    }

    /// Fills the disk with one file, then gives `keep` bytes of it back: the file.
    fn fill_leaving(&self, keep: u64) -> std::path::PathBuf {
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        let len = f.metadata().unwrap().len();
        f.set_len(len.saturating_sub(keep)).unwrap();
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_full_disk_is_named_store_full_reads_go_on_and_writes_resume_once_space_returns() {
    let env = TestEnv::new();
    let disk = SmallDisk::mount(env.path("small-disk"), "16m");
    let l = env.ledger_in(disk.0.join("ledger"), &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    let filler = disk.fill_leaving(1024 * 1024);

    let write = |i: usize| {
        let pointer = json!({"type": "concept_create_write", "conceptData": {
            "content": format!("item {i} {}", "z".repeat(16 * 1024)), "shape": "load", "source_type": "memo"}});
        resolve(&l, &k, pointer)
    };
    let mut acked = Vec::new();
    let full = (0..2000).find_map(|i| {
        let (status, v) = write(i);
        match status {
            201 => {
                acked.push(id(&v["concept"]));
                None
            }
            other => Some((other, v)),
        }
    });
    let (status, v) = full.expect("the disk filled within 2,000 writes");
    assert_eq!(status, 507, "{v}");
    assert_eq!(v["error"], "store_full", "{v}");
    assert!(
        v["detail"].as_str().unwrap().contains("free disk space"),
        "{v}"
    );
    let (status, v) = resolve(
        &l,
        &k,
        json!({"type": "conceptSearch", "shape": "load", "limit": 1}),
    );
    assert_eq!(status, 200, "reads go on while the disk is full: {v}");
    // A cell's command hears it as an outage (exit 2), which the entrypoint waits out.
    let (_, origin) = env.origin("app", &[("a.py", "x = 1\n")]);
    let out = env.run(&[
        "finding",
        "record",
        "--origin",
        &origin,
        "--file",
        "a.py",
        "--summary",
        "while full",
        "--severity",
        "LOW",
        "--category",
        "task",
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("the ledger is unavailable for now") && out.stderr.contains("store"),
        "{out:?}"
    );

    std::fs::remove_file(filler).unwrap();
    let (status, v) = write(9999);
    assert_eq!(status, 201, "writes resume once space returns: {v}");
    acked.push(id(&v["concept"]));
    all_readable(&l, &k, &acked);
    let conn = rusqlite::Connection::open(disk.0.join("ledger/ledger.db")).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(conn);
    drop(l);
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let env = TestEnv::new();
    let mut l = env.ledger("kill9", &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    // Enough concurrent writers that commits carry batches (group commit), not single writes.
    let load = WriteLoad::start(std::slice::from_ref(&l.url), &k, 16);
    load.wait_for(40);
    l.kill_and_restart();
    load.wait_for(8);
    let acked = load.stop();
    all_readable(&l, &k, &acked);
    let (_, all) = resolve(
        &l,
        &k,
        json!({"type": "conceptSearch", "shape": "load", "limit": 1000}),
    );
    let mut rows: Vec<(i64, String)> = all["concepts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["seq"].as_i64().unwrap(),
                c["created_at"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(rows.len() >= acked.len());
    rows.sort();
    // One writer numbers and stamps every row in commit order. On PostgreSQL replicas' writes
    // commit side by side, and the order is kept per finding instead (SPEC.md §Claim order on
    // each store; the replica race tests it).
    if !crate::support::on_postgres() {
        for pair in rows.windows(2) {
            assert!(
                pair[1].0 > pair[0].0 && pair[1].1 > pair[0].1,
                "seq and created_at rise together: {pair:?}"
            );
        }
    }
}

/// A producer stand-in: answers 418 with what it received; `slowShape` answers only after a while.
fn test_producer() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind producer");
    let url = format!("http://{}/resolve", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head, body) = loop {
                    let n = conn.read(&mut chunk).unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let len = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().to_string())
                            })
                            .and_then(|v| v.parse::<usize>().ok())
                            .unwrap_or(0);
                        if body.len() >= len {
                            break (head.to_string(), body.to_string());
                        }
                    }
                };
                let auth = head
                    .lines()
                    .find_map(|l| {
                        l.split_once(':')
                            .filter(|(k, _)| k.eq_ignore_ascii_case("authorization"))
                    })
                    .map(|(_, v)| v.trim().to_string());
                let got: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                if got["pointer"]["type"] == "slowShape" {
                    std::thread::sleep(Duration::from_secs(5));
                }
                let answer = json!({"got": got, "authorization": auth}).to_string();
                let resp = format!(
                    "HTTP/1.1 418 I'm a teapot\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = conn.write_all(resp.as_bytes());
            });
        }
    });
    url
}

#[test]
fn forwards_to_producers() {
    let env = TestEnv::new();
    let producer = test_producer();
    let dead = format!("http://127.0.0.1:{}/resolve", closed_port());
    let l = env.ledger(
        "forward",
        &[
            "--producer",
            &format!("echoShape={producer}"),
            "--producer",
            &format!("slowShape={producer}"),
            "--producer",
            &format!("deadShape={dead}"),
            "--forward-timeout-ms",
            "300",
        ],
    );
    let (_, k) = l.create_key(&env, "default", "read,write");

    let (status, body) = resolve(&l, &k, json!({"type": "echoShape", "x": 1}));
    assert_eq!(status, 418, "{body}");
    assert_eq!(
        body["got"],
        json!({"pointer": {"type": "echoShape", "x": 1}})
    );
    assert_eq!(body["authorization"], json!(apikey(&k)));

    let (status, body) = resolve(&l, &k, json!({"type": "deadShape"}));
    assert_eq!(status, 502, "{body}");
    assert_eq!(
        (
            body["error"].clone(),
            body["shape"].clone(),
            body["reason"].clone()
        ),
        (
            json!("forward_failed"),
            json!("deadShape"),
            json!("unreachable")
        )
    );

    let (status, body) = resolve(&l, &k, json!({"type": "slowShape"}));
    assert_eq!(status, 502, "{body}");
    assert_eq!(
        (body["reason"].clone(), body["timeout_ms"].clone()),
        (json!("timeout"), json!(300))
    );

    let (_, reg) = resolve(&l, &k, json!({"type": "vesselRegistry"}));
    let vessels = reg["vessels"].as_array().unwrap();
    assert_eq!(vessels.len(), 3, "{reg}");
    let (_, cap) = resolve(
        &l,
        &k,
        json!({"type": "vesselCapability", "shape": "echoShape"}),
    );
    assert_eq!(cap["vessels"][0]["resolve_endpoint"], json!(producer));
}

// ---------------------------------------------------------------------------------------------
// One request must not stall the ledger: bounded searches, a pool of readers, a time budget per
// request, one error body everywhere, and connections that cannot be held open half-sent.

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
    // The issue's attacker held only a read-only key.
    let (_, reader) = l.create_key(&env, "default", "read");
    let max_bytes = max_query_bytes();
    assert_eq!(
        max_bytes,
        metabob_wire::guard::field_rule("query").cap,
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

    // The issue's query: 100,000 words is refused, not searched.
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

/// Two replicas started at once on an empty PostgreSQL database: both serve, the schema is made
/// once, and one of them (only) mints the first-start admin key.
#[test]
fn two_replicas_starting_together_on_an_empty_postgres_database_make_one_schema_and_one_admin_key()
{
    let env = TestEnv::new();
    let store = crate::support::pg::fresh_database();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| env.ledger_on("first", &store, &[]));
        let b = s.spawn(|| env.ledger_on("second", &store, &[]));
        (a.join().unwrap(), b.join().unwrap())
    });
    let listed = a.key(&env, &["list", "--json"]);
    assert_eq!(listed.code, 0, "{listed:?}");
    let keys: Vec<Value> = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(keys.len(), 1, "one admin key: {keys:?}");
    assert_eq!(keys[0]["scopes"], json!(["read", "write", "admin"]));
    // Written through one replica, read through the other.
    let (_, k) = a.create_key(&env, "default", "read,write");
    let made = id(&create(&a, &k, "written through the first", "memo"));
    let (status, v) = resolve(&b, &k, json!({"type": "conceptSearch", "query": "first"}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(ids(&v["concepts"]), vec![made]);
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
