//! First start and the client config it writes, the offline key commands, bootstrap and both
//! auth forms, org isolation and scopes.

use serde_json::{Value, json};

use super::{apikey, create, http, id, ids, resolve, resolve_url};
use crate::support::{TestEnv, on_postgres, snapshot};
use metabob_process::clock::now_ms;
use metabob_wire::text::parse_rfc3339_ms;

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
        "--init",
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

/// Sleeps until the wall clock reads `ms` (epoch milliseconds), the clock the ledger reads too.
fn sleep_until_ms(ms: i64) {
    let left = ms - now_ms();
    if left > 0 {
        std::thread::sleep(std::time::Duration::from_millis(left as u64));
    }
}

/// A key made with `--expires-in` works until its time and is refused from then on, as a
/// revoked one is, by a running ledger (and by a second replica of its PostgreSQL store): even
/// by a server that checked it moments before and would otherwise still believe that check.
/// `key list` shows when it expires and that it has.
#[test]
fn an_expiring_key_works_until_its_time_and_is_refused_after_on_every_replica() {
    let env = TestEnv::new();
    let l = env.ledger("expiry", &[]);
    let replica = on_postgres().then(|| l.replica(&env));
    let urls: Vec<String> = std::iter::once(&l)
        .chain(replica.as_ref())
        .map(|l| l.url.clone())
        .collect();
    let before = now_ms();
    let out = l.key(
        &env,
        &[
            "create",
            "--expires-in",
            "8s",
            "--label",
            "short-lived",
            "--json",
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let created: Value = serde_json::from_str(&out.stdout).expect("key create --json");
    let key = created["key"].as_str().expect("key").to_string();
    let key_id = created["key_id"].as_str().expect("key_id").to_string();
    let shown = created["expires_at"]
        .as_str()
        .expect("expires_at")
        .to_string();
    let expires = parse_rfc3339_ms(&shown).expect("expires_at is RFC 3339");
    assert!(
        (before + 8_000..=now_ms() + 8_000).contains(&expires),
        "8 s from when it was made: {created}"
    );

    let read = json!({"type": "vesselRegistry"});
    let write = json!({"type": "concept_create_write", "conceptData": {
        "shape": "note", "source_type": "t", "summary": "s", "content": "c"}});
    for url in &urls {
        let (status, body) = resolve_url(url, &key, read.clone());
        assert_eq!(status, 200, "{url}: {body}");
        let (status, body) = resolve_url(url, &key, write.clone());
        assert_eq!(status, 201, "{url}: {body}");
    }
    // A check just before the expiry, which each server then believes for most of a second:
    // past the expiry, so only a check of the time at each use refuses what follows. (8 s leave
    // a loaded machine time to get here before it.)
    sleep_until_ms(expires - 300);
    for url in &urls {
        let (status, body) = resolve_url(url, &key, read.clone());
        assert_eq!(status, 200, "{url}, just before the expiry: {body}");
    }
    sleep_until_ms(expires + 100);
    let refused = json!({"error": "key_rejected", "detail": "key expired"});
    for url in &urls {
        for pointer in [write.clone(), read.clone()] {
            let (status, body) = resolve_url(url, &key, pointer);
            assert_eq!((status, &body), (401, &refused), "{url}");
        }
        let (status, body) = http(url, "POST", "/v1/auth/resolve", Some(&apikey(&key)), None);
        assert_eq!((status, &body), (401, &refused), "{url}");
    }

    let out = l.key(&env, &["list"]);
    assert_eq!(out.code, 0, "{out:?}");
    let row = out
        .stdout
        .lines()
        .find(|l| l.starts_with(&key_id))
        .unwrap_or_else(|| panic!("key list shows {key_id}: {out:?}"));
    let cols: Vec<&str> = row.split('\t').collect();
    assert_eq!(
        cols[4..],
        [shown.as_str(), "expired", "short-lived"],
        "{row}"
    );
    let out = l.key(&env, &["list", "--json"]);
    let list: Value = serde_json::from_str(&out.stdout).expect("key list --json");
    let listed = list
        .as_array()
        .and_then(|a| a.iter().find(|k| k["key_id"] == json!(key_id)))
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(listed["expires_at"], json!(shown));
    assert_eq!(listed["expired"], json!(true));
    assert_eq!(listed["revoked"], json!(false));
    // The first-start admin key never expires.
    let admin = &list[0];
    assert_eq!(
        (&admin["expires_at"], &admin["expired"]),
        (&Value::Null, &json!(false))
    );
}

/// `--expires-at` takes an RFC 3339 time; an expiry that is unreadable, not in the future, or
/// given both ways is refused in one line, and no key is made.
#[test]
fn key_expiry_flags_take_a_time_and_refuse_what_cannot_be_one() {
    let env = TestEnv::new();
    let data = env.path("ledger-expiry-flags").display().to_string();
    let create = |extra: &[&str]| {
        let mut args = vec!["ledger", "key", "create", "--init", "--data", data.as_str()];
        args.extend_from_slice(extra);
        env.run(&args)
    };
    let out = create(&["--expires-at", "2099-01-31T18:00:00Z", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let created: Value = serde_json::from_str(&out.stdout).expect("key create --json");
    assert_eq!(created["expires_at"], "2099-01-31T18:00:00.000Z");
    let out = create(&["--expires-at", "2099-01-31T18:00:00Z"]);
    assert!(
        out.stderr.contains(", expiring 2099-01-31T18:00:00.000Z;"),
        "{out:?}"
    );
    for (extra, says) in [
        (
            &["--expires-in", "soon"][..],
            "--expires-in \"soon\": not a duration",
        ),
        (
            &["--expires-in", "0s"],
            "--expires-in \"0s\": that is not in the future",
        ),
        (
            &["--expires-at", "2020-01-01T00:00:00Z"],
            "--expires-at \"2020-01-01T00:00:00Z\": that is not in the future",
        ),
        (
            &["--expires-at", "next tuesday"],
            "--expires-at \"next tuesday\": not an RFC 3339 time in UTC",
        ),
        (
            &["--expires-in", "100000000years"],
            "--expires-in \"100000000years\": past the year 9999",
        ),
    ] {
        let out = create(extra);
        assert_eq!(out.code, 1, "{out:?}");
        assert_eq!(out.stdout, "", "{out:?}");
        assert_eq!(out.stderr.trim().lines().count(), 1, "{out:?}");
        assert!(out.stderr.starts_with(&format!("error: {says}")), "{out:?}");
    }
    let out = create(&["--expires-in", "1h", "--expires-at", "2099-01-31T18:00:00Z"]);
    assert_eq!(out.code, 1, "clap refuses the pair: {out:?}");
    assert!(out.stderr.contains("cannot be used with"), "{out:?}");
    let out = env.run(&["ledger", "key", "list", "--data", &data, "--json"]);
    let list: Value = serde_json::from_str(&out.stdout).expect("key list --json");
    assert_eq!(
        list.as_array().map(Vec::len),
        Some(2),
        "only the two good keys: {list}"
    );
}

/// Every `ledger key` command, and `ledger backup`, refuses a data directory that holds no
/// ledger, `--data` given or not, in one line naming it, `--data` and the default, and makes
/// nothing there; `key create --init` makes the ledger on purpose, and a server on it takes the
/// key.
#[test]
fn admin_commands_refuse_a_directory_with_no_ledger_and_init_makes_one() {
    let env = TestEnv::new();
    let data = env.path("nothing-here");
    let shown = data.display().to_string();
    let d = shown.as_str();
    let default = env.home().join(".substrate/ledger");
    for (args, dir) in [
        (vec!["ledger", "key", "create", "--data", d], &data),
        (vec!["ledger", "key", "list", "--data", d, "--json"], &data),
        (
            vec!["ledger", "key", "revoke", "key_0123456789ab", "--data", d],
            &data,
        ),
        (
            vec!["ledger", "backup", "--data", d, "--to", "copy.db"],
            &data,
        ),
        (vec!["ledger", "key", "create"], &default),
        (vec!["ledger", "key", "list"], &default),
    ] {
        let out = env.run(&args);
        assert_eq!(out.code, 1, "{args:?}: {out:?}");
        assert_eq!(out.stdout, "", "{args:?}: {out:?}");
        assert_eq!(out.stderr.trim().lines().count(), 1, "{args:?}: {out:?}");
        for says in [
            format!("no ledger at {}", dir.display()),
            "--data".into(),
            "~/.substrate/ledger".into(),
        ] {
            assert!(out.stderr.contains(&says), "{args:?}: {says}: {out:?}");
        }
        assert!(!dir.exists(), "{args:?} made {}", dir.display());
    }
    let out = env.run(&["ledger", "key", "create", "--data", d]);
    insta::assert_snapshot!("ledger_key_create_no_ledger", snapshot(&out, &env));

    let out = env.run(&["ledger", "key", "create", "--init", "--data", d, "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(data.join("ledger.db").is_file(), "--init made the ledger");
    let created: Value = serde_json::from_str(&out.stdout).expect("key create --json");
    let key = created["key"].as_str().expect("key").to_string();
    let out = env.run(&["ledger", "key", "list", "--data", d, "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let l = env.ledger_in(data, &[]);
    let (status, body) = resolve(&l, &key, json!({"type": "vesselRegistry"}));
    assert_eq!(
        status, 200,
        "the server reads the ledger --init made: {body}"
    );
}

/// A store written before keys could expire (schema version 5, no `expires_at` column) gains the
/// column when a ledger opens it: its keys go on working and never expire, and a new key may.
#[test]
fn a_store_from_before_key_expiry_gains_it_on_open() {
    let env = TestEnv::new();
    let mut l = env.ledger("before-expiry", &[]);
    let (old_id, old_key) = l.create_key(&env, "default", "read");
    let _ = l.child.kill();
    let _ = l.child.wait();
    // Back to version 5: without version 6's column and version 7's dependency index.
    let back = "ALTER TABLE api_keys DROP COLUMN expires_at; DROP TABLE task_edges; \
                DROP INDEX open_tasks_by_task; ALTER TABLE open_tasks DROP COLUMN blocked";
    match &l.store {
        Some(url) => {
            crate::support::pg::sql(url, back);
            crate::support::pg::sql(
                url,
                "UPDATE ledger_meta SET value = 5 WHERE key = 'schema_version'",
            );
        }
        None => {
            let db = rusqlite::Connection::open(l.data.join("ledger.db")).unwrap();
            db.execute_batch(&format!("{back}; PRAGMA user_version = 5;"))
                .unwrap();
        }
    }
    l.restart();
    let (status, body) = resolve(&l, &old_key, json!({"type": "vesselRegistry"}));
    assert_eq!(status, 200, "{body}");
    let out = l.key(&env, &["create", "--expires-in", "1h", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let new: Value = serde_json::from_str(&out.stdout).expect("key create --json");
    let out = l.key(&env, &["list", "--json"]);
    let list: Value = serde_json::from_str(&out.stdout).expect("key list --json");
    let expiry = |id: &Value| {
        list.as_array()
            .and_then(|a| a.iter().find(|k| &k["key_id"] == id))
            .map(|k| k["expires_at"].clone())
            .unwrap_or_else(|| panic!("{id} in {list}"))
    };
    assert_eq!(expiry(&json!(old_id)), Value::Null);
    assert_eq!(expiry(&new["key_id"]), new["expires_at"]);
    assert!(new["expires_at"].is_string(), "{new}");
}
