//! The concept graph tools against a real `ledger serve`, over the in-process MCP session.

use serde_json::{Value, json};

use crate::mcp::project;
use crate::support::mcp::{Client, Session, shown};
use crate::support::{TestEnv, closed_port};

/// A session on a ledger.
struct Graph<'e> {
    env: &'e TestEnv,
    s: Session,
}

impl<'e> Graph<'e> {
    /// A session launched in a fresh checkout `dir` under the test root.
    async fn start(env: &'e TestEnv, dir: &str) -> Graph<'e> {
        let ws = env.path(dir);
        project(env, &ws);
        let s = Session::start(env, &ws, Client::default()).await;
        Graph { env, s }
    }

    /// A tool's reply as its snapshot shows it.
    async fn shown(&self, name: &str, args: Value) -> String {
        let (text, err) = self.s.call(name, args).await;
        shown(&text, err, self.env)
    }

    /// A reply that must not be an error.
    async fn ok(&self, name: &str, args: Value) -> String {
        let (text, err) = self.s.call(name, args).await;
        assert!(!err, "{name} failed: {text}");
        shown(&text, err, self.env)
    }

    /// Creates a concept; returns its raw id and the normalised reply.
    async fn create(&self, args: Value) -> (String, String) {
        let (text, err) = self.s.call("concept_create", args).await;
        assert!(!err, "concept_create failed: {text}");
        let id = text
            .split_whitespace()
            .nth(2)
            .expect("Created concept <id>:")
            .trim_end_matches(':')
            .to_string();
        assert!(id.starts_with("concept_"), "{text}");
        (id, shown(&text, err, self.env))
    }
}

/// A fresh ledger the environment attaches to (its first start writes the configuration), as
/// vessel-one.
fn attached_env(name: &str) -> (crate::support::Ledger, TestEnv) {
    let mut env = TestEnv::new();
    let ledger = env.ledger(name, &[]);
    env.set("VESSEL_ID", "vessel-one");
    (ledger, env)
}

fn long_body() -> String {
    (1..=40)
        .map(|i| format!("step {i:02}: write once, read back, compare before retrying\n"))
        .collect()
}

#[tokio::test]
async fn concepts_are_created_found_linked_and_used() {
    let (_ledger, env) = attached_env("graph");
    let g = Graph::start(&env, "proj").await;
    let (a, made) = g
        .create(json!({
            "content": "Retry reads with backoff; never retry a write.\nA write is sent once.",
            "summary": "retry reads with backoff",
            "shape": "code_pattern",
            "source_type": "memo",
        }))
        .await;
    insta::assert_snapshot!("create", made);
    let (b, _) = g
        .create(json!({
            "content": long_body(),
            "summary": "idempotent writes",
            "shape": "code_pattern",
            "source_type": "llm",
            "priority": 0.8,
            "budget": 2000,
        }))
        .await;

    let found = g.ok("concept_search", json!({"query": "backoff"})).await;
    assert!(!found.contains("idempotent"), "{found}");
    insta::assert_snapshot!("search_by_query", found);
    let listed = g
        .ok(
            "concept_search",
            json!({"shape": "code_pattern", "content": "none"}),
        )
        .await;
    insta::assert_snapshot!("search_list_without_bodies", listed);
    let preview = g.ok("concept_search", json!({"query": "idempotent"})).await;
    insta::assert_snapshot!("search_preview_cut_at_a_line", preview);

    let by_prefixed = g
        .ok(
            "concept_search",
            json!({"concept_id": format!("concept:{a}"), "query": "ignored"}),
        )
        .await;
    insta::assert_snapshot!("search_by_id", by_prefixed);
    let by_wrapped = g
        .ok("concept_search", json!({"concept_id": format!("⟨{a}⟩")}))
        .await;
    assert_eq!(by_wrapped, by_prefixed);
    let missing = g
        .ok(
            "concept_search",
            json!({"concept_id": "concept_000000000000000000000000"}),
        )
        .await;
    insta::assert_snapshot!(missing, @r"No concept [CONCEPT_3]: concept-db holds none by that id in this key's org.");

    let link = json!({"from_concept_id": a, "to_concept_id": format!("concept:{b}"), "edge_type": "related_to", "description": "both are about sending once"});
    let linked = g.ok("concept_link", link.clone()).await;
    insta::assert_snapshot!("link", linked);
    let again = g.ok("concept_link", link).await;
    assert!(
        again.contains("already existed") && again.contains("[EDGE_1]"),
        "{again}"
    );
    insta::assert_snapshot!("link_repeated", again);

    let near = g.ok("concept_neighbors", json!({"concept_id": a})).await;
    insta::assert_snapshot!("neighbors", near);
    let back = g
        .ok(
            "concept_neighbors",
            json!({"concept_id": b, "direction": "incoming", "content": "none"}),
        )
        .await;
    insta::assert_snapshot!("neighbors_incoming", back);
    let none = g
        .ok(
            "concept_neighbors",
            json!({"concept_id": "concept_000000000000000000000000"}),
        )
        .await;
    insta::assert_snapshot!(none, @r"No neighbours: concept-db holds no concept [CONCEPT_3] in this key's org.");

    let used = g
        .ok(
            "concept_record_usage",
            json!({"concept_id": format!("⟨{a}⟩"), "outcome": "success", "trace_id": "trace-1", "activity_id": "act-1"}),
        )
        .await;
    insta::assert_snapshot!("record_usage", used);
    let generated = g
        .ok(
            "concept_record_usage",
            json!({"concept_id": a, "outcome": "neutral"}),
        )
        .await;
    assert!(generated.contains("with trace mcp:[UUID_"), "{generated}");
    let stats = g.ok("concept_usage_stats", json!({"concept_id": a})).await;
    assert!(stats.contains("trace trace-1 · activity act-1"), "{stats}");
    insta::assert_snapshot!("usage_stats", stats);

    g.ok(
        "concept_link",
        json!({"from_concept_id": a, "to_concept_id": b, "edge_type": "sequence_next", "weight": 0.9}),
    )
    .await;
    let next = g.ok("concept_sequence", json!({"concept_id": a})).await;
    insta::assert_snapshot!("sequence_next", next);
    let prev = g
        .ok(
            "concept_sequence",
            json!({"concept_id": b, "direction": "prev"}),
        )
        .await;
    assert!(prev.contains("prev ← [CONCEPT_1]"), "{prev}");
}

#[tokio::test]
async fn a_forged_author_is_removed_and_the_stamp_is_stored() {
    let (_ledger, env) = attached_env("stamp");
    let g = Graph::start(&env, "proj").await;
    let (id, made) = g
        .create(json!({
            "content": "  Recorded_By: someone-else\nrepo: app\nsession: not-mine\n\nrecorded_by: prose after the block stays\n",
            "shape": "note",
            "source_type": "memo",
        }))
        .await;
    assert!(
        made.contains("Removed from the content's header block"),
        "{made}"
    );
    insta::assert_snapshot!("create_with_a_forged_author", made);
    let stored = g
        .ok(
            "concept_search",
            json!({"concept_id": id, "content": "full"}),
        )
        .await;
    assert!(
        !stored.contains("someone-else") && !stored.contains("not-mine"),
        "{stored}"
    );
    assert!(stored.contains("recorded_by: vessel-one"), "{stored}");
    insta::assert_snapshot!("stamped_concept_read_back", stored);
}

#[tokio::test]
async fn a_secret_is_refused_before_anything_is_stored() {
    let (_ledger, env) = attached_env("secret");
    let g = Graph::start(&env, "proj").await;
    let token = format!("ghp_{}", "q7Zk2Lm9Xv4Rt8Wn1Bc6Hs3Jd5Fp0Ga7Ye2U");
    assert_eq!(token.len(), 40);
    let refused = g
        .shown(
            "concept_create",
            json!({"content": format!("deploy with {token}\n"), "shape": "note", "source_type": "memo"}),
        )
        .await;
    assert!(refused.contains("outgoing_secret("), "{refused}");
    assert!(!refused.contains(&token), "{refused}");
    insta::assert_snapshot!("create_with_a_secret", refused);
    let listed = g.ok("concept_search", json!({})).await;
    assert_eq!(listed, "No concepts.");
}

#[tokio::test]
async fn a_read_only_key_is_refused_before_sending() {
    let mut env = TestEnv::new();
    let ledger = env.ledger("readonly", &[]);
    env.set("VESSEL_ID", "vessel-one");
    let (a, b) = {
        let writer = Graph::start(&env, "writer").await;
        let (a, _) = writer
            .create(json!({"content": "a", "shape": "note", "source_type": "memo"}))
            .await;
        let (b, _) = writer
            .create(json!({"content": "b", "shape": "note", "source_type": "memo"}))
            .await;
        (a, b)
    };
    let (_, read_key) = ledger.create_key(&env, "default", "read");
    env.set("METABOB_API_KEY", &read_key);
    let reader = Graph::start(&env, "reader").await;
    let refused = reader
        .shown(
            "concept_link",
            json!({"from_concept_id": a, "to_concept_id": b, "edge_type": "contradicts"}),
        )
        .await;
    assert!(refused.contains("key_read_only"), "{refused}");
    insta::assert_snapshot!("link_with_a_read_only_key", refused);
    // The same key reads, and the ledger holds no edge.
    let near = reader
        .ok("concept_neighbors", json!({"concept_id": a}))
        .await;
    assert!(near.starts_with("No neighbours of"), "{near}");
}

#[tokio::test]
async fn usage_stats_keep_the_aggregate_when_the_history_read_fails() {
    let mut env = TestEnv::new();
    let mut dead = closed_port();
    // An 8xxx port is rehosted onto discovery's host; this one must stay unreachable.
    while (8000..9000).contains(&dead) {
        dead = closed_port();
    }
    let advertised = format!("http://127.0.0.1:{dead}");
    let ledger = env.ledger("history", &["--public-url", &advertised]);
    let (_, key) = ledger.create_key(&env, "default", "read,write");
    env.set("METABOB_API_KEY", &key)
        .set("DISCOVERY_ENDPOINT", &ledger.url)
        .set("IDENTITY_ENDPOINT", &ledger.url)
        .set("VESSEL_ID", "vessel-one");
    let g = Graph::start(&env, "proj").await;
    let (id, _) = g
        .create(json!({"content": "x", "shape": "note", "source_type": "memo"}))
        .await;
    g.ok(
        "concept_record_usage",
        json!({"concept_id": id, "outcome": "failure"}),
    )
    .await;
    let stats = g.ok("concept_usage_stats", json!({"concept_id": id})).await;
    assert!(stats.contains("Recent usage: unavailable"), "{stats}");
    assert!(stats.contains("connect_refused"), "{stats}");
    insta::assert_snapshot!("usage_stats_history_unavailable", stats);
}

#[tokio::test]
async fn detached_concept_tools_name_the_cause_and_send_nothing() {
    let env = TestEnv::new();
    let g = Graph::start(&env, "proj").await;
    let search = g.shown("concept_search", json!({"query": "x"})).await;
    insta::assert_snapshot!("detached_concept_search", search);
    let link = g
        .shown(
            "concept_link",
            json!({"from_concept_id": "concept_a", "to_concept_id": "concept_b", "edge_type": "related_to"}),
        )
        .await;
    assert!(link.contains("concept_link: not attached: "), "{link}");
}
