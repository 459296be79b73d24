//! The concept shapes: search, the graph, usage, sequence, discovery and its refusals, and
//! forwarding other shapes to a test producer.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use serde_json::{Value, json};

use super::{apikey, create, http, id, ids, resolve};
use crate::support::{TestEnv, closed_port};

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
        // The sequence is what is strictly increasing; two rows a PostgreSQL replica writes in
        // one millisecond share their creation time (a row that decides no holder takes no
        // shared clock), so the time only never goes back.
        assert!(pair[1]["created_at"].as_str() >= pair[0]["created_at"].as_str());
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

/// A verdict row about `finding`, as a client composes it.
fn verdict_content(kind: &str, finding: &str) -> String {
    metabob_wire::header::compose(
        &[
            ("session", "s1".to_string()),
            ("verdict", kind.to_string()),
            ("finding_ids", "agf_0123456789ab".to_string()),
            ("finding_concept", finding.to_string()),
            ("files", "a.py".to_string()),
            ("origin", "remote".to_string()),
        ],
        "",
    )
}

fn verdict_write(content: &str, shape: &str, trace: Value) -> Value {
    json!({"type": "verdict_write", "trace": trace, "conceptData": {
        "content": content, "shape": shape, "source_type": "finding", "summary": "v"}})
}

#[test]
fn a_verdict_write_links_and_credits_in_one_write_and_refuses_what_is_no_verdict() {
    let env = TestEnv::new();
    let l = env.ledger("verdicts", &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    let finding = id(&create(&l, &k, "a finding", "finding"));
    let verdicts = || {
        let (_, v) = resolve(
            &l,
            &k,
            json!({"type": "conceptSearch", "shape": "finding_verdict", "limit": 100}),
        );
        v["total"].as_i64().unwrap()
    };
    let uses = || {
        let (_, v) = resolve(
            &l,
            &k,
            json!({"type": "conceptUsageStats", "concept_id": finding}),
        );
        (v["total_uses"].clone(), v["successes"].clone())
    };

    // A fix: the row, its link to the finding, and a success on the finding.
    let (status, v) = resolve(
        &l,
        &k,
        verdict_write(
            &verdict_content("fixed", &finding),
            "finding_verdict",
            json!("close"),
        ),
    );
    assert_eq!(status, 201, "{v}");
    assert_eq!((&v["linked"], &v["credited"]), (&json!(true), &json!(true)));
    let fixed = id(&v["concept"]);
    let (_, graph) = resolve(
        &l,
        &k,
        json!({"type": "conceptGraph", "concept_id": fixed, "direction": "outgoing"}),
    );
    let edges = graph["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 1, "{graph}");
    assert_eq!(edges[0]["edge"]["edge_type"], "derived_from");
    assert_eq!(id(&edges[0]["neighbor"]), finding);
    assert_eq!(uses(), (json!(1), json!(1)));
    let (_, history) = http(
        &l.url,
        "GET",
        &format!("/concepts/{finding}/usage"),
        Some(&apikey(&k)),
        None,
    );
    assert_eq!(history["usage"][0]["trace_id"], format!("close:{fixed}"));

    // A pending fix is linked and credits nothing.
    let pending = verdict_content("fix pending (unpushed)", &finding);
    let (status, v) = resolve(
        &l,
        &k,
        verdict_write(&pending, "finding_verdict", json!("close")),
    );
    assert_eq!(status, 201, "{v}");
    assert_eq!(
        (&v["linked"], &v["credited"]),
        (&json!(true), &json!(false))
    );
    assert_eq!(uses(), (json!(1), json!(1)));

    // A finding the org does not hold: the verdict stands, unlinked and uncredited.
    let unknown = verdict_content("fixed", "concept_000000000000000000000000");
    let (status, v) = resolve(
        &l,
        &k,
        verdict_write(&unknown, "finding_verdict", json!("close")),
    );
    assert_eq!(status, 201, "{v}");
    assert_eq!(
        (&v["linked"], &v["credited"]),
        (&json!(false), &json!(false))
    );
    assert_eq!(verdicts(), 3);

    // What is no verdict write is refused before anything is written.
    let fixed_row = verdict_content("fixed", &finding);
    for (pointer, says) in [
        (
            verdict_write(&fixed_row, "memo", json!("close")),
            "conceptData.shape",
        ),
        (
            verdict_write("just words", "finding_verdict", json!("close")),
            "no verdict: line",
        ),
        (
            verdict_write(
                &metabob_wire::header::compose(&[("verdict", "fixed".into())], ""),
                "finding_verdict",
                json!("close"),
            ),
            "no finding_concept: line",
        ),
        (
            verdict_write(&fixed_row, "finding_verdict", Value::Null),
            "trace",
        ),
        (
            verdict_write(&fixed_row, "finding_verdict", json!("two\nlines")),
            "trace: one line",
        ),
    ] {
        let (status, v) = resolve(&l, &k, pointer);
        assert_eq!(status, 400, "{v}");
        assert!(
            v["detail"].as_str().unwrap_or_default().contains(says),
            "{says}: {v}"
        );
    }
    let (_, ro) = l.create_key(&env, "default", "read");
    let (status, _) = resolve(
        &l,
        &ro,
        verdict_write(&fixed_row, "finding_verdict", json!("close")),
    );
    assert_eq!(status, 403);
    assert_eq!(verdicts(), 3);
    assert_eq!(uses(), (json!(1), json!(1)));
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
