//! Configuration and the attachment, driven through `attach --check` and the library against a
//! real ledger process; each named cause comes from a real condition.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{TestEnv, closed_port, snapshot, static_http_server};

fn check_json(env: &TestEnv, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["attach", "--check", "--json"];
    args.extend_from_slice(extra);
    let out = env.run(&args);
    let v: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    (out.code, v)
}

#[test]
fn nothing_configured_names_the_missing_input_and_writes_nothing() {
    let env = TestEnv::new();
    let out = env.run(&["attach", "--check"]);
    insta::assert_snapshot!("attach_not_configured", snapshot(&out, &env));
    let home_entries: Vec<_> = std::fs::read_dir(env.home()).unwrap().flatten().collect();
    assert_eq!(
        home_entries.len(),
        1,
        "only the test's .gitconfig: attach --check wrote something"
    );
}

#[test]
fn a_fresh_ledger_attaches_every_command_on_the_host_with_no_flags() {
    let env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let config = env.home().join(".substrate/config.json");
    assert!(config.exists(), "first start writes the host's config");
    let out = env.run(&["attach", "--check"]);
    insta::assert_snapshot!("attach_attached", snapshot(&out, &env));
    // The JSON report carries the state but never the key.
    let key = serde_json::from_str::<Value>(&std::fs::read_to_string(&config).unwrap()).unwrap()
        ["metabob"]["apiKey"]
        .as_str()
        .unwrap()
        .to_string();
    let json = env.run(&["attach", "--check", "--json"]);
    assert_eq!(json.code, 0, "{json:?}");
    assert!(!json.stdout.contains(&key) && !json.stderr.contains(&key));
    let v: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["attached"], true);
    assert_eq!(v["state"]["identity"]["source"], "reached");
    assert_eq!(
        v["state"]["auth"]["scopes"],
        json!(["read", "write", "admin"])
    );
}

#[test]
fn a_closed_port_is_connect_refused() {
    let mut env = TestEnv::new();
    let port = closed_port();
    env.set("METABOB_API_KEY", "mb_live_0123456789abcdef")
        .set("DISCOVERY_ENDPOINT", format!("http://127.0.0.1:{port}"));
    let (code, v) = check_json(&env, &[]);
    assert_eq!(code, 1);
    let result = v["result"].as_str().unwrap();
    assert!(result.starts_with("anchor_unreachable: "), "{result}");
    assert!(
        result.contains(&format!("connect_refused(127.0.0.1:{port})")),
        "{result}"
    );
    assert_eq!(v["state"]["network"]["cause"], "connect_refused");
}

#[test]
fn an_anchor_answering_html_is_blocked_by_portal() {
    let mut env = TestEnv::new();
    let portal = static_http_server(
        200,
        "text/html",
        "<html><body>Sign in to Wi-Fi</body></html>",
    );
    env.set("METABOB_API_KEY", "mb_live_0123456789abcdef")
        .set("DISCOVERY_ENDPOINT", &portal);
    let (code, v) = check_json(&env, &[]);
    assert_eq!(code, 1);
    assert!(
        v["result"]
            .as_str()
            .unwrap()
            .starts_with("blocked_by_portal: "),
        "{v}"
    );
    assert_eq!(v["state"]["bootstrap"]["status"], "not_substrate");
}

#[test]
fn a_revoked_key_is_key_rejected() {
    let mut env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let (key_id, key) = ledger.create_key(&env, "default", "read,write");
    env.set("METABOB_API_KEY", &key)
        .set("DISCOVERY_ENDPOINT", &ledger.url);
    assert_eq!(check_json(&env, &[]).0, 0, "the new key attaches");
    let out = ledger.key(&env, &["revoke", &key_id]);
    assert_eq!(out.code, 0, "{out:?}");
    // The server believes a checked key for under a second; past that the revocation holds.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let (code, v) = check_json(&env, &[]);
    assert_eq!(code, 1);
    assert_eq!(v["state"]["auth"]["status"], "key_rejected");
    let out = env.run(&["attach", "--check"]);
    insta::assert_snapshot!("attach_key_rejected", snapshot(&out, &env));
}

#[test]
fn a_key_of_another_ledger_is_key_rejected() {
    let mut env = TestEnv::new();
    let ours = env.ledger("ours", &[]);
    let theirs = env.ledger("theirs", &[]);
    let (_, foreign) = theirs.create_key(&env, "elsewhere", "read,write");
    env.set("METABOB_API_KEY", &foreign)
        .set("DISCOVERY_ENDPOINT", &ours.url);
    let (code, v) = check_json(&env, &[]);
    assert_eq!(code, 1);
    assert!(
        v["result"].as_str().unwrap().starts_with("key_rejected: "),
        "{v}"
    );
}

#[test]
fn an_identity_that_does_not_answer_is_identity_unreachable() {
    // Advertised by a discovery that is a service apart from identity (as the substrate's
    // are), and silent (not an 8xxx port, so no rehost applies). A ledger advertising itself
    // would be used where it was reached instead.
    let mut env = TestEnv::new();
    let mut dead = closed_port();
    while (8000..9000).contains(&dead) {
        dead = closed_port();
    }
    let advertised = format!("http://127.0.0.1:{dead}");
    let bootstrap = json!({
        "discovery_endpoint": "http://discovery.example",
        "identity_endpoint": advertised,
    })
    .to_string();
    let discovery = static_http_server(200, "application/json", bootstrap.leak());
    env.set(
        "METABOB_API_KEY",
        "mb_live_0123456789abcdef0123456789abcdef",
    )
    .set("DISCOVERY_ENDPOINT", &discovery);
    let (code, v) = check_json(&env, &[]);
    assert_eq!(code, 1);
    let result = v["result"].as_str().unwrap();
    assert!(
        result.starts_with(&format!(
            "identity_unreachable(advertised={advertised}, tried=[{advertised}])"
        )),
        "{result}"
    );
    // Pinned explicitly and silent: the org check itself fails to connect.
    env.set("IDENTITY_ENDPOINT", &advertised);
    let (code, v) = check_json(&env, &[]);
    assert_eq!(code, 1);
    let result = v["result"].as_str().unwrap();
    assert!(result.starts_with("identity_unreachable("), "{result}");
    assert!(result.contains("connect_refused"), "{result}");
    assert_eq!(v["state"]["identity"]["source"], "explicit");
}

#[test]
fn an_untrusted_tls_anchor_is_tls_intercepted_and_trusted_with_extra_ca_certs() {
    let mut env = TestEnv::new();
    let pki = crate::support::Pki::new();
    let (port, server) = crate::support::s_server(&pki, "good");
    env.set("METABOB_API_KEY", "mb_live_0123456789abcdef")
        .set("DISCOVERY_ENDPOINT", format!("https://127.0.0.1:{port}"));
    let (code, v) = check_json(&env, &[]);
    assert_eq!(code, 1);
    let result = v["result"].as_str().unwrap();
    assert!(
        result.contains(&format!("tls_intercepted({})", crate::support::CA_CN)),
        "{result}"
    );
    // Trusting the CA clears the interception; s_server's status page is then what answers.
    env.set("NODE_EXTRA_CA_CERTS", pki.ca());
    let (code, v) = check_json(&env, &[]);
    drop(server);
    assert_eq!(code, 1);
    assert!(
        v["result"]
            .as_str()
            .unwrap()
            .starts_with("blocked_by_portal: "),
        "{v}"
    );
    assert_eq!(v["state"]["network"]["tls"]["authorized"], true, "{v}");
}

#[test]
fn a_proxy_answering_407_is_proxy_auth_required() {
    let mut env = TestEnv::new();
    let (port, _proxy) = crate::support::tinyproxy(&env.path(""));
    // A non-loopback anchor goes through the proxy, which answers before resolving it.
    env.set("METABOB_API_KEY", "mb_live_0123456789abcdef")
        .set("DISCOVERY_ENDPOINT", "http://substrate.example:18100")
        .set("HTTP_PROXY", format!("http://127.0.0.1:{port}"));
    let (code, v) = check_json(&env, &[]);
    assert_eq!(code, 1);
    let result = v["result"].as_str().unwrap();
    assert!(result.contains("proxy_auth_required(Basic)"), "{result}");
    assert_eq!(v["state"]["network"]["cause"], "proxy_auth_required");
    assert_eq!(v["proxy"]["route"], format!("via http://127.0.0.1:{port}"));
}

#[test]
fn flags_fill_the_environment_and_a_local_endpoint_derives_discovery() {
    let env = TestEnv::new();
    let (_, v) = check_json(
        &env,
        &[
            "--api-key",
            "mb_live_flagkey0001",
            "--endpoint",
            "http://127.0.0.1:18080",
        ],
    );
    assert_eq!(v["config"]["anchor"], "http://127.0.0.1:18100");
    assert_eq!(v["config"]["source"], "derived-h1");
    assert_eq!(v["config"]["key"], "…0001");
    assert!(
        v["config"]["warnings"][0]
            .as_str()
            .unwrap()
            .contains("derived"),
        "{v}"
    );
    // A remote endpoint derives nothing.
    let (_, v) = check_json(
        &env,
        &["--api-key", "k", "--endpoint", "https://hub.example"],
    );
    assert_eq!(v["config"]["anchor"], Value::Null);
    assert!(
        v["result"]
            .as_str()
            .unwrap()
            .starts_with("not_configured: no ledger address"),
        "{v}"
    );
}

#[test]
fn lookup_skips_files_that_are_not_ours_and_reads_the_project_file_first() {
    let mut env = TestEnv::new();
    std::fs::create_dir_all(env.cwd().join(".metabob")).unwrap();
    std::fs::write(
        env.cwd().join(".metabob/config.json"),
        r#"{"base_url":"x","state_directory":"y"}"#,
    )
    .unwrap();
    std::fs::create_dir_all(env.cwd().join(".substrate")).unwrap();
    std::fs::write(env.cwd().join(".substrate/config.json"), "not json").unwrap();
    std::fs::create_dir_all(env.home().join(".substrate")).unwrap();
    std::fs::write(
        env.home().join(".substrate/config.json"),
        r#"{"metabob":{"apiKey":"mb_live_homekey9999","discoveryEndpoint":"http://127.0.0.1:1"}}"#,
    )
    .unwrap();
    let (_, v) = check_json(&env, &[]);
    let warnings = v["config"]["warnings"].to_string();
    assert!(
        warnings.contains(".substrate/config.json: not valid JSON"),
        "{warnings}"
    );
    assert!(
        warnings.contains(".metabob/config.json: no top-level"),
        "{warnings}"
    );
    assert!(
        v["config"]["file"]
            .as_str()
            .unwrap()
            .ends_with("home/.substrate/config.json")
    );
    assert_eq!(v["config"]["key"], "…9999");
    // A project file that is ours wins over the home file.
    std::fs::write(
        env.cwd().join(".metabob/config.json"),
        r#"{"metabob":{"apiKey":"mb_live_projkey1111","discoveryEndpoint":"http://127.0.0.1:2"}}"#,
    )
    .unwrap();
    let (_, v) = check_json(&env, &[]);
    assert_eq!(v["config"]["key"], "…1111");
    assert_eq!(v["config"]["anchor"], "http://127.0.0.1:2");
    // A file named explicitly is read as named, never skipped for another.
    let explicit = env.path("explicit.json");
    std::fs::write(&explicit, r#"{"other":{}}"#).unwrap();
    env.set("METABOB_CONFIG_PATH", explicit.display().to_string());
    let (_, v) = check_json(&env, &[]);
    assert!(
        v["config"]["file"]
            .as_str()
            .unwrap()
            .ends_with("explicit.json"),
        "{v}"
    );
    assert_eq!(v["config"]["key"], Value::Null);
}

#[test]
fn aliases_placeholders_and_an_environment_endpoint_choose_one_substrate() {
    let mut env = TestEnv::new();
    std::fs::create_dir_all(env.home().join(".substrate")).unwrap();
    std::fs::write(
        env.home().join(".substrate/config.json"),
        r#"{"metabob":{"apiKey":"mb_live_filekey2222","discoveryEndpoint":"http://127.0.0.1:3","identityEndpoint":"http://127.0.0.1:4"}}"#,
    )
    .unwrap();
    // The installer's names fill ours; a placeholder is dropped as if unset.
    env.set("SUBSTRATE_API_KEY", "mb_live_aliaskey3333")
        .set("METABOB_API_KEY", "${user_config.api_key}");
    env.set("SUBSTRATE_ENDPOINT", "http://127.0.0.1:28080");
    let (_, v) = check_json(&env, &[]);
    assert_eq!(v["config"]["key"], "…3333");
    // The environment's endpoint chose the substrate: the file's endpoints do not complete it.
    assert_eq!(v["config"]["anchor"], "http://127.0.0.1:28100");
    assert_eq!(v["config"]["identity_endpoint"], Value::Null);
    let warnings = v["config"]["warnings"].to_string();
    assert!(
        warnings.contains("METABOB_API_KEY holds an unsubstituted placeholder"),
        "{warnings}"
    );
    // Both names set and different: ours wins, with a warning.
    env.set("METABOB_API_KEY", "mb_live_ourskey4444");
    let (_, v) = check_json(&env, &[]);
    assert_eq!(v["config"]["key"], "…4444");
    assert!(
        v["config"]["warnings"]
            .to_string()
            .contains("both set and differ")
    );
    // With no endpoint in the environment, the file's endpoints and credentials apply.
    env.unset("SUBSTRATE_ENDPOINT")
        .unset("SUBSTRATE_API_KEY")
        .unset("METABOB_API_KEY");
    let (_, v) = check_json(&env, &[]);
    assert_eq!(v["config"]["key"], "…2222");
    assert_eq!(v["config"]["anchor"], "http://127.0.0.1:3");
    assert_eq!(v["config"]["identity_endpoint"], "http://127.0.0.1:4");
}

mod in_process {
    use super::*;
    use metabob_net::attachment::{Attachment, ClientClaim, ResolveError};
    use metabob_net::config;
    use metabob_net::{NetClient, Request, Url};
    use metabob_process::env::Env;

    fn attachment(env: &TestEnv, key: &str, discovery: &str) -> Attachment {
        let mut vars: Vec<(String, String)> = env.vars.clone();
        vars.push(("METABOB_API_KEY".into(), key.into()));
        vars.push(("DISCOVERY_ENDPOINT".into(), discovery.into()));
        let mut e = Env::new(vars, env.cwd());
        let cfg = config::load(&mut e);
        let guard = metabob_process::guard::Guard::new(&e, Some(&env.cwd()));
        Attachment::new(
            cfg,
            NetClient::from_env(&e),
            ClientClaim::from_env(&e, &env.cwd()),
            guard,
        )
    }

    async fn resolves_served(url: &str) -> u64 {
        let net = NetClient::from_env(&Env::new(Vec::new(), "/"));
        let health = net
            .send(Request::get(Url::parse(url).unwrap().join("/health")))
            .await
            .unwrap();
        health
            .json()
            .and_then(|v| v["resolves"].as_u64())
            .expect("the ledger counts resolves")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_only_keys_write_is_refused_before_anything_is_sent() {
        let env = TestEnv::new();
        let ledger = env.ledger("main", &[]);
        let (_, key) = ledger.create_key(&env, "default", "read");
        let a = attachment(&env, &key, &ledger.url);
        let read = a
            .resolve(json!({"type": "conceptSearch", "limit": 1}))
            .await
            .unwrap();
        assert_eq!(read.status, 200, "reads are untouched: {:?}", read.body);
        let before = resolves_served(&ledger.url).await;
        let write = json!({"type": "concept_create_write", "conceptData": {
            "content": "x", "shape": "memo", "source_type": "memo"}});
        match a.resolve(write).await {
            Err(e @ ResolveError::KeyReadOnly { .. }) => assert_eq!(
                e.to_string(),
                "key_read_only: this key has scopes [read]; the concept_create_write write was not sent"
            ),
            other => panic!("expected key_read_only, got {other:?}"),
        }
        assert_eq!(
            resolves_served(&ledger.url).await,
            before,
            "the refused write reached the ledger"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_carry_the_client_claim_and_reads_do_not() {
        let env = TestEnv::new();
        let ledger = env.ledger("main", &[]);
        let (_, key) = ledger.create_key(&env, "default", "read,write");
        let a = attachment(&env, &key, &ledger.url);
        let created = a
            .resolve(json!({"type": "concept_create_write", "conceptData": {
                "content": "body", "shape": "memo", "source_type": "memo"}}))
            .await
            .unwrap();
        let claim = &created.body["concept"]["client_claim"];
        assert_eq!(claim["client"], metabob_wire::CLIENT, "{}", created.body);
        assert!(
            claim["operator"]
                .as_str()
                .unwrap()
                .starts_with("metabob-mcp-")
        );
        assert_eq!(claim["session"].as_str().unwrap().len(), 36);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_server_reattaches_once_its_ledger_comes_up() {
        let env = TestEnv::new();
        let port = closed_port();
        let url = format!("http://127.0.0.1:{port}");
        // A key must exist before the ledger starts: make it in the ledger's data offline.
        let data = env.path("ledger-late");
        let data_s = data.display().to_string();
        let out = env.run(&[
            "ledger", "key", "create", "--init", "--data", &data_s, "--scopes", "read", "--json",
        ]);
        assert_eq!(out.code, 0, "{out:?}");
        let key = serde_json::from_str::<Value>(&out.stdout).unwrap()["key"]
            .as_str()
            .unwrap()
            .to_string();
        let a = attachment(&env, &key, &url);
        let _bg = a.spawn_background();
        let first = a.current().await;
        assert!(
            first
                .message
                .as_deref()
                .unwrap_or("")
                .contains("connect_refused"),
            "{first:?}"
        );
        let gate = a.gate().await.unwrap_err().to_string();
        assert!(gate.starts_with("anchor_unreachable: "), "{gate}");
        let listen = format!("127.0.0.1:{port}");
        let mut ledger = env
            .cmd(&["ledger", "serve", "--data", &data_s, "--listen", &listen])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut attached = false;
        for _ in 0..200 {
            if a.settled().is_some_and(|s| s.attached()) {
                attached = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = ledger.kill();
        let _ = ledger.wait();
        assert!(
            attached,
            "the background re-attach did not attach within 20 s: {:?}",
            a.settled()
        );
    }
}

#[test]
fn doctor_reports_the_hops_the_warnings_and_the_state() {
    let mut env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    env.set("METABOB_ENDPOINT", "${user_config.endpoint}");
    let out = env.run(&["doctor"]);
    insta::assert_snapshot!("doctor_attached", snapshot(&out, &env));
    let only_hops = env.run(&["doctor", "--attach"]);
    insta::assert_snapshot!("doctor_attach_only", snapshot(&only_hops, &env));
    // Not attached: doctor says why and exits 1.
    env.set("METABOB_API_KEY", "mb_live_not_a_key_of_this_ledger");
    let out = env.run(&["doctor"]);
    insta::assert_snapshot!("doctor_key_rejected", snapshot(&out, &env));
    let out = env.run(&["doctor", "--json"]);
    assert_eq!(out.code, 1, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["state"]["cause"], "key_rejected");
}
