//! The outgoing text guard: every string a tool sends to the ledger, and every string in a
//! composed write pointer, passes here first.
//!
//! Two checks share this module. [`Guard::check_input`] runs on a tool's arguments before the
//! tool runs: it refuses secrets (known values and credential patterns), rewrites home paths to
//! `~` in prose and refuses them in fields the substrate acts on, and enforces per-field size
//! caps. [`Guard::check_pointer`] is the backstop at the one egress: it sees the pointer the
//! client composed (header blocks, stamps) and matches only exact known secret values there,
//! since ids and hashes in a pointer would read as tokens to the patterns.
//!
//! The guard catches accidents, not adversaries: an encoded, split or paraphrased secret passes.

mod known;
mod redact;
mod scan;

use std::path::Path;

use serde_json::Value;

use crate::env::Env;
use metabob_wire::fields::{FieldKind, field_rule};
pub use redact::{MASK, redact_url_credentials};
pub use scan::{SecretKind, entropy, is_placeholder, is_secret_name, scan_patterns};

/// Why the guard refused. `Display` is the one line a caller shows; it never holds the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GuardRefusal {
    #[error(
        "{tool}: refused: outgoing_secret({kind}, {field}): nothing was sent; describe the value masked instead (for example postgres://admin:***@host, or the variable's name)"
    )]
    Secret {
        tool: String,
        kind: SecretKind,
        field: String,
    },
    #[error(
        "{tool}: refused: outgoing_local_path({field}): nothing was sent; this field is used as given, so name the path relative to the workspace"
    )]
    LocalPath { tool: String, field: String },
    #[error(
        "{tool}: refused: outgoing_too_large({field}, {bytes}): nothing was sent; this field holds at most {cap} bytes"
    )]
    TooLarge {
        tool: String,
        field: String,
        bytes: usize,
        cap: usize,
    },
    /// The backstop found a known secret in a composed pointer.
    #[error("outgoing_secret(known_secret, {field}): the {shape} write was not sent")]
    PointerSecret { shape: String, field: String },
}

// The advice in these lines moves here with the guard's own change (issue 43); until then the
// errors that wrap a refusal delegate to this impl, which has none of its own.
impl metabob_wire::report::Hint for GuardRefusal {}

/// A tool's arguments after the guard: home paths in prose rewritten, and a note line for
/// each rewrite to end the tool's reply with.
#[derive(Clone, Debug, PartialEq)]
pub struct Guarded {
    pub value: Value,
    pub notes: Vec<String>,
}

/// The guard for one environment and workspace: the known secret values and this user's home.
pub struct Guard {
    known: Vec<String>,
    home: Option<String>,
}

impl std::fmt::Debug for Guard {
    // Never print the known values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("known_secrets", &self.known.len())
            .field("home", &self.home)
            .finish()
    }
}

impl Guard {
    /// Collects the known secrets from `env` (its variables and its home's credential files)
    /// and from `workspace`'s dotenv and registry files. Files are read here, cached by
    /// modification time, and never sent.
    pub fn new(env: &Env, workspace: Option<&Path>) -> Guard {
        let home = env
            .home()
            .map(|h| h.display().to_string())
            .map(|h| h.trim_end_matches(['/', '\\']).to_string())
            // A root or empty home would match every absolute path.
            .filter(|h| h.len() > 1);
        Guard {
            known: known::collect(env, workspace),
            home,
        }
    }

    /// How many known secret values the guard holds (never the values themselves).
    pub fn known_secret_count(&self) -> usize {
        self.known.len()
    }

    fn contains_known(&self, s: &str) -> bool {
        self.known.iter().any(|k| s.contains(k.as_str()))
    }

    // anchor: guard_tool_input
    /// Guards a tool's arguments before the tool runs. Every string, nested ones included, is
    /// checked against its field's rule; the first problem refuses the whole call.
    pub fn check_input(&self, tool: &str, args: &Value) -> Result<Guarded, GuardRefusal> {
        let mut value = args.clone();
        let mut rewritten = Vec::new();
        self.walk_input(tool, &mut value, "", String::new(), &mut rewritten)?;
        let notes = if rewritten.is_empty() {
            Vec::new()
        } else {
            vec![format!(
                "note: home directory paths were shortened to ~ in {} before sending",
                rewritten.join(", ")
            )]
        };
        Ok(Guarded { value, notes })
    }

    fn walk_input(
        &self,
        tool: &str,
        v: &mut Value,
        key: &str,
        path: String,
        rewritten: &mut Vec<String>,
    ) -> Result<(), GuardRefusal> {
        match v {
            Value::String(s) => {
                let field = if path.is_empty() {
                    "args".to_string()
                } else {
                    path
                };
                let rule = field_rule(key);
                if let Some(kind) = self.secret_in(s) {
                    return Err(GuardRefusal::Secret {
                        tool: tool.to_string(),
                        kind,
                        field,
                    });
                }
                if s.len() > rule.cap {
                    return Err(GuardRefusal::TooLarge {
                        tool: tool.to_string(),
                        field,
                        bytes: s.len(),
                        cap: rule.cap,
                    });
                }
                let spans = home_spans(s, self.home.as_deref(), true);
                if !spans.is_empty() {
                    match rule.kind {
                        FieldKind::ActedOn => {
                            return Err(GuardRefusal::LocalPath {
                                tool: tool.to_string(),
                                field,
                            });
                        }
                        FieldKind::Prose => {
                            *s = replace_spans(s, &spans);
                            rewritten.push(field);
                        }
                    }
                }
                Ok(())
            }
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.walk_input(tool, item, key, format!("{path}[{i}]"), rewritten)?;
                }
                Ok(())
            }
            Value::Object(map) => {
                for (k, item) in map.iter_mut() {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    self.walk_input(tool, item, k, p, rewritten)?;
                }
                Ok(())
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
        }
    }

    fn secret_in(&self, s: &str) -> Option<SecretKind> {
        if self.contains_known(s) {
            return Some(SecretKind::KnownSecret);
        }
        scan::scan_patterns(s)
    }

    // anchor: guard_outgoing_pointer
    /// The backstop over a composed write pointer, run at the one egress. Only exact known
    /// secret values refuse (the patterns would misread ids and hashes); a path under this
    /// user's home becomes `~`, and the returned warnings name the shape and each field path.
    pub fn check_pointer(
        &self,
        shape: &str,
        pointer: &mut Value,
    ) -> Result<Vec<String>, GuardRefusal> {
        let mut rewritten = Vec::new();
        self.walk_pointer(shape, pointer, String::new(), &mut rewritten)?;
        if rewritten.is_empty() {
            return Ok(Vec::new());
        }
        Ok(vec![format!(
            "{shape}: home directory paths were shortened to ~ in {}",
            rewritten.join(", ")
        )])
    }

    fn walk_pointer(
        &self,
        shape: &str,
        v: &mut Value,
        path: String,
        rewritten: &mut Vec<String>,
    ) -> Result<(), GuardRefusal> {
        match v {
            Value::String(s) => {
                let field = if path.is_empty() {
                    "pointer".to_string()
                } else {
                    path
                };
                if self.contains_known(s) {
                    return Err(GuardRefusal::PointerSecret {
                        shape: shape.to_string(),
                        field,
                    });
                }
                let spans = home_spans(s, self.home.as_deref(), false);
                if !spans.is_empty() {
                    *s = replace_spans(s, &spans);
                    rewritten.push(field);
                }
                Ok(())
            }
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.walk_pointer(shape, item, format!("{path}[{i}]"), rewritten)?;
                }
                Ok(())
            }
            Value::Object(map) => {
                for (k, item) in map.iter_mut() {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    self.walk_pointer(shape, item, p, rewritten)?;
                }
                Ok(())
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
        }
    }
}

// anchor: describeArgsForLog
/// Each argument's name and size, never its value: `files=array(2) summary=string(41)
/// force=boolean`. Used by the tool-call log line and the call log.
pub fn describe_args_for_log(args: &Value) -> String {
    fn describe(v: &Value) -> String {
        match v {
            Value::String(s) => format!("string({})", s.chars().count()),
            Value::Array(a) => format!("array({})", a.len()),
            Value::Object(_) => "object".to_string(),
            Value::Number(_) => "number".to_string(),
            Value::Bool(_) => "boolean".to_string(),
            Value::Null => "null".to_string(),
        }
    }
    match args {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", describe(v)))
            .collect::<Vec<_>>()
            .join(" "),
        other => describe(other),
    }
}

fn path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// Byte spans of home directories in `s`: this user's `home` always, and with `any_user`
/// also `/home/<user>`, `/Users/<user>` and `<drive>:\Users\<user>`. A span must start a path
/// (not follow a name character) and end at a path boundary.
fn home_spans(s: &str, home: Option<&str>, any_user: bool) -> Vec<(usize, usize)> {
    let b = s.as_bytes();
    let starts_path = |i: usize| i == 0 || !path_byte(b[i - 1]);
    let ends_path = |e: usize| e >= b.len() || !path_byte(b[e]);
    let mut spans = Vec::new();
    if let Some(h) = home {
        let mut from = 0;
        while let Some(off) = s[from..].find(h) {
            let (i, e) = (from + off, from + off + h.len());
            if starts_path(i) && ends_path(e) {
                spans.push((i, e));
            }
            // `e` ends a whole match, so it is a char boundary whatever the home holds.
            from = e;
        }
    }
    if any_user {
        let user_len = |start: usize| {
            let n = b[start.min(b.len())..]
                .iter()
                .take_while(|&&c| path_byte(c))
                .count();
            // `/home/.x` or `/home/-` are not user directories.
            if n > 0 && (b[start].is_ascii_alphanumeric() || b[start] == b'_') {
                n
            } else {
                0
            }
        };
        for prefix in ["/home/", "/Users/"] {
            let mut from = 0;
            while let Some(off) = s[from..].find(prefix) {
                let i = from + off;
                let n = user_len(i + prefix.len());
                if n > 0 && starts_path(i) {
                    spans.push((i, i + prefix.len() + n));
                }
                from = i + 1;
            }
        }
        // Windows: `C:\Users\name` or `C:/Users/name`, any drive, any case.
        for i in 0..b.len().saturating_sub(9) {
            if b[i].is_ascii_alphabetic()
                && b[i + 1] == b':'
                && matches!(b[i + 2], b'\\' | b'/')
                && b[i + 3..i + 8].eq_ignore_ascii_case(b"users")
                && matches!(b[i + 8], b'\\' | b'/')
                && starts_path(i)
            {
                let n = user_len(i + 9);
                if n > 0 {
                    spans.push((i, i + 9 + n));
                }
            }
        }
    }
    // Longest first at each start, then drop spans inside an earlier one.
    spans.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut out: Vec<(usize, usize)> = Vec::new();
    for sp in spans {
        if out.last().is_none_or(|last| sp.0 >= last.1) {
            out.push(sp);
        }
    }
    out
}

fn replace_spans(s: &str, spans: &[(usize, usize)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    for &(i, e) in spans {
        out.push_str(&s[at..i]);
        out.push('~');
        at = e;
    }
    out.push_str(&s[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shorten(s: &str, home: Option<&str>, any: bool) -> String {
        replace_spans(s, &home_spans(s, home, any))
    }

    #[test]
    fn home_paths_of_any_user_and_this_one() {
        assert_eq!(shorten("/home/alice/src/x.rs", None, true), "~/src/x.rs");
        assert_eq!(shorten("at /Users/bob.smith/w", None, true), "at ~/w");
        assert_eq!(shorten(r"C:\Users\carol\repo", None, true), r"~\repo");
        assert_eq!(shorten("c:/users/carol/repo", None, true), "~/repo");
        assert_eq!(
            shorten("/srv/home/alice/x", None, true),
            "/srv/home/alice/x"
        );
        assert_eq!(shorten("/home/", None, true), "/home/");
        assert_eq!(
            shorten("/var/lib/me/x and /var/lib/me", Some("/var/lib/me"), false),
            "~/x and ~"
        );
        assert_eq!(
            shorten("/var/lib/meow", Some("/var/lib/me"), false),
            "/var/lib/meow"
        );
        assert_eq!(
            shorten("/home/alice/x", Some("/var/lib/me"), false),
            "/home/alice/x"
        );
    }

    #[test]
    fn multibyte_text_around_every_scanner_never_panics() {
        let g = Guard {
            known: vec!["Zq8Tm1pLk3vW9xYb2Rn5".into()],
            home: Some("/home/jörg".into()),
        };
        let text = "ключ: значение — €/home/jörg/ü Authorization: Bearer ü€ Cookie: a=ü; \
                    пароль=ü -----BEGIN PRIVATE KEY-----ü eyJü.ü ghp_ü sk-ü https://ü:ü@ü \
                    DB_PASSWORD=\"ü C:\\Users\\ü ${ü";
        for cut in 0..text.chars().count() {
            let s: String = text.chars().skip(cut).collect();
            let _ = g.check_input("t", &serde_json::json!({ "details": s.clone() }));
            let _ = g.check_pointer("s", &mut serde_json::json!({ "x": s }));
        }
        // Whole, it still refuses: it holds URL credentials and a weak assigned password.
        assert!(
            g.check_input("t", &serde_json::json!({ "details": text }))
                .is_err()
        );
    }

    #[test]
    fn describe_never_shows_values() {
        let args = serde_json::json!({"files": ["a", "b"], "force": true, "n": 3, "o": {}, "summary": "leaky value", "z": null});
        assert_eq!(
            describe_args_for_log(&args),
            "files=array(2) force=boolean n=number o=object summary=string(11) z=null"
        );
    }
}
