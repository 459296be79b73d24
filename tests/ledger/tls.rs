//! The ledger across hosts: HTTPS it serves itself with certificates rotated in place, the
//! address a client reached it at, and a key that never crosses a plain hop after a TLS one.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::support::{Pki, Relay, TestEnv, TlsConn, static_http_server, tls_proxy, wait_until};

fn tls_flags(dir: &Path) -> [String; 4] {
    [
        "--tls-cert".into(),
        dir.join("ledger.pem").display().to_string(),
        "--tls-key".into(),
        dir.join("ledger.key").display().to_string(),
    ]
}

/// Puts `pki`'s `good` leaf (127.0.0.1) where the ledger reads its certificate, as a rotation
/// does: a new file renamed over the old one.
fn install(pki: &Pki, dir: &Path) {
    for (from, to) in [("good.key", "ledger.key"), ("good.pem", "ledger.pem")] {
        let tmp = dir.join(format!(".{to}.new"));
        std::fs::copy(pki.path(from), &tmp).expect("copy the leaf");
        std::fs::rename(&tmp, dir.join(to)).expect("rename it into place");
    }
}

/// A client that trusts only `pki`'s CA.
fn trusting(env: &mut TestEnv, pki: &Pki) {
    env.set("METABOB_NO_SYSTEM_CA", "1")
        .set("METABOB_EXTRA_CA_CERTS", pki.ca());
}

fn attach_check(env: &TestEnv) -> (i32, Value) {
    let out = env.run(&["attach", "--check", "--json"]);
    let v = serde_json::from_str(&out.stdout).unwrap_or_else(|_| panic!("{out:?}"));
    (out.code, v)
}

#[test]
fn the_ledger_serves_https_with_its_own_certificate_and_clients_trust_a_private_ca() {
    let pki = Pki::new();
    let mut env = TestEnv::new();
    let dir = env.path("tls");
    std::fs::create_dir_all(&dir).unwrap();
    install(&pki, &dir);
    trusting(&mut env, &pki);
    let flags = tls_flags(&dir);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let l = env.ledger("tls", &flags);

    // With TLS on, the printed address and the advertised one are https.
    assert!(l.url.starts_with("https://127.0.0.1:"), "{}", l.url);
    let config = std::fs::read_to_string(env.home().join(".substrate/config.json")).unwrap();
    assert!(config.contains(&format!("\"{}\"", l.url)), "{config}");

    let (code, state) = attach_check(&env);
    assert_eq!(code, 0, "{state}");
    assert_eq!(
        state["state"]["network"]["tls"]["authorized"], true,
        "{state}"
    );
    let listed = env.run(&["task", "list", "--json"]);
    assert_eq!(listed.code, 0, "a keyed request over TLS: {listed:?}");
    // The probe a container healthcheck runs, over the same trust.
    let health = env.run(&["ledger", "health", "--url", &l.url]);
    assert_eq!(health.code, 0, "{health:?}");
    assert!(health.stdout.contains("TLS verified"), "{health:?}");
    let closed = format!("https://127.0.0.1:{}", crate::support::closed_port());
    let health = env.run(&["ledger", "health", "--url", &closed]);
    assert_eq!(health.code, 1, "{health:?}");
    assert!(
        health.stderr.contains("did not answer") && health.stderr.contains("connect_refused"),
        "{health:?}"
    );

    // Plain HTTP on the TLS port gets no HTTP answer.
    let mut plain = std::net::TcpStream::connect(("127.0.0.1", l.port())).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    plain
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/"), "{answer:?}");

    // A client without the CA is told whose certificate it was refused.
    let mut stranger = TestEnv::new();
    stranger
        .set("METABOB_NO_SYSTEM_CA", "1")
        .set("METABOB_LEDGER", l.url.clone())
        .set("METABOB_API_KEY", env.admin_key());
    let (code, state) = attach_check(&stranger);
    assert_eq!(code, 1, "{state}");
    let line = state["state"]["message"].as_str().unwrap_or_default();
    assert!(
        line.contains("tls_intercepted(") && line.contains("METABOB_EXTRA_CA_CERTS"),
        "{line}"
    );
}

#[test]
fn a_rotated_certificate_reaches_new_connections_while_open_ones_keep_going() {
    let (first, second) = (Pki::new(), Pki::new());
    let env = TestEnv::new();
    let dir = env.path("tls");
    std::fs::create_dir_all(&dir).unwrap();
    install(&first, &dir);
    let flags = tls_flags(&dir);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let l = env.ledger("rotate", &flags);
    let port = l.port();

    let mut open = TlsConn::open(&first.path("ca.pem"), port).expect("the first certificate");
    assert_eq!(open.get("/health").unwrap().0, 200);
    assert!(TlsConn::open(&second.path("ca.pem"), port).is_err());

    // Rotated in place, as cert-manager does: the next handshakes get the new pair.
    install(&second, &dir);
    assert!(
        wait_until(Duration::from_secs(20), || TlsConn::open(
            &second.path("ca.pem"),
            port
        )
        .is_ok()),
        "the rotated certificate was never served"
    );
    assert!(TlsConn::open(&first.path("ca.pem"), port).is_err());
    // The connection opened before the rotation still answers.
    assert_eq!(open.get("/health").unwrap().0, 200);

    // A half-written rotation is not served: the pair in use stays.
    std::fs::write(dir.join("ledger.pem"), "-----BEGIN CERTIFICATE-----\ntrunc").unwrap();
    std::thread::sleep(Duration::from_secs(3));
    TlsConn::open(&second.path("ca.pem"), port).expect("still the second certificate");

    // SIGHUP reloads too, and does not end the server.
    install(&first, &dir);
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &l.child.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    assert!(
        wait_until(Duration::from_secs(20), || TlsConn::open(
            &first.path("ca.pem"),
            port
        )
        .is_ok()),
        "the certificate named on SIGHUP was never served"
    );
    assert_eq!(open.get("/health").unwrap().0, 200);
}

#[test]
fn a_ledger_on_a_public_address_without_tls_says_so_naming_the_flags() {
    let env = TestEnv::new();
    let mut child = env
        .cmd(&["ledger", "serve", "--listen", "0.0.0.0:0", "--data"])
        .arg(env.path("ledger"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines().map_while(Result::ok);
    let warned = lines.find(|l| l.contains("plain HTTP"));
    let _ = child.kill();
    let _ = child.wait();
    let warned = warned.expect("a warning about plain HTTP");
    assert!(
        warned.contains("--tls-cert") && warned.contains("--tls-key"),
        "{warned}"
    );
}

/// The plain ledger, its advertised address a recording relay to it; the TLS proxy in front.
struct BehindProxy {
    relay: Relay,
    https: String,
    _proxy: crate::support::Reaped,
    _ledger: crate::support::Ledger,
}

fn behind_a_tls_proxy(env: &TestEnv, pki: &Pki) -> BehindProxy {
    let relay = Relay::start();
    let public = format!("http://127.0.0.1:{}", relay.port);
    let l = env.ledger("proxied", &["--public-url", &public]);
    relay.forward_to(&format!("127.0.0.1:{}", l.port()));
    let (port, proxy) = tls_proxy(pki, "good", &format!("127.0.0.1:{}", l.port()));
    BehindProxy {
        relay,
        https: format!("https://127.0.0.1:{port}"),
        _proxy: proxy,
        _ledger: l,
    }
}

#[test]
fn behind_a_tls_proxy_the_ledger_is_used_where_it_was_reached_and_the_key_stays_off_the_plain_port()
{
    let pki = Pki::new();
    let mut env = TestEnv::new();
    let world = behind_a_tls_proxy(&env, &pki);
    trusting(&mut env, &pki);
    env.set("METABOB_LEDGER", world.https.clone());

    let (code, state) = attach_check(&env);
    assert_eq!(code, 0, "{state}");
    assert_eq!(
        state["state"]["identity"]["endpoint"],
        world.https.as_str(),
        "{state}"
    );
    assert_eq!(state["state"]["identity"]["source"], "reached", "{state}");
    let recorded = env.run(&[
        "finding",
        "record",
        "--origin",
        "git://example.invalid/app.git",
        "--category",
        "task",
        "--severity",
        "LOW",
        "--file",
        "a.py",
        "--summary",
        "over TLS",
    ]);
    assert_eq!(recorded.code, 0, "{recorded:?}");
    let listed = env.run(&["task", "list", "--json"]);
    assert_eq!(listed.code, 0, "{listed:?}");
    assert!(listed.stdout.contains("over TLS"), "{listed:?}");

    let plain = world.relay.sent();
    assert!(
        !plain.contains("mb_live_") && !plain.contains("Authorization"),
        "the key crossed the plain port: {plain}"
    );
}

#[test]
fn an_advertised_plain_identity_after_an_https_discovery_is_never_sent_the_key() {
    let pki = Pki::new();
    let mut env = TestEnv::new();
    // A plain identity that would accept the key, reached only through a recording relay.
    let relay = Relay::start();
    let l = env.ledger("identity", &[]);
    relay.forward_to(&format!("127.0.0.1:{}", l.port()));
    // Discovery, a separate service behind TLS, advertising that plain identity.
    let bootstrap = serde_json::json!({
        "service": "substrate-discovery",
        "discovery_endpoint": "https://discovery.example",
        "identity_endpoint": format!("http://127.0.0.1:{}", relay.port),
    })
    .to_string();
    let discovery = static_http_server(200, "application/json", bootstrap.leak());
    let (port, _proxy) = tls_proxy(&pki, "good", discovery.trim_start_matches("http://"));
    trusting(&mut env, &pki);
    env.set("METABOB_LEDGER", format!("https://127.0.0.1:{port}"));

    let (code, state) = attach_check(&env);
    assert_eq!(code, 1, "{state}");
    assert_eq!(state["state"]["cause"], "identity_insecure", "{state}");
    let line = state["state"]["message"].as_str().unwrap_or_default();
    assert!(line.contains("IDENTITY_ENDPOINT"), "{line}");
    assert_eq!(relay.sent(), "", "nothing may be dialled on the plain hop");
}
