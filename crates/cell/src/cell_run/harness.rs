//! Running HARNESS: `sh -c` in the work directory, in a process group of its own so that the
//! whole group can be stopped (a lost claim, HARNESS_TIMEOUT, a signal to the cell). Its output
//! is passed through to the cell's stderr, and its last lines are kept, bounded and redacted,
//! for the reason a failed task is given back with.

use std::collections::VecDeque;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::watch;

/// The lines of the harness's output kept for a failure's reason, and their bytes in all.
const TAIL_LINES: usize = 12;
const TAIL_BYTES: usize = 1_200;
/// How long a stopped harness has between TERM and KILL.
const GRACE: Duration = Duration::from_secs(5);

/// How the harness ended.
#[derive(Debug)]
pub enum Stop {
    Exited(Option<i32>),
    TimedOut,
    /// The claim was lost; `why` is the reason the renewal gave.
    ClaimLost {
        why: String,
    },
    CouldNotStart(std::io::Error),
}

/// The running harness's process group, shared with whoever must stop it (0: none).
#[derive(Clone, Debug, Default)]
pub struct Group(Arc<AtomicI32>);

impl Group {
    /// Sends TERM to the group, then KILL after the grace if anything of it is left.
    pub async fn stop(&self) {
        let pgid = self.0.load(Ordering::SeqCst);
        let Some(pid) = rustix::process::Pid::from_raw(pgid) else {
            return;
        };
        if rustix::process::kill_process_group(pid, rustix::process::Signal::TERM).is_err() {
            return;
        }
        let deadline = tokio::time::Instant::now() + GRACE;
        while tokio::time::Instant::now() < deadline {
            if rustix::process::test_kill_process_group(pid).is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// The kept tail of the output.
#[derive(Clone, Default)]
struct Tail(Arc<Mutex<VecDeque<String>>>);

impl Tail {
    fn push(&self, line: &str) {
        if let Ok(mut t) = self.0.lock() {
            if t.len() == TAIL_LINES {
                t.pop_front();
            }
            t.push_back(metabob_wire::text::one_line(line, 300));
        }
    }

    /// The last lines, newest last, cut to the byte bound from the oldest end and redacted:
    /// a harness may print a URL with its password or a token, and this goes to the ledger.
    fn text(&self, secrets: &[String]) -> String {
        let lines: Vec<String> = self
            .0
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default();
        let mut kept: Vec<String> = Vec::new();
        let mut bytes = 0;
        for l in lines.iter().rev() {
            let l = redact(l, secrets);
            bytes += l.len() + 3;
            if bytes > TAIL_BYTES {
                break;
            }
            kept.push(l);
        }
        kept.reverse();
        kept.join(" | ")
    }
}

fn redact(line: &str, secrets: &[String]) -> String {
    let mut l = metabob_process::guard::redact_url_credentials(line);
    for s in secrets.iter().filter(|s| s.len() >= 8) {
        l = l.replace(s.as_str(), "[redacted]");
    }
    if let Some(kind) = metabob_process::guard::scan_patterns(&l) {
        return format!("[a line withheld: it holds what looks like a {kind}]");
    }
    l
}

fn forward(
    stream: impl AsyncRead + Unpin + Send + 'static,
    tail: Tail,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            metabob_process::errln!("{line}");
            tail.push(&line);
        }
    })
}

/// What a run needs besides the command.
pub struct Run<'a> {
    pub command: &'a str,
    pub dir: &'a Path,
    pub env: &'a [(String, String)],
    pub timeout: Duration,
    pub group: &'a Group,
    /// Set by the heartbeat when a renewal says the claim is another's.
    pub lost: watch::Receiver<Option<String>>,
    /// Values that must never reach a reason (the API key).
    pub secrets: &'a [String],
}

/// Runs the harness to its end; the second value is its output's tail.
pub async fn run(mut r: Run<'_>) -> (Stop, String) {
    let tail = Tail::default();
    let mut child = match tokio::process::Command::new("sh")
        .arg("-c")
        .arg(r.command)
        .current_dir(r.dir)
        .env_clear()
        .envs(r.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return (Stop::CouldNotStart(e), String::new()),
    };
    if let Some(pid) = child.id() {
        r.group.0.store(pid as i32, Ordering::SeqCst);
    }
    let mut readers = Vec::new();
    if let Some(out) = child.stdout.take() {
        readers.push(forward(out, tail.clone()));
    }
    if let Some(err) = child.stderr.take() {
        readers.push(forward(err, tail.clone()));
    }
    let lost = async {
        loop {
            if let Some(why) = r.lost.borrow_and_update().clone() {
                return why;
            }
            if r.lost.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    let stop = tokio::select! {
        status = child.wait() => Stop::Exited(status.ok().and_then(|s| s.code())),
        _ = tokio::time::sleep(r.timeout) => Stop::TimedOut,
        why = lost => Stop::ClaimLost { why },
    };
    // Also after a normal exit: what the harness left running in the background ends with
    // its task.
    r.group.stop().await;
    let _ = child.wait().await;
    r.group.0.store(0, Ordering::SeqCst);
    // What the harness printed last may still be in the pipes: with its group gone they close,
    // and the readers end at once; a descendant that escaped the group is not waited for.
    let drained = async {
        for reader in readers {
            let _ = reader.await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_millis(500), drained).await;
    (stop, tail.text(r.secrets))
}
