//! The HTTP path against real servers on 127.0.0.1: tiny HTTP servers, a scripted proxy,
//! `openssl s_server` for TLS, and the real tinyproxy for proxy authentication.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{CA_CN, Pki, closed_port, s_server};
use metabob_net::{BadProxy, NetCause, NetClient, Request, Retry, RouteReason, Target, Url};
use metabob_process::env::Env;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn env(vars: &[(&str, &str)]) -> Env {
    // The OS store plays no part in these tests and is slow to read on some hosts.
    let mut all = vec![("METABOB_NO_SYSTEM_CA".to_string(), "1".to_string())];
    all.extend(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Env::new(all, "/")
}

fn client(vars: &[(&str, &str)]) -> NetClient {
    NetClient::from_env(&env(vars))
}

fn url(s: &str) -> Url {
    Url::parse(s).expect("test URL parses")
}

/// A request head and body as a server saw it.
#[derive(Clone, Debug)]
struct Seen {
    head: String,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }
    fn request_line(&self) -> &str {
        self.head.lines().next().unwrap_or_default()
    }
}

type Log = Arc<Mutex<Vec<Seen>>>;

async fn read_request(s: &mut TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut seen = Seen {
        head,
        body: buf[end..].to_vec(),
    };
    let len: usize = seen
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while seen.body.len() < len {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        seen.body.extend_from_slice(&chunk[..n]);
    }
    Some(seen)
}

fn http_response(status: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

#[derive(Clone, Copy)]
enum Server {
    /// `/ok` answers JSON; `/echo` answers with the request body.
    Json,
    Html,
    /// Reads the request, then closes without a word.
    Close,
    /// Reads the request and never answers.
    Silent,
    /// 503 to the first two requests, JSON after.
    GatewayTwice,
    /// Declares a body far beyond the client's cap.
    Huge,
}

/// A loopback listener that reads each request, logs it, and hands the connection, the
/// request and how many requests it has seen so far to `answer`.
async fn listen<F, Fut>(answer: F) -> (u16, Log)
where
    F: Fn(TcpStream, Seen, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let port = listener.local_addr().expect("bound address").port();
    let log: Log = Arc::default();
    let seen_log = log.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (log, answer) = (seen_log.clone(), answer.clone());
            tokio::spawn(async move {
                let Some(seen) = read_request(&mut s).await else {
                    return;
                };
                let served = {
                    let mut log = log.lock().expect("log lock");
                    log.push(seen.clone());
                    log.len()
                };
                answer(s, seen, served).await;
            });
        }
    });
    (port, log)
}

async fn reply(mut s: TcpStream, answer: &[u8]) {
    let _ = s.write_all(answer).await;
    let _ = s.shutdown().await;
}

async fn serve(kind: Server) -> (u16, Log) {
    listen(move |s, seen, served| async move {
        let answer = match kind {
            Server::Json if seen.request_line().starts_with("POST /echo ") => {
                http_response("200 OK", "application/json", &seen.body)
            }
            Server::Json => http_response("200 OK", "application/json", br#"{"ok":true}"#),
            Server::Html => http_response(
                "200 OK",
                "text/html",
                b"<html><body>Sign in to the guest network</body></html>",
            ),
            Server::GatewayTwice if served <= 2 => {
                http_response("503 Service Unavailable", "text/plain", b"busy")
            }
            Server::GatewayTwice => http_response("200 OK", "application/json", br#"{"ok":true}"#),
            Server::Huge => b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n{".to_vec(),
            Server::Close => return,
            Server::Silent => {
                tokio::time::sleep(Duration::from_secs(60)).await;
                return;
            }
        };
        reply(s, &answer).await;
    })
    .await
}

#[derive(Clone, Copy)]
enum Proxy {
    /// 407 with this Proxy-Authenticate value, to CONNECT and absolute-form alike.
    Auth(&'static str),
    /// 403 to CONNECT.
    Forbid,
    /// 502 to CONNECT.
    BadGateway,
    /// Something that is not HTTP in answer to CONNECT.
    Garbage,
    /// 200 to CONNECT, then a page instead of a tunnel.
    PageAfter200,
    /// CONNECT is never answered.
    Silent,
    /// CONNECT is tunnelled to this loopback port, whatever host was asked for; an
    /// absolute-form request is answered by the proxy itself, so no name is ever resolved.
    Tunnel(u16),
}

async fn proxy(mode: Proxy) -> (u16, Log) {
    listen(move |mut s, seen, _| async move {
                let connect = seen.request_line().starts_with("CONNECT ");
        let answer: Vec<u8> = match (mode, connect) {
            (Proxy::Auth(challenge), _) => format!(
                "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: {challenge}\r\nContent-Length: 0\r\n\r\n"
            )
            .into_bytes(),
            (Proxy::Forbid, true) => b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n".to_vec(),
            (Proxy::BadGateway, true) => b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n".to_vec(),
            (Proxy::Garbage, true) => b"SSH-2.0-OpenSSH_9.2\r\n\r\n".to_vec(),
            (Proxy::PageAfter200, true) => {
                b"HTTP/1.1 200 OK\r\n\r\n<html>Acceptable use policy</html>".to_vec()
            }
            (Proxy::Silent, true) => {
                tokio::time::sleep(Duration::from_secs(60)).await;
                return;
            }
            (Proxy::Tunnel(upstream), true) => {
                let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    let _ = s.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                    return;
                };
                if s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut s, &mut up).await;
                return;
            }
            (_, false) => {
                let body = serde_json::json!({
                    "request_line": seen.request_line(),
                    "proxy_authorization": seen.header("proxy-authorization"),
                });
                http_response("200 OK", "application/json", body.to_string().as_bytes())
            }
        };
        reply(s, &answer).await;
    })
    .await
}

// ---- direct ----

#[tokio::test]
async fn get_json_direct() {
    let (port, log) = serve(Server::Json).await;
    let resp = client(&[])
        .send(Request::get(url(&format!("http://127.0.0.1:{port}/ok"))))
        .await
        .expect("a JSON answer");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json(), Some(serde_json::json!({"ok": true})));
    assert!(!resp.is_html());
    assert_eq!(resp.header("Content-Type"), Some("application/json"));
    assert_eq!(resp.route.reason, RouteReason::Loopback);
    assert!(resp.tls.is_none());
    let seen = log.lock().expect("log lock")[0].clone();
    assert_eq!(seen.request_line(), "GET /ok HTTP/1.1");
    assert_eq!(seen.header("host"), Some(format!("127.0.0.1:{port}")));
}

#[tokio::test]
async fn post_json_body_arrives() {
    let (port, log) = serve(Server::Json).await;
    let body = serde_json::json!({"shape": "vesselRegistry", "n": [1, 2, 3]});
    let req = Request::post_json(url(&format!("http://127.0.0.1:{port}/echo")), &body)
        .header("authorization", "Bearer k");
    assert_eq!(req.retry, Retry::Never);
    let resp = client(&[]).send(req).await.expect("an echo");
    assert_eq!(resp.json(), Some(body));
    let seen = log.lock().expect("log lock")[0].clone();
    assert_eq!(
        seen.header("content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(seen.header("authorization").as_deref(), Some("Bearer k"));
}

#[tokio::test]
async fn html_answer_is_recognised() {
    let (port, _) = serve(Server::Html).await;
    let resp = client(&[])
        .send(Request::get(url(&format!(
            "http://127.0.0.1:{port}/bootstrap"
        ))))
        .await
        .expect("an answer");
    assert!(resp.is_html());
    assert_eq!(resp.json(), None);
}

#[tokio::test]
async fn closed_connection_is_connection_reset_and_retried() {
    let (port, log) = serve(Server::Close).await;
    let c = client(&[]);
    let target = url(&format!("http://127.0.0.1:{port}/x"));
    let err = c
        .send(Request::get(target.clone()))
        .await
        .expect_err("no answer");
    assert_eq!(
        err.cause,
        NetCause::ConnectionReset {
            host: "127.0.0.1".into()
        }
    );
    assert!(err.to_string().starts_with("connection_reset(127.0.0.1)"));
    assert_eq!(
        log.lock().expect("log lock").len(),
        3,
        "a GET is tried three times"
    );

    let before = log.lock().expect("log lock").len();
    let err = c
        .send(Request::post_json(target, &serde_json::json!({})))
        .await
        .expect_err("no answer");
    assert_eq!(err.cause.token(), "connection_reset");
    assert_eq!(
        log.lock().expect("log lock").len(),
        before + 1,
        "a write is never repeated"
    );
}

#[tokio::test]
async fn silent_server_is_response_timeout() {
    let (port, _) = serve(Server::Silent).await;
    let req = Request::get(url(&format!("http://127.0.0.1:{port}/slow")))
        .budget(Duration::from_millis(300));
    let err = client(&[]).send(req).await.expect_err("no answer in time");
    assert_eq!(
        err.cause,
        NetCause::ResponseTimeout {
            host: "127.0.0.1".into(),
            ms: 300
        }
    );
    assert!(
        err.to_string()
            .starts_with("response_timeout(127.0.0.1, 300)")
    );
}

#[tokio::test]
async fn closed_port_is_connect_refused() {
    let port = closed_port();
    let err = client(&[])
        .send(Request::get(url(&format!("http://127.0.0.1:{port}/"))))
        .await
        .expect_err("nothing listens");
    assert_eq!(
        err.cause,
        NetCause::ConnectRefused(Target::new("127.0.0.1", port))
    );
}

#[tokio::test]
async fn gateway_answers_are_retried_only_when_asked() {
    let (port, log) = serve(Server::GatewayTwice).await;
    let target = url(&format!("http://127.0.0.1:{port}/bootstrap"));
    let c = client(&[]);
    let resp = c
        .send(Request::get(target.clone()))
        .await
        .expect("an answer");
    assert_eq!(
        resp.status, 503,
        "a plain read returns the gateway answer as it is"
    );
    assert_eq!(log.lock().expect("log lock").len(), 1);

    let resp = c
        .send(Request::get(target).retry(Retry::IdempotentAndGateway))
        .await
        .expect("an answer");
    assert_eq!(resp.status, 200);
    assert_eq!(log.lock().expect("log lock").len(), 3);
}

#[tokio::test]
async fn oversized_body_is_refused() {
    let (port, _) = serve(Server::Huge).await;
    let err = client(&[])
        .send(Request::get(url(&format!("http://127.0.0.1:{port}/"))))
        .await
        .expect_err("too large");
    assert_eq!(
        err.cause,
        NetCause::ResponseTooLarge {
            host: format!("127.0.0.1:{port}"),
            limit: metabob_net::MAX_BODY_BYTES,
        }
    );
}

#[tokio::test]
async fn silent_tunnel_or_handshake_is_connect_timeout() {
    let (pport, _) = proxy(Proxy::Silent).await;
    let p = format!("http://127.0.0.1:{pport}");
    let c = client(&[("HTTPS_PROXY", &p), ("METABOB_CONNECT_TIMEOUT_MS", "300")]);
    let err = c
        .send(Request::get(url("https://ledger.example/")).budget(Duration::from_secs(10)))
        .await
        .expect_err("no tunnel");
    assert_eq!(
        err.cause,
        NetCause::ConnectTimeout(Target::new("127.0.0.1", pport))
    );

    // A listener that never speaks TLS: the handshake falls inside the connect budget too.
    let (port, _) = serve(Server::Silent).await;
    let err = c
        .send(Request::get(url(&format!("https://127.0.0.1:{port}/"))))
        .await
        .expect_err("no handshake");
    assert_eq!(
        err.cause,
        NetCause::ConnectTimeout(Target::new("127.0.0.1", port))
    );
}

// ---- TLS ----

#[tokio::test]
async fn untrusted_ca_is_tls_intercepted_naming_it() {
    let pki = Pki::new();
    let (port, _server) = s_server(&pki, "good");
    let err = client(&[])
        .send(Request::get(url(&format!("https://127.0.0.1:{port}/"))))
        .await
        .expect_err("the CA is unknown");
    assert_eq!(
        err.cause,
        NetCause::TlsIntercepted {
            issuer: CA_CN.into()
        }
    );
    assert!(
        err.to_string()
            .starts_with(&format!("tls_intercepted({CA_CN})"))
    );
    let tls = err.tls.expect("TLS was attempted");
    assert!(!tls.authorized);
    assert_eq!(tls.issuer.as_deref(), Some(CA_CN));
}

#[tokio::test]
async fn extra_ca_file_makes_it_trusted() {
    let pki = Pki::new();
    let (port, _server) = s_server(&pki, "good");
    let ca = pki.ca();
    let resp = client(&[("NODE_EXTRA_CA_CERTS", &ca)])
        .send(Request::get(url(&format!("https://127.0.0.1:{port}/"))))
        .await
        .expect("a verified answer");
    assert_eq!(resp.status, 200);
    let tls = resp.tls.expect("https");
    assert!(tls.authorized);
    assert_eq!(tls.issuer.as_deref(), Some(CA_CN));
}

#[tokio::test]
async fn trusted_cert_for_another_name_is_name_mismatch() {
    let pki = Pki::new();
    let (port, _server) = s_server(&pki, "other");
    let ca = pki.ca();
    let err = client(&[("NODE_EXTRA_CA_CERTS", &ca)])
        .send(Request::get(url(&format!("https://127.0.0.1:{port}/"))))
        .await
        .expect_err("wrong name");
    assert_eq!(
        err.cause,
        NetCause::TlsNameMismatch {
            host: "127.0.0.1".into()
        }
    );
}

// ---- proxies ----

#[tokio::test]
async fn http_target_goes_through_proxy_with_credentials() {
    let (pport, log) = proxy(Proxy::Tunnel(closed_port())).await;
    let proxy_url = format!("http://scott:ti%3Ager@127.0.0.1:{pport}");
    let c = client(&[("HTTP_PROXY", &proxy_url)]);
    let target = url("http://ledger.example:18100/bootstrap");
    let route = c.route_for(&target).expect("a route");
    assert_eq!(route.via, Some(format!("http://***@127.0.0.1:{pport}")));
    let resp = c
        .send(Request::get(target))
        .await
        .expect("the proxy answers");
    let seen = resp.json().expect("JSON from the proxy");
    assert_eq!(
        seen["request_line"],
        "GET http://ledger.example:18100/bootstrap HTTP/1.1"
    );
    // base64("scott:ti:ger")
    assert_eq!(seen["proxy_authorization"], "Basic c2NvdHQ6dGk6Z2Vy");
    assert_eq!(resp.route.reason, RouteReason::Proxy);
    assert_eq!(log.lock().expect("log lock").len(), 1);
}

#[tokio::test]
async fn loopback_target_bypasses_proxy() {
    let (pport, plog) = proxy(Proxy::Auth("Basic realm=x")).await;
    let (port, slog) = serve(Server::Json).await;
    let p = format!("http://127.0.0.1:{pport}");
    let c = client(&[("HTTP_PROXY", &p), ("HTTPS_PROXY", &p)]);
    let resp = c
        .send(Request::get(url(&format!("http://127.0.0.1:{port}/ok"))))
        .await
        .expect("direct answer");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.route.reason, RouteReason::Loopback);
    assert!(plog.lock().expect("log lock").is_empty());
    assert_eq!(slog.lock().expect("log lock").len(), 1);
    let diag = c.proxy_diagnosis();
    assert_eq!(diag.no_proxy, ["localhost", "127.0.0.1", "::1"]);
}

#[tokio::test]
async fn https_through_proxy_tunnels_by_name() {
    let pki = Pki::new();
    let (tls_port, _server) = s_server(&pki, "good");
    let (pport, log) = proxy(Proxy::Tunnel(tls_port)).await;
    let p = format!("127.0.0.1:{pport}"); // scheme-less: read as http://
    let ca = pki.ca();
    let c = client(&[("https_proxy", &p), ("NODE_EXTRA_CA_CERTS", &ca)]);
    let resp = c
        .send(Request::get(url("https://ledger.example:8443/")))
        .await
        .expect("a tunnelled, verified answer");
    assert_eq!(resp.status, 200);
    assert!(resp.tls.expect("https").authorized);
    let seen = log.lock().expect("log lock")[0].clone();
    assert_eq!(seen.request_line(), "CONNECT ledger.example:8443 HTTP/1.1");
}

#[tokio::test]
async fn proxy_auth_required_basic_and_ntlm() {
    let (pport, log) = proxy(Proxy::Auth("Basic realm=x")).await;
    let target = url("https://ledger.example/");
    let err = client(&[("HTTPS_PROXY", &format!("http://127.0.0.1:{pport}"))])
        .send(Request::get(target.clone()))
        .await
        .expect_err("407");
    assert_eq!(
        err.cause,
        NetCause::ProxyAuthRequired {
            schemes: vec!["Basic".into()],
            had_credentials: false
        }
    );
    assert_eq!(
        log.lock().expect("log lock").len(),
        1,
        "an auth failure is not retried"
    );

    let err = client(&[("HTTPS_PROXY", &format!("http://u:wrong@127.0.0.1:{pport}"))])
        .send(Request::get(target.clone()))
        .await
        .expect_err("407");
    assert!(err.to_string().contains("rejected"), "{err}");
    assert!(!err.to_string().contains("wrong"));
    let connect = log.lock().expect("log lock")[1].clone();
    assert_eq!(
        connect.header("proxy-authorization").as_deref(),
        Some("Basic dTp3cm9uZw==")
    );

    let (nport, _) = proxy(Proxy::Auth("NTLM")).await;
    let err = client(&[("HTTPS_PROXY", &format!("http://127.0.0.1:{nport}"))])
        .send(Request::get(target))
        .await
        .expect_err("407");
    assert_eq!(
        err.cause,
        NetCause::ProxyAuthRequired {
            schemes: vec!["NTLM".into()],
            had_credentials: false
        }
    );
    assert!(err.to_string().contains("HTTPS_PROXY"));
}

#[tokio::test]
async fn proxy_refusing_the_port_is_port_blocked() {
    let (pport, _) = proxy(Proxy::Forbid).await;
    let err = client(&[("HTTPS_PROXY", &format!("http://127.0.0.1:{pport}"))])
        .send(Request::get(url("https://ledger.example:8443/")))
        .await
        .expect_err("403");
    assert_eq!(err.cause, NetCause::ProxyPortBlocked(8443));
}

#[tokio::test]
async fn proxy_5xx_to_connect_is_retried_then_anchor_unreachable() {
    let (pport, log) = proxy(Proxy::BadGateway).await;
    let c = client(&[("HTTPS_PROXY", &format!("http://127.0.0.1:{pport}"))]);
    let err = c
        .send(Request::get(url("https://ledger.example/")))
        .await
        .expect_err("502");
    assert_eq!(
        err.cause,
        NetCause::AnchorUnreachable(Target::new("ledger.example", 443))
    );
    assert_eq!(log.lock().expect("log lock").len(), 3);

    let err = c
        .send(Request::get(url("https://ledger.example/")).retry(Retry::Never))
        .await
        .expect_err("502");
    assert_eq!(err.cause.token(), "anchor_unreachable");
    assert_eq!(log.lock().expect("log lock").len(), 4);
}

#[tokio::test]
async fn portal_answers_to_connect_are_blocked_by_portal() {
    for mode in [Proxy::Garbage, Proxy::PageAfter200] {
        let (pport, log) = proxy(mode).await;
        let err = client(&[("HTTPS_PROXY", &format!("http://127.0.0.1:{pport}"))])
            .send(Request::get(url("https://ledger.example/")))
            .await
            .expect_err("no tunnel");
        assert_eq!(err.cause.token(), "blocked_by_portal", "{err}");
        assert_eq!(
            log.lock().expect("log lock").len(),
            1,
            "a classification is not retried"
        );
    }
}

#[tokio::test]
async fn unsupported_proxy_scheme() {
    let err = client(&[("HTTPS_PROXY", "socks5://127.0.0.1:1080")])
        .send(Request::get(url("https://ledger.example/")))
        .await
        .expect_err("socks");
    assert_eq!(
        err.cause,
        NetCause::ProxyUnsupported(BadProxy::Scheme {
            scheme: "socks5".into()
        })
    );
    assert!(err.to_string().starts_with("proxy_unsupported(socks5)"));
}

// ---- the real tinyproxy ----

#[tokio::test]
async fn tinyproxy_basic_auth_is_proxy_auth_required() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (port, _guard) = crate::support::tinyproxy(dir.path());

    let target = url("http://ledger.example:18100/bootstrap");
    let err = client(&[("HTTP_PROXY", &format!("http://127.0.0.1:{port}"))])
        .send(Request::get(target))
        .await
        .expect_err("407 from tinyproxy");
    assert_eq!(
        err.cause,
        NetCause::ProxyAuthRequired {
            schemes: vec!["Basic".into()],
            had_credentials: false
        }
    );
    // Rejected credentials: tinyproxy 1.11 answers CONNECT with 401 and WWW-Authenticate.
    let err = client(&[("HTTPS_PROXY", &format!("http://user:nope@127.0.0.1:{port}"))])
        .send(Request::get(url("https://ledger.example:8443/")))
        .await
        .expect_err("tinyproxy rejects the login");
    assert_eq!(
        err.cause,
        NetCause::ProxyAuthRequired {
            schemes: vec!["Basic".into()],
            had_credentials: true
        }
    );
}
