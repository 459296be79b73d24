//! The git CLI in the test's environment, origins seeded by it, and `git daemon` on loopback.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{Reaped, TestEnv, closed_port, wait_until};

impl TestEnv {
    /// The git CLI in this environment (hermetic HOME and config); panics with git's stderr on
    /// failure, returns trimmed stdout.
    pub fn git(&self, dir: &Path, args: &[&str]) -> String {
        self.git_fed(dir, args, b"")
    }

    /// [`TestEnv::git`] with `input` on its standard input.
    pub fn git_fed(&self, dir: &Path, args: &[&str], input: &[u8]) -> String {
        use std::io::Write;
        let mut child = Command::new("git")
            .env_clear()
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .current_dir(dir)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the git CLI is installed");
        let mut stdin = child.stdin.take().expect("piped");
        // A command that reads nothing may exit before the input is written: not our failure.
        let _ = stdin.write_all(input);
        drop(stdin);
        let out = child.wait_with_output().expect("git ran");
        assert!(
            out.status.success(),
            "git {args:?} in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A bare repository `<name>.git` whose `main` holds `files` (path, content), committed by
    /// the CLI; returns (bare path, file:// URL).
    pub fn origin(&self, name: &str, files: &[(&str, &str)]) -> (PathBuf, String) {
        let seed = self.path(&format!("seed-{name}"));
        std::fs::create_dir_all(&seed).expect("seed dir");
        self.git(&seed, &["init", "-q", "-b", "main"]);
        for (p, c) in files {
            let f = seed.join(p);
            std::fs::create_dir_all(f.parent().expect("a file has a parent")).expect("dirs");
            std::fs::write(f, c).expect("write seed file");
        }
        self.git(&seed, &["add", "-A"]);
        self.git(&seed, &["commit", "-q", "-m", "initial"]);
        let bare = self.path(&format!("origins/{name}.git"));
        std::fs::create_dir_all(bare.parent().expect("parent")).expect("origins dir");
        self.git(
            self.root.path(),
            &[
                "clone",
                "-q",
                "--bare",
                &seed.display().to_string(),
                &bare.display().to_string(),
            ],
        );
        let url = format!("file://{}", bare.display());
        (bare, url)
    }
}

/// `git daemon` serving every repository under `base` on a loopback port; the URL prefix is
/// `git://127.0.0.1:<port>/`.
pub fn git_daemon(env: &TestEnv, base: &Path) -> (String, Reaped) {
    let port = closed_port();
    (
        format!("git://127.0.0.1:{port}/"),
        git_daemon_on(env, base, port),
    )
}

/// `git daemon` on `port`: a test that stops one brings it back at the same URL.
pub fn git_daemon_on(env: &TestEnv, base: &Path, port: u16) -> Reaped {
    // `git daemon` runs `git-daemon` as a child of its own, which a kill of `git` would leave
    // serving: run the daemon itself, so that stopping it stops the server.
    let exec_path = Command::new("git")
        .arg("--exec-path")
        .output()
        .expect("git --exec-path");
    let daemon = Path::new(String::from_utf8_lossy(&exec_path.stdout).trim()).join("git-daemon");
    let child = Command::new(daemon)
        .env_clear()
        .envs(env.vars.iter().map(|(k, v)| (k, v)))
        .args([
            "--reuseaddr",
            "--export-all",
            "--enable=receive-pack",
            "--listen=127.0.0.1",
            &format!("--port={port}"),
            &format!("--base-path={}", base.display()),
            &base.display().to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("git daemon");
    let guard = Reaped(child);
    assert!(
        wait_until(Duration::from_secs(10), || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok()),
        "git daemon did not start"
    );
    guard
}
