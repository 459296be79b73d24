//! Commit-message trailers, read the way git reads a commit's own trailers
//! (`git log --format=%(trailers)`) with git's default configuration.
//!
//! `finding close` decides which findings a commit claims to fix from its `Fixes-Finding:`
//! trailers, so the parse must agree with git's own: a line git does not call a trailer must
//! not close anything. The steps below follow git's trailer.c and pretty.c (where the message
//! starts, where it ends, the start of the trailer block, continuation lines), and
//! `tests/refs/trailers.rs` holds them to the real git CLI over a generated corpus.
//!
//! This is deliberately not what `git interpret-trailers --parse` does with the same text:
//! that command reads a message being written or an email, where a `---` line starts the
//! patch. A commit has no patch below its message, so git's log reading never stops at
//! `---`, and neither does this parse. Nothing in the crate reads trailers of a message that
//! is not yet a commit, so there is no second, interpret-trailers flavour here.

/// One `key: value` trailer, the key as written and the value with continuation lines folded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trailer {
    pub key: String,
    pub value: String,
}

/// The trailer key `finding close` reads.
pub const FIXES_FINDING: &str = "Fixes-Finding";

/// git's core.commentChar default; the parse assumes it is not reconfigured.
const COMMENT: &[u8] = b"#";

/// Lines git itself writes: one of them lets a block pass with only 25% trailer lines.
const GIT_GENERATED_PREFIXES: [&[u8]; 2] = [b"Signed-off-by: ", b"(cherry picked from commit "];

/// `git commit -v` puts everything below this line out of the message.
const SCISSORS: &[u8] = b"\n# ------------------------ >8 ------------------------\n";

/// The trailers of a commit message's trailer block, in order, as git parses them.
///
/// A message with no blank line after its subject has none, and so has one whose last
/// paragraph is mostly prose.
pub fn parse_trailers(message: &str) -> Vec<Trailer> {
    // git handles the message as a C string, so nothing after a NUL exists for it.
    let msg = message.split('\0').next().unwrap_or_default();
    // git's log formatting starts the message at its subject, past any blank lines, so a
    // message that opens with a blank line still has its first text line as its subject.
    let msg = &msg[leading_blank_lines(msg.as_bytes())..];
    let buf = msg.as_bytes();
    let end = end_of_log_message(buf);
    let start = trailer_block_start(buf, end);
    let mut out = Vec::new();
    for entry in block_entries(buf, start, end) {
        let line = &msg[entry.0..entry.1];
        if line.as_bytes().starts_with(COMMENT) {
            continue;
        }
        let Some(sep) = find_separator(line.as_bytes()) else {
            continue;
        };
        out.push(Trailer {
            key: trim(&line[..sep]).to_string(),
            value: unfold(trim(&line[sep + 1..])),
        });
    }
    out
}

/// The finding ids a commit claims to fix: the values of its `Fixes-Finding` trailers (key
/// compared without case, as git compares keys), trimmed, kept only when shaped like a
/// finding id (`agf_` then letters, digits, `_` or `-`), each id once, in order.
pub fn fixes_finding_ids(message: &str) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for t in parse_trailers(message) {
        if !t.key.eq_ignore_ascii_case(FIXES_FINDING) {
            continue;
        }
        let id = t.value.trim();
        if is_finding_id(id) && !ids.iter().any(|seen| seen == id) {
            ids.push(id.to_string());
        }
    }
    ids
}

/// True when any line of the message, wherever it stands, reads `key: value`, ignoring
/// whitespace around the key and the value and the key's case.
///
/// A squash merge pastes the source commits' messages into its body, where the trailer
/// parse never looks; this is how such a merge is still recognised as carrying a fix.
pub fn mentions_trailer_line(message: &str, key: &str, value: &str) -> bool {
    trailer_line_values(message, key).any(|v| v == value.trim())
}

/// The values of every `key: value` line anywhere in the message (the rule of
/// [`mentions_trailer_line`]), so a scan over many commits reads each message once.
pub fn trailer_line_values<'a>(
    message: &'a str,
    key: &'a str,
) -> impl Iterator<Item = &'a str> + 'a {
    let key = key.trim();
    message.lines().filter_map(move |line| {
        let (k, v) = line.split_once(':')?;
        (!key.is_empty() && k.trim().eq_ignore_ascii_case(key)).then(|| v.trim())
    })
}

fn is_finding_id(s: &str) -> bool {
    s.strip_prefix("agf_").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}

/// git's isspace: ASCII space, tab, LF and CR only (not VT or FF).
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn trim(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_ascii() && is_space(c as u8))
}

/// The start of the line after the one at `pos` (or the end of the buffer).
fn next_line(buf: &[u8], pos: usize) -> usize {
    buf[pos..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(buf.len(), |i| pos + i + 1)
}

/// The start of the line before the one starting at `pos`, if any.
fn prev_line(buf: &[u8], pos: usize) -> Option<usize> {
    match pos {
        0 => None,
        1 => Some(0),
        // The byte just before `pos` is the previous line's own newline; skip it.
        _ => Some(
            buf[..pos - 1]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1),
        ),
    }
}

fn is_blank_line(buf: &[u8], pos: usize) -> bool {
    buf[pos..]
        .iter()
        .take_while(|&&b| b != b'\n')
        .all(|&b| is_space(b))
}

/// Where git's trailer key ends: a key of letters, digits and '-', maybe followed by spaces
/// or tabs, then ':'. Returns the separator's offset, at least 1.
fn find_separator(line: &[u8]) -> Option<usize> {
    let mut whitespace_found = false;
    for (i, &c) in line.iter().enumerate() {
        if c == b':' {
            return (i >= 1).then_some(i);
        }
        if !whitespace_found && (c.is_ascii_alphanumeric() || c == b'-') {
            continue;
        }
        if i != 0 && (c == b' ' || c == b'\t') {
            whitespace_found = true;
            continue;
        }
        break;
    }
    None
}

/// The end of the part of the message git reads trailers from: before a scissors line and
/// any trailing run of comments, blank lines and old `Conflicts:` lists. A `---` line is
/// text like any other here: git reads a commit's trailers with its patch divider off.
// anchor: end-of-log-message
fn end_of_log_message(buf: &[u8]) -> usize {
    buf.len() - ignored_tail_bytes(buf, buf.len())
}

/// The length of the run of lines holding only whitespace (git's isspace) at the start.
fn leading_blank_lines(buf: &[u8]) -> usize {
    let mut pos = 0;
    while pos < buf.len() && is_blank_line(buf, pos) {
        pos = next_line(buf, pos);
    }
    pos
}

fn ignored_tail_bytes(buf: &[u8], len: usize) -> usize {
    let cutoff = scissors_cutoff(buf, len);
    // As in git, 0 doubles as "no run started", so a run starting at the very first line
    // is not recognised.
    let mut boc = 0;
    let mut bol = 0;
    let mut in_conflicts = false;
    while bol < cutoff {
        let next = buf[bol..len]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(len, |i| bol + i + 1);
        if buf[bol..cutoff].starts_with(COMMENT) || buf[bol] == b'\n' {
            if boc == 0 {
                boc = bol;
            }
        } else if buf[bol..].starts_with(b"Conflicts:\n") {
            in_conflicts = true;
            if boc == 0 {
                boc = bol;
            }
        } else if in_conflicts && buf[bol] == b'\t' {
            // a path listed under Conflicts:
        } else if boc != 0 {
            boc = 0;
            in_conflicts = false;
        }
        bol = next;
    }
    if boc != 0 { len - boc } else { len - cutoff }
}

fn scissors_cutoff(buf: &[u8], len: usize) -> usize {
    if buf.starts_with(&SCISSORS[1..]) {
        return 0;
    }
    match buf.windows(SCISSORS.len()).position(|w| w == SCISSORS) {
        Some(p) if p + 1 < len => p + 1,
        _ => len,
    }
}

/// Where the trailer block starts in `buf[..len]`, or `len` when there is none: the last
/// paragraph after the subject counts when all its lines are trailers, or when a line git
/// generates is among them and trailers are at least a quarter of its lines.
// anchor: trailer-block-start
fn trailer_block_start(buf: &[u8], len: usize) -> usize {
    let within = |pos: usize, prefix: &[u8]| buf[pos..len].starts_with(prefix);

    // The subject paragraph never holds trailers.
    let mut s = 0;
    while s < len {
        if !within(s, COMMENT) && is_blank_line(buf, s) {
            break;
        }
        s = next_line(buf, s);
    }
    let end_of_title = s;

    let mut only_spaces = true;
    let mut recognized_prefix = false;
    let mut trailer_lines = 0usize;
    let mut non_trailer_lines = 0usize;
    // Indented lines count with the trailer above them, or as prose if prose is above them.
    let mut possible_continuation_lines = 0usize;

    let mut l = prev_line(buf, len);
    while let Some(bol) = l.filter(|&l| l >= end_of_title) {
        l = prev_line(buf, bol);
        if within(bol, COMMENT) {
            non_trailer_lines += possible_continuation_lines;
            possible_continuation_lines = 0;
            continue;
        }
        if is_blank_line(buf, bol) {
            if only_spaces {
                continue;
            }
            non_trailer_lines += possible_continuation_lines;
            if (recognized_prefix && trailer_lines * 3 >= non_trailer_lines)
                || (trailer_lines > 0 && non_trailer_lines == 0)
            {
                return next_line(buf, bol);
            }
            return len;
        }
        only_spaces = false;
        if GIT_GENERATED_PREFIXES
            .iter()
            .any(|p| buf[bol..].starts_with(p))
        {
            trailer_lines += 1;
            possible_continuation_lines = 0;
            recognized_prefix = true;
        } else if find_separator(&buf[bol..]).is_some() && !is_space(buf[bol]) {
            trailer_lines += 1;
            possible_continuation_lines = 0;
        } else if is_space(buf[bol]) {
            possible_continuation_lines += 1;
        } else {
            non_trailer_lines += 1 + possible_continuation_lines;
            possible_continuation_lines = 0;
        }
    }
    len
}

/// The block's lines as byte ranges, each indented line joined to the trailer above it.
fn block_entries(buf: &[u8], start: usize, end: usize) -> Vec<(usize, usize)> {
    let mut entries: Vec<(usize, usize)> = Vec::new();
    let mut last_is_trailer = false;
    let mut pos = start;
    while pos < end {
        let next = buf[pos..end]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(end, |i| pos + i + 1);
        match entries.last_mut() {
            Some(last) if last_is_trailer && is_space(buf[pos]) => last.1 = next,
            _ => {
                entries.push((pos, next));
                last_is_trailer = find_separator(&buf[pos..next]).is_some();
            }
        }
        pos = next;
    }
    entries
}

/// Folds a multi-line value into one line: each newline and the indentation after it
/// become one space.
fn unfold(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            while chars
                .next_if(|&n| n.is_ascii() && is_space(n as u8))
                .is_some()
            {}
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    trim(&out).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(message: &str) -> Vec<(String, String)> {
        parse_trailers(message)
            .into_iter()
            .map(|t| (t.key, t.value))
            .collect()
    }

    fn kv(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_last_paragraph_is_the_block() {
        let m = "Fix it\n\nBody text.\n\nFixes-Finding: agf_1\nReviewed-by: A <a@b>\n";
        assert_eq!(
            pairs(m),
            kv(&[("Fixes-Finding", "agf_1"), ("Reviewed-by", "A <a@b>")])
        );
    }

    #[test]
    fn a_subject_alone_has_no_trailers() {
        assert!(pairs("Fixes-Finding: agf_1\n").is_empty());
        assert!(pairs("Fixes-Finding: agf_1\nKey: v\n").is_empty());
    }

    #[test]
    fn continuation_lines_fold_into_the_value() {
        let m = "s\n\nKey: one\n  two\n\tthree\n";
        assert_eq!(pairs(m), kv(&[("Key", "one two three")]));
    }

    #[test]
    fn prose_in_the_block_needs_a_git_line_and_a_quarter_of_trailers() {
        let prose_only = "s\n\nKey: v\nthis is prose\n";
        assert!(pairs(prose_only).is_empty());
        let with_signoff = "s\n\nKey: v\nthis is prose\nSigned-off-by: A <a@b>\n";
        assert_eq!(
            pairs(with_signoff),
            kv(&[("Key", "v"), ("Signed-off-by", "A <a@b>")])
        );
        let too_much_prose = "s\n\nSigned-off-by: A\np1\np2\np3\np4\n";
        assert!(pairs(too_much_prose).is_empty());
    }

    #[test]
    fn a_patch_separator_is_text_in_a_commit_message() {
        // A `---` line is prose in the last paragraph, so this block is not all trailers...
        assert!(pairs("s\n\nKey: v\n---\nOther: w\n").is_empty());
        assert!(fixes_finding_ids("s\n\nFixes-Finding: agf_1\n---\nmore text\n").is_empty());
        assert!(pairs("s\n\nKey: v\n---").is_empty());
        // ...and a block below one is still the message's block.
        assert_eq!(
            pairs("s\n\nbody\n---\nmore\n\nKey: v\n"),
            kv(&[("Key", "v")])
        );
    }

    #[test]
    fn comments_and_trailing_blank_lines_end_the_message() {
        let m = "s\n\nKey: v\n# comment\n\n";
        assert_eq!(pairs(m), kv(&[("Key", "v")]));
        assert_eq!(pairs("s\n\nKey: v"), kv(&[("Key", "v")]));
    }

    #[test]
    fn blank_lines_before_the_subject_are_skipped() {
        assert!(pairs("\n\nFixes-Finding: agf_1\n").is_empty());
        assert_eq!(pairs(" \n\t\ns\n\nKey: v\n"), kv(&[("Key", "v")]));
    }

    #[test]
    fn fixes_finding_ids_are_filtered_trimmed_and_deduplicated() {
        let m = "s\n\nfixes-finding:  agf_a1 \nFixes-Finding: agf_b-2\nFixes-Finding: nope\n\
                 FIXES-FINDING: agf_a1\nFixes-Finding: agf_\nFixes-Finding: agf_x y\n";
        assert_eq!(fixes_finding_ids(m), vec!["agf_a1", "agf_b-2"]);
    }

    #[test]
    fn a_mention_counts_anywhere_in_the_message() {
        let squash = "Squash (#12)\n\n* first\n\n    Fixes-Finding: agf_9\n\n* second\n";
        assert!(fixes_finding_ids(squash).is_empty());
        assert!(mentions_trailer_line(squash, "fixes-finding", "agf_9"));
        assert!(mentions_trailer_line(
            "x\r\nFixes-Finding :agf_9\r\n",
            "Fixes-Finding",
            "agf_9"
        ));
        assert!(!mentions_trailer_line(squash, "Fixes-Finding", "agf_99"));
        assert!(!mentions_trailer_line(squash, "Finding", "agf_9"));
    }
}
