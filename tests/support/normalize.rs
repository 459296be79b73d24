//! Snapshot text: what a command printed (exit status, stdout, stderr) or what a tool answered,
//! with everything that differs between runs named instead of shown:
//!
//! - the test root as `[ROOT]` (`[ROOT_REL]` without its leading `/`, as a repository
//!   identity of a `file://` origin shows it);
//! - loopback ports as `[PORT_n]`, RFC 3339 times as `[TIME]`, ages ("just now", "3 min ago")
//!   as `[AGE]`, elapsed milliseconds (`27 ms`, `"…_ms": 27`, `"…_seconds": 27`) as `[N]`;
//! - ids as `[FINDING_n]` (agf_), `[CONCEPT_n]`, `[API_KEY_n]` (mb_live_, and a key's printed
//!   tail `…[API_KEY_n]`, or `…[KEY_TAIL]` for a key never printed whole), `[KEY_ID_n]`,
//!   `[ORG_n]`, `[VESSEL_n]` (metabob-mcp-…), `[UUID_n]` (sessions), `[SHA_n]` (commit ids;
//!   an abbreviation of one to k digits is `[SHA_n:k]`), and the goal board's `[DISPATCH_n]`,
//!   `[EXEC_n]`, `[LABEL_n]` and `[KEY_TAG_n]` (`key:` and 8 hex).
//!
//! Every id is numbered in order of first appearance within one `TestEnv`, so a snapshot shows
//! when the same id recurs, in one output and across the outputs of one test.

use std::collections::HashMap;

use super::{Output, TestEnv};

/// Ids seen so far in one test, each with its stable name.
#[derive(Default)]
pub struct Ids {
    named: HashMap<String, String>,
    counts: HashMap<&'static str, usize>,
    /// Full commit ids seen, so an abbreviation of one is named after it.
    shas: Vec<String>,
    /// API keys seen, so a key's printed tail is named after it.
    keys: Vec<String>,
}

impl Ids {
    fn name(&mut self, kind: &'static str, raw: &str) -> String {
        if let Some(n) = self.named.get(raw) {
            return n.clone();
        }
        let count = self.counts.entry(kind).or_default();
        *count += 1;
        let name = format!("[{kind}_{count}]");
        self.named.insert(raw.to_string(), name.clone());
        name
    }
}

/// `text` with the test root, loopback ports, times and ids replaced by stable names.
pub fn normalize(text: &str, env: &TestEnv) -> String {
    let mut s = text.to_string();
    let roots = env.roots();
    for root in &roots {
        s = s.replace(root, "[ROOT]");
    }
    for root in &roots {
        // A repository identity also folds case.
        s = replace_ignoring_case(&s, root.trim_start_matches('/'), "[ROOT_REL]");
    }
    let mut ids = env.ids.lock().expect("no test panics while naming ids");
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if let Some((len, with)) = replacement(&s, i, &mut ids) {
            out.push_str(&with);
            i += len;
        } else {
            let c = s[i..].chars().next().expect("i is on a char boundary");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Names `ids` in this order, so the snapshots that follow number them as the test made them.
pub fn seen(env: &TestEnv, ids: &[&str]) {
    normalize(&ids.join(" "), env);
}

/// Leaves `ids` as they are: a fixture's fixed ids read the same every run, so a snapshot can
/// show the very value the fixture sent.
pub fn verbatim(env: &TestEnv, ids: &[&str]) {
    let mut seen = env.ids.lock().expect("no test panics while naming ids");
    for id in ids {
        seen.named.insert(id.to_string(), id.to_string());
    }
}

fn replace_ignoring_case(s: &str, needle: &str, with: &str) -> String {
    let (hay, needle) = (s.to_ascii_lowercase(), needle.to_ascii_lowercase());
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for (at, _) in hay.match_indices(&needle) {
        out.push_str(&s[last..at]);
        out.push_str(with);
        last = at + needle.len();
    }
    out.push_str(&s[last..]);
    out
}

/// One snapshot of a command's whole result: exit status, stdout and stderr, normalised.
pub fn snapshot(out: &Output, env: &TestEnv) -> String {
    normalize(&layout(out), env)
}

/// The layout of a result, as snapshots and failure messages show it.
pub fn layout(out: &Output) -> String {
    let section = |s: &str| {
        if s.is_empty() || s.ends_with('\n') {
            s.to_string()
        } else {
            format!("{s}\n")
        }
    };
    format!(
        "exit {}\n--- stdout\n{}--- stderr\n{}",
        out.code,
        section(&out.stdout),
        section(&out.stderr)
    )
}

/// Ids with a fixed prefix and a fixed number of hex digits after it.
const PREFIXED: &[(&str, usize, &str)] = &[
    ("agf_", 16, "FINDING"),
    ("concept_", 24, "CONCEPT"),
    ("edge_", 24, "EDGE"),
    ("mb_live_", 32, "API_KEY"),
    ("org_", 12, "ORG"),
    ("key_", 12, "KEY_ID"),
    ("metabob-mcp-", 12, "VESSEL"),
    ("dispatch_", 24, "DISPATCH"),
    // An execution is named by its claim concept's hex.
    ("exec_", 24, "EXEC"),
    ("label_", 24, "LABEL"),
    ("key:", 8, "KEY_TAG"),
];

const LOOPBACK: &[&str] = &["127.0.0.1:", "localhost:", "[::1]:"];

fn word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// The length of the match at `i` and its replacement, if something variable starts there.
fn replacement(s: &str, i: usize, ids: &mut Ids) -> Option<(usize, String)> {
    let b = s.as_bytes();
    let rest = &s[i..];
    let after_word = i > 0 && b[i - 1].is_ascii_alphanumeric();
    let ends_at = |j: usize| j >= b.len() || !word(b[j]);
    if !after_word {
        if let Some(len) = timestamp(&b[i..]) {
            return Some((len, "[TIME]".into()));
        }
        if let Some(len) = age(rest) {
            return Some((len, "[AGE]".into()));
        }
        let digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits > 0 && ends_at(i + digits) {
            let before = &s[..i];
            let elapsed = rest[digits..].starts_with(" ms")
                && ends_at(i + digits + 3)
                && !before.ends_with('.');
            let json_duration = ["_ms\": ", "_ms\":", "_seconds\": ", "_seconds\":"]
                .iter()
                .any(|k| before.ends_with(k));
            if elapsed || json_duration {
                return Some((digits, "[N]".into()));
            }
            // A duration of a second or more reads `1.3 s` (inspect's trace); the unit follows
            // the machine's speed, so both forms are one placeholder.
            let tenths = rest[digits..]
                .strip_prefix('.')
                .map(|t| t.bytes().take_while(u8::is_ascii_digit).count())
                .unwrap_or(0);
            let seconds_len = digits + 1 + tenths + 2;
            if tenths > 0
                && !before.ends_with('.')
                && rest[digits + 1 + tenths..].starts_with(" s")
                && ends_at(i + seconds_len)
            {
                return Some((seconds_len, "[N] ms".into()));
            }
        }
        if uuid(&b[i..]) && ends_at(i + 36) && (i == 0 || !word(b[i - 1])) {
            return Some((36, ids.name("UUID", &rest[..36])));
        }
        for (prefix, digits, kind) in PREFIXED {
            let end = i + prefix.len() + digits;
            if rest.starts_with(prefix)
                && end <= b.len()
                && b[i + prefix.len()..end].iter().all(|c| hex(*c))
                && ends_at(end)
            {
                let raw = &s[i..end];
                if *kind == "API_KEY" && !ids.keys.iter().any(|k| k == raw) {
                    ids.keys.push(raw.to_string());
                }
                return Some((end - i, ids.name(kind, raw)));
            }
        }
    }
    for host in LOOPBACK {
        if rest.starts_with(host) {
            let digits = b[i + host.len()..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .count();
            if digits > 0 {
                let port = &rest[host.len()..host.len() + digits];
                let name = ids.name("PORT", &format!("port {port}"));
                return Some((host.len() + digits, format!("{host}{name}")));
            }
        }
    }
    if let Some(tail) = rest.strip_prefix('…') {
        let n = tail
            .bytes()
            .take_while(|c| c.is_ascii_alphanumeric())
            .count();
        if n == 4 && ends_at(i + '…'.len_utf8() + 4) {
            let tail = &tail[..4];
            let key = ids.keys.iter().find(|k| k.ends_with(tail)).cloned();
            let name = match key {
                Some(k) => ids.name("API_KEY", &k),
                None => "[KEY_TAIL]".to_string(),
            };
            return Some(('…'.len_utf8() + 4, format!("…{name}")));
        }
    }
    // A commit id, or an abbreviation of one seen before or later in this text.
    if i == 0 || !word(b[i - 1]) {
        let n = b[i..].iter().take_while(|c| hex(**c)).count();
        if ends_at(i + n) && n >= 7 {
            let run = &rest[..n];
            if n == 40 {
                if !ids.shas.iter().any(|x| x == run) {
                    ids.shas.push(run.to_string());
                }
                return Some((n, ids.name("SHA", run)));
            }
            let full = ids
                .shas
                .iter()
                .find(|x| x.starts_with(run))
                .cloned()
                .or_else(|| full_shas(s).find(|x| x.starts_with(run)));
            if let Some(full) = full {
                let name = ids.name("SHA", &full);
                if !ids.shas.contains(&full) {
                    ids.shas.push(full);
                }
                return Some((n, format!("{}:{n}]", name.trim_end_matches(']'))));
            }
        }
    }
    None
}

/// "just now", "3 min ago", "5 h ago", "2 d ago": its length.
fn age(rest: &str) -> Option<usize> {
    if rest.starts_with("just now") {
        return Some("just now".len());
    }
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    [" min ago", " h ago", " d ago"]
        .iter()
        .find(|unit| rest[digits..].starts_with(*unit))
        .map(|unit| digits + unit.len())
}

/// Every 40-hex word in `s`.
fn full_shas(s: &str) -> impl Iterator<Item = String> + '_ {
    s.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .filter(|w| w.len() == 40 && w.bytes().all(hex))
        .map(str::to_string)
}

/// `YYYY-MM-DDTHH:MM:SS[.frac][Z|±HH:MM]`: its length.
fn timestamp(b: &[u8]) -> Option<usize> {
    let shape = b"dddd-dd-ddTdd:dd:dd";
    if b.len() < shape.len() {
        return None;
    }
    for (c, want) in b.iter().zip(shape) {
        let ok = match want {
            b'd' => c.is_ascii_digit(),
            w => c == w,
        };
        if !ok {
            return None;
        }
    }
    let mut n = shape.len();
    if b.get(n) == Some(&b'.') {
        let frac = b[n + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if frac > 0 {
            n += 1 + frac;
        }
    }
    match b.get(n) {
        Some(b'Z') => n += 1,
        Some(b'+' | b'-')
            if b.len() >= n + 6
                && b[n + 1..n + 3].iter().all(u8::is_ascii_digit)
                && b[n + 3] == b':'
                && b[n + 4..n + 6].iter().all(u8::is_ascii_digit) =>
        {
            n += 6
        }
        _ => {}
    }
    Some(n)
}

/// An 8-4-4-4-12 hex UUID at the start of `b`.
fn uuid(b: &[u8]) -> bool {
    b.len() >= 36
        && b[..36].iter().enumerate().all(|(k, c)| match k {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

#[test]
fn names_recur_and_differ_by_kind() {
    let env = TestEnv::new();
    let sha = "0123456789abcdef0123456789abcdef01234567";
    let text = format!(
        "agf_00112233aabbccdd on {sha} ({}) at 2025-01-02T03:04:05.678Z \
         http://127.0.0.1:45678/x 127.0.0.1:45678 localhost:1 user_key_a1b2c3d4e5f6 \
         mb_live_0123456789abcdef0123456789abcdef …cdef \
         6f1c2d3e-aaaa-4bbb-8ccc-0123456789ab agf_00112233aabbccdd {}/x",
        &sha[..12],
        env.root.path().display()
    );
    assert_eq!(
        normalize(&text, &env),
        "[FINDING_1] on [SHA_1] ([SHA_1:12]) at [TIME] http://127.0.0.1:[PORT_1]/x \
         127.0.0.1:[PORT_1] localhost:[PORT_2] user_[KEY_ID_1] [API_KEY_1] …[API_KEY_1] \
         [UUID_1] [FINDING_1] [ROOT]/x"
    );
    // Numbering goes on across the texts of one test.
    assert_eq!(
        normalize("agf_ffffffffffffffff agf_00112233aabbccdd", &env),
        "[FINDING_2] [FINDING_1]"
    );
    assert_eq!(
        normalize(
            "Parsed 4 files in 27 ms. (a.py; just now) 3 min ago \"until_ms\": 1796087629366, \"retry_after_seconds\":1920 \"minutes\": 60 completed  1.3 s  v1.2 s",
            &env
        ),
        "Parsed 4 files in [N] ms. (a.py; [AGE]) [AGE] \"until_ms\": [N], \"retry_after_seconds\":[N] \"minutes\": 60 completed  [N] ms  v1.2 s"
    );
    let root = env.root.path().display().to_string();
    let repository = format!(
        "\"repository\": \"{}/origins/app\"",
        root.trim_start_matches('/').to_ascii_lowercase()
    );
    assert_eq!(
        normalize(&repository, &env),
        "\"repository\": \"[ROOT_REL]/origins/app\""
    );
    // The goal board's ids; a fixture's fixed or shorter ones stay as they are.
    let dispatch = "dispatch_0123456789abcdef01234567";
    verbatim(&env, &[dispatch]);
    assert_eq!(
        normalize(
            &format!(
                "dispatch_{0} exec_{0} key:9f8e7d6c {dispatch} exec_00aa11bb",
                "ab".repeat(12)
            ),
            &env
        ),
        format!("[DISPATCH_1] [EXEC_1] [KEY_TAG_1] {dispatch} exec_00aa11bb")
    );
    // Words that only look like ids are left alone.
    assert_eq!(
        normalize("key_rejected deadbeef 2025 xagf_00112233aabbccdd", &env),
        "key_rejected deadbeef 2025 xagf_00112233aabbccdd"
    );
}
