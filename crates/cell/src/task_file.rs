//! `task.json`: what `task pull` hands the rest of the cell (SPEC.md §task pull). One type,
//! written by `task pull` and read by `task renew`/`release`, `finding close` and `cell run`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::CellError;
use super::policy::{Conflicts, Integrate, PushTo, Source, Sourced, TrustList};
use metabob_process::files::write_atomic;
use metabob_wire::finding::Severity;

/// A task file is a few kilobytes; anything past this was not written by `task pull`.
const MAX_TASK_FILE_BYTES: u64 = 1 << 20;

/// The task as pulled (anchor: TaskFile). Top-level fields are declared in name order, the
/// order the file had before it had a type, so a person diffing two files sees the same layout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskFile {
    /// The commit the work directory was cloned at.
    pub base: String,
    pub category: String,
    pub claim: TaskClaim,
    pub concept_id: String,
    pub details: String,
    pub files: Vec<String>,
    pub finding_ids: Vec<String>,
    pub origin: String,
    pub policy: TaskPolicy,
    pub pulled_at: String,
    pub recorder: Option<String>,
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    pub repository: String,
    pub session: String,
    pub severity: Severity,
    pub summary: String,
    pub task_id: String,
    pub trust: TrustList,
    pub vessel_id: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskClaim {
    pub holder: String,
    pub minutes: i64,
    pub until: String,
}

/// The integration policy as decided at pull time, with the two branches it comes to
/// (`crates/cell/src/policy.rs` `Policy::place`). Both stay plain strings: the cell loop and
/// `finding close` read them as branch names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskPolicy {
    pub conflicts: Sourced<Conflicts>,
    pub integrate: Sourced<Integrate>,
    pub push_branch: String,
    pub push_to: Sourced<PushTo>,
    /// Why the fix is pushed to `push_branch`, naming the policy values that decided it.
    pub push_why: String,
    pub refused: Vec<String>,
    /// The branch the fix must be merged into: the policy's `target:`, else the origin's
    /// default branch.
    pub target: String,
    /// Where `target` came from: the details, a convention, or the origin's HEAD.
    pub target_source: Source,
}

impl TaskFile {
    /// Reads a task file; the error says what to do about a missing or foreign file.
    pub fn read(path: &Path) -> Result<TaskFile, CellError> {
        let text =
            metabob_process::files::read_bounded(path, MAX_TASK_FILE_BYTES).map_err(|source| {
                CellError::TaskFileUnreadable {
                    path: path.to_path_buf(),
                    source,
                }
            })?;
        serde_json::from_str(&text).map_err(|source| CellError::TaskFileForeign {
            path: path.to_path_buf(),
            source,
        })
    }

    pub fn write(&self, path: &Path) -> Result<(), WriteError> {
        let text = serde_json::to_string_pretty(self).map_err(WriteError::Encode)?;
        // Private: it names the origin, the claim and the task's details.
        write_atomic(path, format!("{text}\n").as_bytes(), Some(0o600)).map_err(|source| {
            WriteError::Io {
                path: path.to_path_buf(),
                source,
            }
        })
    }
}

/// Why a file of the task directory was not written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("task.json")]
    Encode(#[source] serde_json::Error),
    #[error("writing {}", .path.display())]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TaskFile {
        let sourced = |value| Sourced {
            value,
            source: Source::Default,
        };
        TaskFile {
            base: "0123456789abcdef0123456789abcdef01234567".into(),
            category: "task".into(),
            claim: TaskClaim {
                holder: "cell-1".into(),
                minutes: 60,
                until: "2026-01-01T01:00:00.000Z".into(),
            },
            concept_id: "concept_1".into(),
            details: "ref: main".into(),
            files: vec!["a.py".into()],
            finding_ids: vec!["agf_1".into()],
            origin: "http://127.0.0.1:9/app.git".into(),
            policy: TaskPolicy {
                conflicts: sourced(Conflicts::Rebase),
                integrate: Sourced {
                    value: Integrate::Push,
                    source: Source::Details,
                },
                push_branch: "master".into(),
                push_to: Sourced {
                    value: PushTo::Main,
                    source: Source::Default,
                },
                push_why: "push_to: main (default) pushes the fix straight to the target, master"
                    .into(),
                refused: vec![],
                target: "master".into(),
                target_source: Source::OriginHead,
            },
            pulled_at: "2026-01-01T00:00:00.000Z".into(),
            recorder: None,
            reference: Some("main".into()),
            repository: "127.0.0.1/app".into(),
            session: "s-1".into(),
            severity: Severity::High,
            summary: "fix it".into(),
            task_id: "agf_1".into(),
            trust: TrustList {
                authors: vec![],
                defaulted: true,
            },
            vessel_id: "cell-1".into(),
        }
    }

    #[test]
    fn the_file_reads_back_and_a_foreign_file_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("task.json");
        sample().write(&path).expect("written");
        assert_eq!(TaskFile::read(&path).expect("read back"), sample());

        std::fs::write(&path, "{\"task_id\": \"agf_1\"}").expect("write");
        let err = TaskFile::read(&path).expect_err("a foreign file is refused");
        assert!(
            err.to_string().contains("was not written by task pull"),
            "{err}"
        );
        let missing = TaskFile::read(&dir.path().join("none.json")).expect_err("missing");
        let shown = metabob_wire::report::with_hint(&missing);
        assert!(shown.contains("run `task pull` first"), "{shown}");
    }

    #[test]
    fn the_policy_names_its_branches_as_strings_and_says_where_the_target_came_from() {
        let v = serde_json::to_value(sample()).expect("serialises");
        let p = &v["policy"];
        assert_eq!(p["target"], "master");
        assert_eq!(p["push_branch"], "master");
        assert!(
            p["push_why"]
                .as_str()
                .is_some_and(|w| w.contains("push_to: main"))
        );
        assert_eq!(
            p["target_source"],
            serde_json::json!({"from": "origin_head"})
        );
    }
}
