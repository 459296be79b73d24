//! The cell's log on stderr: one line per step. Human lines keep the `cell-entrypoint:` prefix
//! operators and tests already follow; `--log-format json` prints the same steps as JSON lines
//! (time, cell, task, step, outcome, duration, reason) for a log stack.

use std::time::Instant;

use serde::Serialize;

use super::config::LogFormat;
use metabob_process::clock::now_ms;
use metabob_wire::text::rfc3339_ms;

pub const PREFIX: &str = "cell-entrypoint";

#[derive(Clone, Debug)]
pub struct Log {
    format: LogFormat,
    cell: String,
}

/// One step's line: `message` is what a person reads; the rest is for machines.
pub struct Line<'a> {
    pub step: &'a str,
    pub task: Option<&'a str>,
    pub outcome: &'a str,
    pub since: Option<Instant>,
    pub reason: Option<&'a str>,
    pub message: String,
}

#[derive(Serialize)]
struct JsonLine<'a> {
    time: String,
    cell: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    task: Option<&'a str>,
    step: &'a str,
    outcome: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_ms: Option<u128>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    message: &'a str,
}

impl Log {
    pub fn new(format: LogFormat, cell: &str) -> Log {
        Log {
            format,
            cell: cell.to_owned(),
        }
    }

    pub fn line(&self, l: Line<'_>) {
        match self.format {
            LogFormat::Human => metabob_process::errln!("{PREFIX}: {}", l.message),
            LogFormat::Json => {
                let j = JsonLine {
                    time: rfc3339_ms(now_ms()),
                    cell: &self.cell,
                    task: l.task,
                    step: l.step,
                    outcome: l.outcome,
                    duration_ms: l.since.map(|s| s.elapsed().as_millis()),
                    reason: l.reason,
                    message: &l.message,
                };
                if let Ok(text) = serde_json::to_string(&j) {
                    metabob_process::errln!("{text}");
                }
            }
        }
    }

    /// A line with no task, outcome `note`.
    pub fn note(&self, step: &str, message: String) {
        self.line(Line {
            step,
            task: None,
            outcome: "note",
            since: None,
            reason: None,
            message,
        });
    }
}
