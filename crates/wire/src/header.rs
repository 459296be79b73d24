//! The header block of a concept's content: `key: value` lines up to the first blank line
//! (SPEC.md §Header block). The author, session, repository, files, a verdict and finding ids
//! are read from here only, so free text after the blank line never supplies them.

/// The parsed header block (anchor: header-block).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    fields: Vec<(String, String)>,
}

impl Header {
    /// Reads `key: value` lines until the first blank line. Keys are compared without case
    /// and may be indented; a line in the block that is not `key: value` is kept out.
    pub fn parse(content: &str) -> Header {
        let mut fields = Vec::new();
        for line in content.lines() {
            if line.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = split_field(line) {
                fields.push((k, v.to_string()));
            }
        }
        Header { fields }
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// Every `key: value` line of the block, keys lowercased.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &str)> {
        self.fields.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// A comma-separated value as a list, empty entries dropped.
    pub fn list(&self, key: &str) -> Vec<String> {
        self.get(key)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// `key: value` with a key of letters, digits, `_` and `-`; the key is lowercased.
fn split_field(line: &str) -> Option<(String, &str)> {
    let (k, v) = line.trim_start().split_once(':')?;
    let k = k.trim_end();
    if k.is_empty()
        || !k
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return None;
    }
    Some((k.to_ascii_lowercase(), v.trim()))
}

/// The content after the header block (and its blank line).
pub fn body(content: &str) -> &str {
    let mut offset = 0;
    for line in content.split_inclusive('\n') {
        offset += line.len();
        if line.trim().is_empty() {
            return &content[offset..];
        }
    }
    ""
}

/// Composes content: the header lines (empty values left out), a blank line, then the body.
/// Values are flattened to one line, since a newline would end the field.
pub fn compose(fields: &[(&str, String)], body: &str) -> String {
    let mut out = String::new();
    for (k, v) in fields {
        let v = v.replace(['\r', '\n'], " ");
        let v = v.trim();
        if !v.is_empty() {
            out.push_str(k);
            out.push_str(": ");
            out.push_str(v);
            out.push('\n');
        }
    }
    out.push('\n');
    out.push_str(body.trim_start_matches(['\r', '\n']));
    out
}

/// Strips the given keys from a leading header block, whatever their case or indentation,
/// leaving the body untouched; returns the new content and the lines removed. Used where an
/// author stamp must come from this process, never from text an agent wrote.
pub fn strip_keys(content: &str, keys: &[&str]) -> (String, Vec<String>) {
    let mut kept = String::new();
    let mut removed = Vec::new();
    let mut in_header = true;
    for line in content.split_inclusive('\n') {
        if in_header && line.trim().is_empty() {
            in_header = false;
        }
        if in_header
            && let Some((k, _)) = split_field(line)
            && keys.contains(&k.as_str())
        {
            removed.push(line.trim().to_string());
            continue;
        }
        kept.push_str(line);
    }
    (kept, removed)
}

/// Reads `key: value` lines anywhere in free text (task details carry policy lines such as
/// `push_to: task` among prose). The first occurrence wins.
pub fn find_line<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (k, v) = line.trim_start().split_once(':')?;
        (k.trim_end().eq_ignore_ascii_case(key))
            .then(|| v.trim())
            .filter(|v| !v.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_ends_at_the_first_blank_line() {
        let c = "recorded_by: a\n  Session: s1\nfiles: x.py, y.py\n\nrecorded_by: forged\nbody";
        let h = Header::parse(c);
        assert_eq!(h.get("recorded_by"), Some("a"));
        assert_eq!(h.get("session"), Some("s1"));
        assert_eq!(h.list("files"), vec!["x.py", "y.py"]);
        assert_eq!(body(c), "recorded_by: forged\nbody");
    }

    #[test]
    fn compose_round_trips_and_flattens_values() {
        let c = compose(
            &[
                ("repo", "r".into()),
                ("empty", String::new()),
                ("x", "a\nb".into()),
            ],
            "\nbody",
        );
        assert_eq!(c, "repo: r\nx: a b\n\nbody");
        assert_eq!(Header::parse(&c).get("x"), Some("a b"));
    }

    #[test]
    fn strip_keys_only_touches_the_header() {
        let (kept, removed) = strip_keys(
            "RECORDED_BY: me\n  session: x\nshape: y\n\nrecorded_by: stays\n",
            &["recorded_by", "session"],
        );
        assert_eq!(kept, "shape: y\n\nrecorded_by: stays\n");
        assert_eq!(removed, vec!["RECORDED_BY: me", "session: x"]);
    }

    #[test]
    fn find_line_reads_policy_lines_in_prose() {
        let d = "Fix the parser.\nPush_To: task\nref: feature/x";
        assert_eq!(find_line(d, "push_to"), Some("task"));
        assert_eq!(find_line(d, "ref"), Some("feature/x"));
        assert_eq!(find_line(d, "integrate"), None);
    }
}
