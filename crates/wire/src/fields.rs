//! Per-field kinds and size caps (SPEC.md §Field kinds and caps): how the substrate treats each
//! named field, and how many bytes one string of it may hold. These are row bounds, so they are
//! vocabulary: the outgoing guard (`metabob_process::guard`) holds a tool's arguments to them
//! before anything is sent, and every row reader (`row`) holds what it reads to the same caps.

/// How the substrate treats a field: prose is read by people and agents, so a home path in it
/// can be shortened to `~`; an acted-on field is used as given (a path, a ref, a goal), so
/// rewriting it would change the request and a home path there refuses instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    Prose,
    ActedOn,
}

/// One row of the field table: a field name, its kind, and its size cap in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldRule {
    pub name: &'static str,
    pub kind: FieldKind,
    pub cap: usize,
}

const KB: usize = 1024;

const fn rule(name: &'static str, kind: FieldKind, cap: usize) -> FieldRule {
    FieldRule { name, kind, cap }
}

/// The kind and cap of each known field, by name. A string's field is its nearest object key
/// (array elements inherit it); the cap applies to each string on its own.
// anchor: guarded_fields
pub const GUARDED_FIELDS: &[FieldRule] = &[
    // Prose: read, not executed.
    rule("title", FieldKind::Prose, 512),
    rule("summary", FieldKind::Prose, 2 * KB),
    rule("reason", FieldKind::Prose, 2 * KB),
    rule("label", FieldKind::Prose, 2 * KB),
    rule("note", FieldKind::Prose, 4 * KB),
    rule("notes", FieldKind::Prose, 4 * KB),
    rule("comment", FieldKind::Prose, 4 * KB),
    rule("feedback", FieldKind::Prose, 4 * KB),
    rule("message", FieldKind::Prose, 4 * KB),
    rule("rationale", FieldKind::Prose, 4 * KB),
    rule("evidence", FieldKind::Prose, 8 * KB),
    rule("explanation", FieldKind::Prose, 8 * KB),
    rule("description", FieldKind::Prose, 16 * KB),
    rule("details", FieldKind::Prose, 16 * KB),
    rule("content", FieldKind::Prose, 16 * KB),
    rule("body", FieldKind::Prose, 16 * KB),
    rule("text", FieldKind::Prose, 16 * KB),
    // Acted on: the substrate or a consumer uses the value as given.
    rule("goal", FieldKind::ActedOn, 4 * KB),
    rule("query", FieldKind::ActedOn, KB),
    rule("files", FieldKind::ActedOn, 4 * KB),
    rule("paths", FieldKind::ActedOn, 4 * KB),
    rule("path", FieldKind::ActedOn, 4 * KB),
    rule("file", FieldKind::ActedOn, 4 * KB),
    rule("repo", FieldKind::ActedOn, 512),
    rule("repository", FieldKind::ActedOn, 512),
    rule("ref", FieldKind::ActedOn, 200),
    rule("branch", FieldKind::ActedOn, 200),
    rule("commit", FieldKind::ActedOn, 200),
    rule("commits", FieldKind::ActedOn, 200),
    rule("id", FieldKind::ActedOn, 200),
    rule("finding_id", FieldKind::ActedOn, 200),
    rule("task_id", FieldKind::ActedOn, 200),
    rule("concept_id", FieldKind::ActedOn, 200),
    rule("from_concept_id", FieldKind::ActedOn, 200),
    rule("to_concept_id", FieldKind::ActedOn, 200),
    rule("execution_id", FieldKind::ActedOn, 200),
    rule("trace_id", FieldKind::ActedOn, 200),
    rule("activity_id", FieldKind::ActedOn, 200),
    rule("shape", FieldKind::ActedOn, 200),
    rule("type", FieldKind::ActedOn, 200),
    rule("tags", FieldKind::ActedOn, 200),
    rule("status", FieldKind::ActedOn, 64),
    rule("severity", FieldKind::ActedOn, 64),
    rule("verdict", FieldKind::ActedOn, 64),
    rule("kind", FieldKind::ActedOn, 64),
    rule("source_type", FieldKind::ActedOn, 64),
    rule("edge_type", FieldKind::ActedOn, 64),
    rule("edge_types", FieldKind::ActedOn, 64),
    rule("direction", FieldKind::ActedOn, 64),
    rule("outcome", FieldKind::ActedOn, 64),
    rule("mode", FieldKind::ActedOn, 64),
];

/// The rule for a field the table does not list: acted on, 4 KB, so a new field is guarded.
pub const DEFAULT_RULE: FieldRule = rule("", FieldKind::ActedOn, 4 * KB);

/// The kind and cap for a field name.
pub fn field_rule(name: &str) -> FieldRule {
    GUARDED_FIELDS
        .iter()
        .find(|r| r.name == name)
        .copied()
        .unwrap_or(DEFAULT_RULE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_table_defaults_to_acted_on() {
        assert_eq!(field_rule("summary").kind, FieldKind::Prose);
        assert_eq!(field_rule("summary").cap, 2048);
        assert_eq!(field_rule("goal").kind, FieldKind::ActedOn);
        assert_eq!(field_rule("no_such_field"), DEFAULT_RULE);
        let mut names: Vec<_> = GUARDED_FIELDS.iter().map(|r| r.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), GUARDED_FIELDS.len(), "a field is listed once");
    }
}
