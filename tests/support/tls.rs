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
