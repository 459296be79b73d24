//! First start and the client config it writes, the offline key commands, bootstrap and both
//! auth forms, org isolation and scopes.

use serde_json::{Value, json};

use super::{apikey, create, http, id, ids, resolve};
use crate::support::{TestEnv, snapshot};

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

    let write = json!({"type": "concept_create_write", "conceptData": {
        "shape": "note", "source_type": "t", "summary": "s", "content": "c"}});
    let (status, _) = resolve(&l, &key, json!({"type": "vesselRegistry"}));
    assert_eq!(status, 200);
    let (status, body) = resolve(&l, &key, write.clone());
    assert_eq!(status, 201, "{body}");
    let out = l.key(&env, &["revoke", &key_id]);
    assert_eq!(out.code, 0, "{out:?}");
    // The server believes a checked key for under a second, for reads and writes alike.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    for pointer in [json!({"type": "vesselRegistry"}), write] {
        let (status, body) = resolve(&l, &key, pointer);
        assert_eq!(
            (status, body["error"].clone()),
            (401, json!("key_rejected")),
            "revoked within a second"
        );
    }
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
        health["resolves"], 6,
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
