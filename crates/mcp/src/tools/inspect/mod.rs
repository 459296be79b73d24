//! The inspection tools (SPEC.md §Inspection tools): what discovery advertises and who serves it,
//! the execution traces activity-api keeps, and the escape hatch that resolves one allowlisted
//! shape. Every answer they read comes from a producer this process does not control, so each
//! field is validated and bounded before it is printed, and a malformed row is skipped and
//! counted rather than trusted.

mod allowlist;
mod escape;
mod registry;
pub(crate) mod trace;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

pub use allowlist::{Decision, Refusal, decide};
pub use escape::resolve_impulse;
pub use registry::registry_query;
pub use trace::execution_trace;

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RegistryMode {
    Shapes,
    Vessels,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct RegistryArgs {
    /// shapes: the vocabulary discovery advertises; vessels: who serves `shape`.
    pub mode: RegistryMode,
    /// Required with mode vessels. With mode shapes, keeps only shapes containing it (case
    /// does not matter).
    pub shape: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct TraceArgs {
    /// One trace's execution id (exec_…, or the stored record id). Omitted: list recent traces.
    pub execution_id: Option<String>,
    /// Without execution_id: how many recent traces to list (default 10).
    #[schemars(range(min = 1, max = 50))]
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ImpulseArgs {
    /// The shape to resolve (the pointer's type). Only allowlisted plain reads and
    /// memoryNote_write are sent; anything else is refused before any request.
    pub shape: String,
    /// More pointer fields, merged after the type, so a `type` here overrides `shape`.
    pub pointer: Option<Map<String, Value>>,
}

/// Longest string a producer's field may print as; longer ones are cut with `…`.
pub(crate) const FIELD_CHARS: usize = 200;

/// A producer's field on one line, cut (the one owner is `text::one_line`).
pub(crate) use metabob_wire::text::one_line as clean;

/// `n` malformed things skipped, as a reply says it.
fn skipped(n: usize, one: &str, many: &str) -> String {
    format!(
        "({n} malformed {} skipped)",
        if n == 1 { one } else { many }
    )
}

/// A string field of a producer's row, cleaned; `None` when absent, not a string, or blank.
pub(crate) fn text(row: &Value, key: &str) -> Option<String> {
    row.get(key)
        .and_then(Value::as_str)
        .map(|s| clean(s, FIELD_CHARS))
        .filter(|s| !s.is_empty())
}

/// The first of `keys` that `row` has as a non-blank string.
pub(crate) fn first_text(row: &Value, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| text(row, k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_keeps_one_bounded_line() {
        assert_eq!(clean("  a\nb\u{1b}[2J c ", 50), "a b [2J c");
        assert_eq!(clean("abcdef", 3), "abc…");
        assert_eq!(clean("héllo", 5), "héllo");
    }
}
