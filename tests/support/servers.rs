//! Stand-in servers on loopback: a fixed HTTP answer, the fixture producer, a real tinyproxy,
//! git's own smart HTTP.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{Reaped, closed_port, wait_until};

/// A one-shot HTTP server on loopback answering every request with `status`, `content_type`
/// and `body` (a portal, a block page, a wrong service). Returns its URL.
pub fn static_http_server(status: u16, content_type: &'static str, body: &'static str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 8192];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

/// The fixture producer (tests/support/producer.py): the stand-in for the substrate's external
/// producers, answering each shape from the JSON file at `fixtures`, which a test may rewrite
/// while it runs. Returns its URL once it accepts.
pub struct Producer {
    pub url: String,
    _child: Reaped,
}

impl Producer {
    pub fn start(fixtures: &Path) -> Producer {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/producer.py");
        let mut cmd = Command::new("python3");
        cmd.arg(script).arg(fixtures).stderr(Stdio::null());
        let (port, child) = Reaped::listening(cmd, "the fixture producer");
        Producer {
            url: format!("http://127.0.0.1:{port}"),
            _child: child,
        }
    }

    /// How many pointers of each shape it received.
    pub fn counts(&self) -> serde_json::Value {
        self.get("/count")
    }

    /// The last pointer it received.
    pub fn last(&self) -> serde_json::Value {
        self.get("/last")["pointer"].clone()
    }

    fn get(&self, path: &str) -> serde_json::Value {
        use std::io::{Read, Write};
        let addr = self.url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).expect("connect to the producer");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).expect("the producer answers");
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        serde_json::from_str(body).expect("the producer answers JSON")
    }
}

/// The real tinyproxy (installed by .ci/run) on a loopback port, demanding Basic credentials
/// `user:pass`; returns once it accepts connections.
pub fn tinyproxy(dir: &Path) -> (u16, Reaped) {
    let port = closed_port();
    let mut conf = format!(
        "Port {port}\nListen 127.0.0.1\nTimeout 10\nMaxClients 4\nLogLevel Error\nBasicAuth user pass\n"
    );
    // tinyproxy refuses to keep root privileges.
    if Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
    {
        conf.push_str("User nobody\nGroup nogroup\n");
    }
    let conf_path = dir.join("tinyproxy.conf");
    std::fs::write(&conf_path, conf).expect("write tinyproxy.conf");
    let child = Command::new("tinyproxy")
        .arg("-d")
        .arg("-c")
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tinyproxy is installed (.ci/run installs it)");
    let guard = Reaped(child);
    let up = wait_until(Duration::from_secs(5), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up, "tinyproxy did not start listening");
    (port, guard)
}

/// The bare repositories under `root` served by the real `git http-backend`
/// (tests/support/git_https.py) on an ephemeral port of `bind`: over https with `tls` (a
/// certificate and its key), else plain http; with `login` (`user:password`) every request
/// must carry it, and pushes are taken. Returns once the server accepts; its log of requests
/// (never their headers) is `root`.log.
pub fn git_http_host(
    root: &Path,
    tls: Option<(PathBuf, PathBuf)>,
    login: Option<&str>,
    bind: &str,
) -> (u16, Reaped) {
    const SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/git_https.py");
    let (cert, key) = tls.unwrap_or_else(|| ("-".into(), "-".into()));
    let log = std::fs::File::create(root.with_extension("log")).expect("the host's log");
    let mut cmd = Command::new("python3");
    cmd.arg(SERVER)
        .arg(root)
        .arg(cert)
        .arg(key)
        .args(login)
        .env("GIT_HTTPS_BIND", bind)
        .stderr(log);
    Reaped::listening(cmd, "the git http host")
}
