//! The integration policy and trust list (SPEC.md §Integration policy and trust list): where a fix
//! goes, decided in one place for `task pull`, `finding close` and the entrypoint.

use serde::{Deserialize, Serialize};

use metabob_process::env::Env;
use metabob_wire::header::{Header, find_line};

pub const CONVENTION_SHAPE: &str = "project_convention";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PushTo {
    /// The target itself (the mainline: the origin's default branch unless `target:` names
    /// another); the value keeps its historical name.
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
    Convention {
        concept_id: String,
        author: String,
    },
    Default,
    /// The branch the origin's HEAD names, as the clone recorded it.
    OriginHead,
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
            Source::OriginHead => f.write_str("the origin's default branch"),
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
    /// The branch named by a `target:` line; none: the origin's default branch.
    pub target: Option<Sourced<String>>,
    /// Refused values, as logged: never applied.
    pub refused: Vec<String>,
}

/// Where a task's fix goes, decided against the clone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The branch the fix must be merged into before the task closes.
    pub target: Sourced<String>,
    /// The branch the cell pushes to: the target itself, or `task/<task id>`.
    pub push_branch: String,
    /// Why the fix is pushed there, in words for task.json and context.md.
    pub why: String,
}

/// Why a task's fix has nowhere to go. Both are the task's own cause, so the task is parked:
/// a push never creates the branch a fix must reach.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unplaced {
    #[error("the origin has no branch {target:?} (the target, {from}); a push never creates it")]
    NoSuchBranch {
        target: String,
        /// Where the name came from; `source` would read as the error's cause to thiserror.
        from: Source,
    },
    #[error(
        "the origin names no default branch (it recorded no HEAD) and the policy names no target"
    )]
    NoOriginHead,
}

impl metabob_wire::report::Hint for Unplaced {
    fn hint(&self) -> Option<String> {
        Some(match self {
            Unplaced::NoSuchBranch { .. } => {
                "create it on the origin or name another with a `target: <branch>` line".into()
            }
            Unplaced::NoOriginHead => "name one with a `target: <branch>` line".into(),
        })
    }
}

impl Policy {
    /// Places a task's fix on the origin as the clone saw it: `origin_head` is
    /// the branch the origin's HEAD names, `origin_has` says whether the origin has a branch.
    /// The target is what the policy names, else the origin's default branch, never a name of
    /// our own, and it must exist. `integrate: review` always sends the fix to a task branch,
    /// whatever `push_to` says, and so does `push_to: task`: the fix then reaches the target
    /// only through a merge.
    pub fn place(
        &self,
        task_id: &str,
        origin_head: Option<&str>,
        origin_has: impl Fn(&str) -> bool,
    ) -> Result<Placement, Unplaced> {
        let target = match (&self.target, origin_head) {
            (Some(named), _) => named.clone(),
            (None, Some(head)) => Sourced {
                value: head.to_owned(),
                source: Source::OriginHead,
            },
            (None, None) => return Err(Unplaced::NoOriginHead),
        };
        if !origin_has(&target.value) {
            return Err(Unplaced::NoSuchBranch {
                target: target.value,
                from: target.source,
            });
        }
        let task_branch = format!("task/{task_id}");
        let t = &target.value;
        let (integrate, push_to) = (&self.integrate, &self.push_to);
        let (push_branch, why) = match (integrate.value, push_to.value) {
            (Integrate::Review, PushTo::Main) => {
                let why = format!(
                    "integrate: review ({}) sends the fix to {task_branch} for review, whatever \
                     push_to says; it reaches {t} only through a merge",
                    integrate.source
                );
                (task_branch, why)
            }
            (Integrate::Review, PushTo::Task) => {
                let why = format!(
                    "integrate: review ({}) and push_to: task ({}) send the fix to \
                     {task_branch} for review; it reaches {t} only through a merge",
                    integrate.source, push_to.source
                );
                (task_branch, why)
            }
            (Integrate::Push, PushTo::Task) => {
                let why = format!(
                    "push_to: task ({}) sends the fix to {task_branch}; it reaches {t} only \
                     through a merge",
                    push_to.source
                );
                (task_branch, why)
            }
            (Integrate::Push, PushTo::Main) => {
                let why = format!(
                    "push_to: main ({}) pushes the fix straight to the target, {t}",
                    push_to.source
                );
                (t.clone(), why)
            }
        };
        Ok(Placement {
            target,
            push_branch,
            why,
        })
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
    let target = pick_target(details, &trusted, &mut refused);
    for r in &refused {
        tracing::warn!("integration policy: {r}");
    }
    Policy {
        push_to,
        integrate,
        conflicts,
        target,
        refused,
    }
}

/// A `target:` line names a branch; it must be a name git accepts for one, and is kept as
/// written (branch names are case-sensitive).
fn pick_target(
    details: &str,
    trusted: &[&Convention],
    refused: &mut Vec<String>,
) -> Option<Sourced<String>> {
    use metabob_wire::refname::validate_ref;
    if let Some(raw) = find_line(details, "target") {
        match validate_ref(raw) {
            Ok(()) => {
                return Some(Sourced {
                    value: raw.to_owned(),
                    source: Source::Details,
                });
            }
            Err(why) => refused.push(format!(
                "target: {raw:?} in the task's details: {}",
                metabob_wire::report::with_hint(&why)
            )),
        }
    }
    for c in trusted {
        if let Some(raw) = find_line(&c.content, "target") {
            match validate_ref(raw) {
                Ok(()) => {
                    let author = c.author().unwrap_or_default();
                    let concept_id = c.concept_id.clone();
                    return Some(Sourced {
                        value: raw.to_owned(),
                        source: Source::Convention { concept_id, author },
                    });
                }
                Err(why) => refused.push(format!(
                    "target: {raw:?} in convention {}: {}",
                    c.concept_id,
                    metabob_wire::report::with_hint(&why)
                )),
            }
        }
    }
    None
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
        let placed = p.place("agf_1", Some("trunk"), |_| true).expect("placed");
        assert_eq!(placed.push_branch, "task/agf_1");
        assert_eq!(placed.target.value, "trunk");
        assert_eq!(placed.target.source, Source::OriginHead);
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
        let placed = p.place("agf_1", Some("master"), |_| true).expect("placed");
        assert_eq!(placed.push_branch, "master");
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

    /// An origin holding `branches`, its HEAD naming the first.
    fn origin<'a>(branches: &'a [&'a str]) -> (Option<&'a str>, impl Fn(&str) -> bool + 'a) {
        (branches.first().copied(), move |b: &str| {
            branches.contains(&b)
        })
    }

    fn trusting_alice() -> TrustList {
        TrustList {
            authors: vec!["alice".into()],
            defaulted: false,
        }
    }

    #[test]
    fn the_target_is_the_origins_default_branch_unless_the_policy_names_one() {
        let trust = trusting_alice();
        let (head, has) = origin(&["master", "release/2.x"]);

        let placed = decide("", &[], &trust)
            .place("agf_1", head, &has)
            .expect("placed");
        assert_eq!(placed.target.value, "master", "never a hard-coded main");
        assert_eq!(placed.target.source, Source::OriginHead);
        assert_eq!(placed.push_branch, "master");
        assert_eq!(
            placed.why,
            "push_to: main (default) pushes the fix straight to the target, master"
        );

        let named = decide("Fix it.\ntarget: release/2.x", &[], &trust);
        let placed = named.place("agf_1", head, &has).expect("placed");
        assert_eq!(placed.target.value, "release/2.x");
        assert_eq!(placed.target.source, Source::Details);
        assert_eq!(placed.push_branch, "release/2.x");

        let convs = [conv("c1", 1, "recorded_by: alice\n\ntarget: release/2.x")];
        let placed = decide("", &convs, &trust)
            .place("agf_1", head, &has)
            .expect("placed");
        assert_eq!(
            placed.target.source,
            Source::Convention {
                concept_id: "c1".into(),
                author: "alice".into()
            }
        );
        // The details win over a convention; an untrusted author's target is never read.
        let placed = decide("target: master", &convs, &trust)
            .place("agf_1", head, &has)
            .expect("placed");
        assert_eq!(placed.target.value, "master");
        let mallory = [conv("c2", 2, "recorded_by: mallory\n\ntarget: release/2.x")];
        let p = decide("", &mallory, &trust);
        assert_eq!(p.target, None);
        assert_eq!(
            p.place("agf_1", head, &has).expect("placed").target.value,
            "master"
        );
    }

    #[test]
    fn review_and_push_to_task_send_the_fix_to_a_task_branch_that_reaches_the_target_by_merge() {
        let trust = trusting_alice();
        let (head, has) = origin(&["master"]);
        let cases = [
            ("integrate: review", "whatever push_to says"),
            ("integrate: review\npush_to: main", "whatever push_to says"),
            (
                "integrate: review\npush_to: task",
                "and push_to: task (from the task's details)",
            ),
            (
                "push_to: task",
                "push_to: task (from the task's details) sends",
            ),
        ];
        for (details, said) in cases {
            let placed = decide(details, &[], &trust)
                .place("agf_1", head, &has)
                .expect("placed");
            assert_eq!(placed.push_branch, "task/agf_1", "{details}");
            assert_eq!(placed.target.value, "master", "{details}");
            assert!(placed.why.contains(said), "{details}: {}", placed.why);
            assert!(placed.why.contains("task/agf_1"), "{}", placed.why);
            assert!(
                placed
                    .why
                    .ends_with("it reaches master only through a merge"),
                "{}",
                placed.why
            );
        }
        let placed = decide("integrate: review", &[], &trust)
            .place("agf_1", head, &has)
            .expect("placed");
        assert_eq!(
            placed.why,
            "integrate: review (from the task's details) sends the fix to task/agf_1 for \
             review, whatever push_to says; it reaches master only through a merge"
        );
    }

    #[test]
    fn a_target_the_origin_lacks_or_no_target_at_all_leaves_the_fix_nowhere_to_go() {
        let trust = trusting_alice();
        let (head, has) = origin(&["master"]);
        let missing = decide("target: release", &[], &trust).place("agf_1", head, &has);
        assert_eq!(
            missing,
            Err(Unplaced::NoSuchBranch {
                target: "release".into(),
                from: Source::Details
            })
        );
        let shown = missing.expect_err("unplaced").to_string();
        assert!(
            shown.contains("\"release\"") && shown.contains("never creates it"),
            "{shown}"
        );
        // Even under review: the task branch is pushed, but the target must already exist.
        let review = decide("target: release\nintegrate: review", &[], &trust);
        assert!(review.place("agf_1", head, &has).is_err());
        // An origin with no HEAD recorded: only a named target places the fix.
        let (none, has) = origin(&[]);
        let p = decide("", &[], &trust);
        assert_eq!(p.place("agf_1", none, &has), Err(Unplaced::NoOriginHead));
        let p = decide("target: master", &[], &trust);
        assert!(p.place("agf_1", None, |b| b == "master").is_ok());
        // A HEAD naming a branch the clone does not have is no target either.
        assert_eq!(
            decide("", &[], &trust).place("agf_1", Some("gone"), |_| false),
            Err(Unplaced::NoSuchBranch {
                target: "gone".into(),
                from: Source::OriginHead
            })
        );
    }

    #[test]
    fn a_target_that_is_no_branch_name_is_refused_and_listed_whatever_its_source() {
        let trust = trusting_alice();
        let p = decide("target: ../x", &[], &trust);
        assert_eq!(p.target, None);
        assert_eq!(p.refused.len(), 1, "{:?}", p.refused);
        assert!(
            p.refused[0].starts_with("target: \"../x\" in the task's details: ref refused"),
            "{:?}",
            p.refused
        );
        for bad in ["HEAD", "-f", "a b", "x@{1}", "main.lock", "refs/heads/"] {
            let convs = [conv(
                "c1",
                1,
                &format!("recorded_by: alice\n\ntarget: {bad}"),
            )];
            let p = decide("", &convs, &trust);
            assert_eq!(p.target, None, "{bad}");
            assert!(p.refused[0].contains("in convention c1"), "{:?}", p.refused);
        }
        // A refused value in the details falls back to a trusted convention, as other keys do.
        let convs = [conv("c1", 1, "recorded_by: alice\n\ntarget: trunk")];
        let p = decide("target: ../x", &convs, &trust);
        assert_eq!(p.target.map(|t| t.value).as_deref(), Some("trunk"));
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
