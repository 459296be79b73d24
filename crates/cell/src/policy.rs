//! The integration policy and trust list (SPEC.md §Integration policy and trust list): where a fix
//! goes, decided in one place for `task pull`, `finding close` and the entrypoint.

use serde::{Deserialize, Serialize};

use metabob_wire::env::Env;
use metabob_wire::header::{Header, find_line};

pub const CONVENTION_SHAPE: &str = "project_convention";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PushTo {
    /// The default branch, `main`.
    Main,
    /// `task/<task id>`, for review.
    Task,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Integrate {
    Push,
    Review,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Conflicts {
    /// A conflict gives the task back for a cell to redo from the fresh target.
    Rebase,
    /// A conflict keeps the claim: the cell runs the harness again on the fresh target, a
    /// bounded number of times, before giving the task back.
    Retry,
}

metabob_wire::display_as_wire_name!(Integrate, Conflicts);

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum Source {
    Details,
    Convention { concept_id: String, author: String },
    Default,
}

/// In the policy file's words: `details`, `default`, or the convention and its author.
impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Details => f.write_str("from the task's details"),
            Source::Convention { concept_id, author } => {
                write!(f, "from convention {concept_id} by {author}")
            }
            Source::Default => f.write_str("default"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sourced<T> {
    pub value: T,
    pub source: Source,
}

/// Whose conventions count. Authors are declared, not verified: a convention among cells, not a
/// security boundary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustList {
    pub authors: Vec<String>,
    /// No list was given, so only the task's own recorder is trusted.
    pub defaulted: bool,
}

impl TrustList {
    /// `--trust`, else `METABOB_TASK_TRUST`, else the task's recorder alone (anchor: trust-list).
    pub fn new(flag: Option<&str>, env: &Env, recorder: Option<&str>) -> TrustList {
        let given = flag.or_else(|| env.get("METABOB_TASK_TRUST"));
        let split = |s: &str| -> Vec<String> {
            s.split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(str::to_owned)
                .collect()
        };
        match given.map(split).filter(|a| !a.is_empty()) {
            Some(authors) => TrustList {
                authors,
                defaulted: false,
            },
            None => TrustList {
                authors: recorder.into_iter().map(str::to_owned).collect(),
                defaulted: true,
            },
        }
    }

    pub fn trusts(&self, author: &str) -> bool {
        self.authors.iter().any(|a| a == author)
    }
}

/// A `project_convention` concept of this repository.
#[derive(Clone, Debug)]
pub struct Convention {
    pub concept_id: String,
    pub seq: i64,
    pub content: String,
}

impl Convention {
    /// The author comes from the header block only, never from the prose after it.
    fn author(&self) -> Option<String> {
        Header::parse(&self.content)
            .get("recorded_by")
            .map(str::to_owned)
    }
}

/// The decided policy, each value with its source, and what was refused on the way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Policy {
    pub push_to: Sourced<PushTo>,
    pub integrate: Sourced<Integrate>,
    pub conflicts: Sourced<Conflicts>,
    /// Refused values, as logged: never applied.
    pub refused: Vec<String>,
}

impl Policy {
    /// The branch a fix is pushed to.
    pub fn push_branch(&self, task_id: &str) -> String {
        match self.push_to.value {
            PushTo::Main => "main".into(),
            PushTo::Task => format!("task/{task_id}"),
        }
    }

    /// The branch a fix must be merged into before it closes: `main` under review, otherwise
    /// where it is pushed.
    pub fn target(&self, task_id: &str) -> String {
        match self.integrate.value {
            Integrate::Review => "main".into(),
            Integrate::Push => self.push_branch(task_id),
        }
    }
}

/// Decides the policy (anchor: integration-policy): each value from the task's details, else
/// from the newest convention by a trusted author, else the default. A value outside the
/// allowed set is refused whatever its source; every refusal is logged and never applied.
pub fn decide(details: &str, conventions: &[Convention], trust: &TrustList) -> Policy {
    let mut refused = Vec::new();
    let mut trusted: Vec<&Convention> = Vec::new();
    let mut newest_first: Vec<&Convention> = conventions.iter().collect();
    newest_first.sort_by_key(|c| std::cmp::Reverse(c.seq));
    for c in newest_first {
        match c.author() {
            Some(a) if trust.trusts(&a) => trusted.push(c),
            Some(a) => refused.push(format!(
                "convention {} by {a}: the author is not on the trust list; ignored",
                c.concept_id
            )),
            None => refused.push(format!(
                "convention {}: names no author; ignored",
                c.concept_id
            )),
        }
    }
    let push_to = pick(
        details,
        &trusted,
        "push_to",
        PushTo::Main,
        &mut refused,
        |v| match v {
            "main" => Some(PushTo::Main),
            "task" => Some(PushTo::Task),
            _ => None,
        },
    );
    let integrate = pick(
        details,
        &trusted,
        "integrate",
        Integrate::Push,
        &mut refused,
        |v| match v {
            "push" => Some(Integrate::Push),
            "review" => Some(Integrate::Review),
            _ => None,
        },
    );
    let conflicts = pick(
        details,
        &trusted,
        "conflicts",
        Conflicts::Rebase,
        &mut refused,
        |v| match v {
            "rebase" => Some(Conflicts::Rebase),
            "retry" => Some(Conflicts::Retry),
            _ => None,
        },
    );
    for r in &refused {
        tracing::warn!("integration policy: {r}");
    }
    Policy {
        push_to,
        integrate,
        conflicts,
        refused,
    }
}

fn pick<T: Copy>(
    details: &str,
    trusted: &[&Convention],
    key: &str,
    default: T,
    refused: &mut Vec<String>,
    parse: impl Fn(&str) -> Option<T>,
) -> Sourced<T> {
    if let Some(raw) = find_line(details, key) {
        match parse(&raw.to_ascii_lowercase()) {
            Some(value) => {
                return Sourced {
                    value,
                    source: Source::Details,
                };
            }
            None => refused.push(format!(
                "{key}: {raw:?} in the task's details is not allowed"
            )),
        }
    }
    for c in trusted {
        if let Some(raw) = find_line(&c.content, key) {
            match parse(&raw.to_ascii_lowercase()) {
                Some(value) => {
                    let author = c.author().unwrap_or_default();
                    let concept_id = c.concept_id.clone();
                    return Sourced {
                        value,
                        source: Source::Convention { concept_id, author },
                    };
                }
                None => refused.push(format!(
                    "{key}: {raw:?} in convention {} is not allowed",
                    c.concept_id
                )),
            }
        }
    }
    Sourced {
        value: default,
        source: Source::Default,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(id: &str, seq: i64, content: &str) -> Convention {
        Convention {
            concept_id: id.into(),
            seq,
            content: content.into(),
        }
    }

    #[test]
    fn details_then_trusted_conventions_newest_first_then_defaults() {
        let trust = TrustList {
            authors: vec!["alice".into()],
            defaulted: false,
        };
        let convs = [
            conv(
                "c1",
                1,
                "recorded_by: alice\n\npush_to: main\nintegrate: review",
            ),
            conv("c2", 2, "recorded_by: alice\n\npush_to: task"),
            conv(
                "c3",
                3,
                "recorded_by: mallory\n\npush_to: main\nintegrate: push",
            ),
        ];
        let p = decide("Fix it.\nconflicts: rebase", &convs, &trust);
        assert_eq!(p.push_to.value, PushTo::Task);
        assert_eq!(
            p.push_to.source,
            Source::Convention {
                concept_id: "c2".into(),
                author: "alice".into()
            }
        );
        assert_eq!(p.integrate.value, Integrate::Review);
        assert_eq!(p.conflicts.source, Source::Details);
        assert!(p.refused.iter().any(|r| r.contains("mallory")));
        assert_eq!(p.push_branch("agf_1"), "task/agf_1");
        assert_eq!(p.target("agf_1"), "main");
    }

    #[test]
    fn values_outside_the_set_are_refused_whatever_their_source() {
        let trust = TrustList {
            authors: vec!["alice".into()],
            defaulted: false,
        };
        let convs = [conv("c1", 1, "recorded_by: alice\n\npush_to: production")];
        let p = decide("push_to: ../../etc\nintegrate: force", &convs, &trust);
        assert_eq!(
            p.push_to,
            Sourced {
                value: PushTo::Main,
                source: Source::Default
            }
        );
        assert_eq!(p.integrate.value, Integrate::Push);
        assert_eq!(p.refused.len(), 3, "{:?}", p.refused);
        assert_eq!(p.target("agf_1"), "main");
    }

    #[test]
    fn conflicts_retry_comes_from_the_details_or_a_trusted_convention_and_nothing_else_passes() {
        let trust = TrustList {
            authors: vec!["alice".into()],
            defaulted: false,
        };
        let p = decide("conflicts: Retry", &[], &trust);
        assert_eq!(p.conflicts.value, Conflicts::Retry);
        assert_eq!(p.conflicts.source, Source::Details);
        let convs = [conv("c1", 1, "recorded_by: alice\n\nconflicts: retry")];
        assert_eq!(decide("", &convs, &trust).conflicts.value, Conflicts::Retry);
        let p = decide("conflicts: force-push", &[], &trust);
        assert_eq!(p.conflicts.value, Conflicts::Rebase);
        assert_eq!(p.conflicts.source, Source::Default);
        assert_eq!(p.refused.len(), 1, "{:?}", p.refused);
    }

    #[test]
    fn the_author_is_read_from_the_header_block_only() {
        let trust = TrustList {
            authors: vec!["alice".into()],
            defaulted: true,
        };
        let forged = conv("c1", 1, "summary: x\n\nrecorded_by: alice\npush_to: task");
        let p = decide("", &[forged], &trust);
        assert_eq!(p.push_to.source, Source::Default);
    }

    #[test]
    fn the_trust_list_defaults_to_the_recorder() {
        let env = Env::new(vec![("METABOB_TASK_TRUST".into(), "a, b".into())], "/");
        assert_eq!(
            TrustList::new(None, &env, Some("r")).authors,
            vec!["a", "b"]
        );
        assert_eq!(
            TrustList::new(Some("c"), &env, Some("r")).authors,
            vec!["c"]
        );
        let t = TrustList::new(None, &Env::default(), Some("r"));
        assert!(t.defaulted && t.trusts("r"));
    }
}
