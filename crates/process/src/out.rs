//! The process's own output (SPEC.md §Output): every line a command prints on stdout or stderr,
//! and every log line, is written here, so that two rules hold everywhere.
//!
//! - **No credential is printed.** Each text passes the one redaction owner
//!   (`crate::guard::redact_url_credentials`) on its way out, whatever produced it: a report,
//!   an error line, a warning, a tool's answer.
//! - **A closed stdout ends the output quietly.** A reader that leaves early (`| head -1`) is
//!   not a failure of the command: further output is dropped and the command finishes as it
//!   would have, with its own exit code, as git and ripgrep do. Any other write failure (a full
//!   disk behind a redirect) is remembered and reported once the command is done.
//!
//! `print!`/`println!` would panic on a closed pipe instead, so the crate does not use them.

use std::io::{self, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::guard::redact_url_credentials;

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDOUT_ERROR: Mutex<Option<String>> = Mutex::new(None);

/// Writes `text` to stdout as is (no newline added), redacted.
pub fn stdout(text: &str) {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let shown = redact_url_credentials(text);
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_all(shown.as_bytes()).and_then(|()| out.flush()) {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
        if e.kind() != io::ErrorKind::BrokenPipe
            && let Ok(mut slot) = STDOUT_ERROR.lock()
        {
            slot.get_or_insert_with(|| e.to_string());
        }
    }
}

/// Writes `text` to stderr as is, redacted. A closed stderr leaves nowhere to say anything.
pub fn stderr(text: &str) {
    let shown = redact_url_credentials(text);
    let _ = io::stderr().lock().write_all(shown.as_bytes());
}

/// The write to stdout that failed for a reason other than a reader that left, if any: the
/// command's output is incomplete, which its caller must hear about.
pub fn stdout_failure() -> Option<String> {
    STDOUT_ERROR.lock().ok().and_then(|slot| slot.clone())
}

/// Prints a line on stdout through [`stdout`].
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => { $crate::out::stdout(&format!("{}\n", format_args!($($arg)*))) };
}

/// Prints on stdout through [`stdout`], with no newline added.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::stdout(&format!($($arg)*)) };
}

/// Prints a line on stderr through [`stderr`].
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => { $crate::out::stderr(&format!("{}\n", format_args!($($arg)*))) };
}

/// Prints on stderr through [`stderr`], with no newline added.
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => { $crate::out::stderr(&format!($($arg)*)) };
}

/// The log's writer: each formatted event is redacted on its way to stderr.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        stderr(&String::from_utf8_lossy(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        *self
    }
}
