//! TLS fixtures: a CA the client does not know, and leaves it signed.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{Reaped, closed_port};

pub const CA_CN: &str = "Metabob Test Inspection CA";

pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().expect("temp dir");
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut args = vec!["req", "-x509"];
        args.extend(ec);
        let subj = format!("/O=Metabob Tests/CN={CA_CN}");
        args.extend([
            "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", &subj,
        ]);
        openssl(dir.path(), &args);
        let pki = Pki { dir };
        pki.leaf("good", "DNS:ledger.example,IP:127.0.0.1");
        pki.leaf("other", "DNS:other.example");
        pki
    }

    pub fn leaf(&self, name: &str, san: &str) {
        let d = self.dir.path();
        let ext = format!(
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName={san}\n"
        );
        std::fs::write(d.join(format!("{name}.ext")), ext).expect("write extensions");
        let (key, csr, pem, extf) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        let subj = format!("/CN={name}");
        openssl(
            d,
            &[
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &subj,
            ],
        );
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                &extf,
            ],
        );
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    pub fn ca(&self) -> String {
        self.path("ca.pem").display().to_string()
    }
}

/// `openssl s_server -www` on a loopback port with the named leaf; returns once it accepts.
pub fn s_server(pki: &Pki, leaf: &str) -> (u16, Reaped) {
    let port = closed_port();
    let accept = format!("127.0.0.1:{port}");
    let cert = pki.path(&format!("{leaf}.pem"));
    let key = pki.path(&format!("{leaf}.key"));
    let mut child = Command::new("openssl")
        .args(["s_server", "-accept", &accept, "-www", "-cert"])
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_server starts");
    let stdout = child.stdout.take().expect("stdout is piped");
    let guard = Reaped(child);
    let mut lines = BufReader::new(stdout).lines();
    let ready = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("ACCEPT"));
    assert!(ready, "s_server never reported ACCEPT");
    // Keep draining so s_server never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (port, guard)
}

/// tests/support/tls_proxy.py: a TLS-terminating reverse proxy with the named leaf in front of
/// the plain HTTP server at `upstream` (host:port); returns its port once it accepts.
pub fn tls_proxy(pki: &Pki, leaf: &str, upstream: &str) -> (u16, Reaped) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/tls_proxy.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script)
        .arg(pki.path(&format!("{leaf}.pem")))
        .arg(pki.path(&format!("{leaf}.key")))
        .arg(upstream)
        .stderr(Stdio::null());
    Reaped::listening(cmd, "the TLS proxy")
}

/// A plain TCP relay on loopback, recording every byte clients send through it: the plain path
/// a key must never cross. It forwards to the address `forward_to` names (none at first: a
/// server's address may only be known once it advertises the relay).
pub struct Relay {
    pub port: u16,
    sent: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    upstream: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Relay {
    pub fn forward_to(&self, addr: &str) {
        *self.upstream.lock().unwrap() = addr.to_string();
    }

    pub fn start() -> Relay {
        use std::io::{Read, Write};
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let port = listener.local_addr().expect("addr").port();
        let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let upstream = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (log, to) = (sent.clone(), upstream.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(mut client) = client else { continue };
                let addr = to.lock().unwrap().clone();
                let Ok(mut server) = TcpStream::connect(&addr) else {
                    continue;
                };
                let (mut client_r, mut server_w) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 8192];
                    while let Ok(n @ 1..) = client_r.read(&mut buf) {
                        log.lock().unwrap().extend_from_slice(&buf[..n]);
                        if server_w.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = server_w.shutdown(std::net::Shutdown::Write);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut server, &mut client);
                    let _ = client.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        Relay {
            port,
            sent,
            upstream,
        }
    }

    /// Everything clients sent through the relay so far.
    pub fn sent(&self) -> String {
        String::from_utf8_lossy(&self.sent.lock().unwrap()).into_owned()
    }
}

/// One keep-alive HTTPS connection, verified against `ca_pem` only, for the server side's
/// tests: several requests over the same TLS session.
pub struct TlsConn {
    stream: rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>,
}

impl TlsConn {
    pub fn open(ca_pem: &Path, port: u16) -> std::io::Result<TlsConn> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca_pem).expect("CA file") {
            roots.add(cert.expect("a CA certificate")).expect("add CA");
        }
        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("an IP name");
        let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name)
            .map_err(std::io::Error::other)?;
        let tcp = std::net::TcpStream::connect(("127.0.0.1", port))?;
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(20)))?;
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        // Drive the handshake now, so a refused certificate fails here.
        while stream.conn.is_handshaking() {
            stream
                .conn
                .complete_io(&mut stream.sock)
                .map_err(std::io::Error::other)?;
        }
        Ok(TlsConn { stream })
    }

    /// `GET path` on this connection, keeping it open: the status and the body.
    pub fn get(&mut self, path: &str) -> std::io::Result<(u16, String)> {
        use std::io::{Read, Write};
        write!(
            self.stream,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"
        )?;
        self.stream.flush()?;
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            self.stream.read_exact(&mut byte)?;
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let length: usize = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        self.stream.read_exact(&mut body)?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}
