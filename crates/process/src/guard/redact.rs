//! The one owner of credential redaction (SPEC.md §Credentials in URLs): every URL, store DSN
//! or error line a command prints, logs, answers or sends passes [`redact_url_credentials`]
//! first, whatever it names (origin, discovery, identity, ledger, proxy or store). The rule for
//! what counts as a credential in a URL's userinfo is also the guard's rule for refusing one.

use std::ops::Range;

use super::scan::{
    find_all, is_password_name, is_placeholder, is_scheme_char, is_secret_name, random_enough, run,
};

/// What a credential is replaced with.
pub const MASK: &str = "***";

/// `text` with every credential masked as `***` (anchor: redact_url_credentials):
/// - in a URL's userinfo, the password of `user:password@` (the user stays) or a random-looking
///   token that is the whole user part;
/// - in a URL's query, the value of a secret-named parameter (`?password=`, `&sslpassword=`,
///   `?token=`);
/// - anywhere, the value of a password-named `key=value` pair, as a PostgreSQL key=value DSN
///   (`host=db password=…`) writes it, quoted or not.
///
/// A plain user name (`ssh://git@host`) and a placeholder (`${PASSWORD}`) stay.
pub fn redact_url_credentials(text: &str) -> String {
    let mut spans = url_credential_spans(text);
    spans.extend(bare_spans(text));
    spans.extend(query_spans(text));
    spans.extend(pair_spans(text));
    spans.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for span in spans {
        if span.end <= last {
            continue;
        }
        out.push_str(&text[last..span.start.max(last)]);
        out.push_str(MASK);
        last = span.end;
    }
    out.push_str(&text[last..]);
    out
}

/// Where the credentials in each URL's userinfo in `s` are (anchor: url_credential_spans):
/// for `scheme://user:password@host` the password, for a random-looking token as the whole
/// user part the token. A plain user name (`ssh://git@host`) is no credential.
pub(super) fn url_credential_spans(s: &str) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    for (start, n) in authorities(s) {
        let authority = &s[start..start + n];
        let Some(at) = authority.rfind('@') else {
            continue;
        };
        let userinfo = &authority[..at];
        match userinfo.split_once(':') {
            Some((user, pass)) if !pass.is_empty() && !is_placeholder(pass) => {
                let from = start + user.len() + 1;
                spans.push(from..start + at);
            }
            Some(_) => {}
            None if random_enough(userinfo) => spans.push(start..start + at),
            None => {}
        }
    }
    spans
}

/// Each URL's authority in `s`: its start (after `scheme://`) and length.
fn authorities(s: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let b = s.as_bytes();
    find_all(s, "://", false).into_iter().filter_map(move |i| {
        let scheme_len = s[..i]
            .bytes()
            .rev()
            .take_while(|&c| is_scheme_char(c as char))
            .count();
        (scheme_len > 0).then(|| {
            let start = i + 3;
            (start, run(b, start, |c| !ends_authority(c)))
        })
    })
}

fn ends_authority(c: u8) -> bool {
    c.is_ascii_whitespace() || matches!(c, b'/' | b'?' | b'#' | b'"' | b'\'' | b'`' | b'<' | b'>')
}

fn ends_url(c: u8) -> bool {
    c.is_ascii_whitespace() || matches!(c, b'"' | b'\'' | b'`' | b'<' | b'>')
}

/// The password of a scheme-less `user:password@host`, as a proxy variable may hold it: a
/// whitespace-separated word with no `://` whose part before its last `@` has a `:` and no `/`
/// (so `git@host:org/repo` stays).
fn bare_spans(s: &str) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut offset = 0;
    for word in s.split(|c: char| c.is_ascii_whitespace() || c == '\'' || c == '"') {
        let start = offset;
        offset += word.len() + 1;
        if word.contains("://") {
            continue;
        }
        let Some(at) = word.rfind('@') else {
            continue;
        };
        let userinfo = &word[..at];
        if let Some((user, pass)) = userinfo.split_once(':')
            && !userinfo.contains('/')
            && !pass.is_empty()
            && !is_placeholder(pass)
        {
            let from = start + user.len() + 1;
            spans.push(from..start + at);
        }
    }
    spans
}

/// The values of secret-named query parameters in each URL of `s`.
fn query_spans(s: &str) -> Vec<Range<usize>> {
    let b = s.as_bytes();
    let mut spans = Vec::new();
    for (start, n) in authorities(s) {
        let rest = start + n;
        let end = rest + run(b, rest, |c| !ends_url(c));
        let url = &s[rest..end];
        let Some(q) = url.find('?') else {
            continue;
        };
        let query_end = url[q..].find('#').map_or(url.len(), |h| q + h);
        let mut at = rest + q + 1;
        for param in url[q + 1..query_end].split('&') {
            if let Some((name, value)) = param.split_once('=')
                && !value.is_empty()
                && is_secret_name(name)
            {
                let from = at + name.len() + 1;
                spans.push(from..from + value.len());
            }
            at += param.len() + 1;
        }
    }
    spans
}

/// The values of password-named `key=value` pairs: `password=x`, `password = 'a b'` (a quoted
/// value may escape a quote or backslash with a backslash, as libpq reads it).
fn pair_spans(s: &str) -> Vec<Range<usize>> {
    let b = s.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
        if !word(b[i]) || (i > 0 && word(b[i - 1])) {
            i += 1;
            continue;
        }
        let n = run(b, i, word);
        let name = &s[i..i + n];
        let mut j = i + n;
        j += run(b, j, |c| c == b' ');
        if b.get(j) != Some(&b'=') || !is_password_name(name) || !is_secret_name(name) {
            i += n;
            continue;
        }
        j += 1;
        j += run(b, j, |c| c == b' ');
        let (from, to) = if b.get(j) == Some(&b'\'') {
            let mut k = j + 1;
            while k < b.len() && b[k] != b'\'' {
                k += if b[k] == b'\\' { 2 } else { 1 };
            }
            (j + 1, k.min(b.len()))
        } else {
            (
                j,
                j + run(b, j, |c| !c.is_ascii_whitespace() && c != b'&' && c != b'#'),
            )
        };
        if to > from && !is_placeholder(&s[from..to]) {
            spans.push(from..to);
        }
        i = to.max(i + n);
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_keeps_the_user_and_masks_the_password_or_token() {
        let cases = [
            (
                "cloning http://user:hunter2@host/r.git failed",
                "cloning http://user:***@host/r.git failed",
            ),
            (
                "https://ghp_a8F3kQ9zL2mX7vR4tY1uW6e@github.com/o/r",
                "https://***@github.com/o/r",
            ),
            (
                "ssh://git@host/r.git and git://h/r",
                "ssh://git@host/r.git and git://h/r",
            ),
            (
                "a http://u:pw1@h b https://v:s3cret@i c",
                "a http://u:***@h b https://v:***@i c",
            ),
            (
                "http://user:${PASSWORD}@host",
                "http://user:${PASSWORD}@host",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(redact_url_credentials(text), want, "{text}");
            assert_eq!(
                url_credential_spans(text).is_empty(),
                text == want,
                "{text}"
            );
        }
    }

    #[test]
    fn every_dsn_form_loses_its_password() {
        let cases = [
            ("postgres://u:s3cret@db/x", "postgres://u:***@db/x"),
            (
                "--store postgres://u@db:5432/x?password=s3cret&sslmode=require: bad",
                "--store postgres://u@db:5432/x?password=***&sslmode=require: bad",
            ),
            (
                "postgresql://db/x?sslpassword=k3y#frag",
                "postgresql://db/x?sslpassword=***#frag",
            ),
            ("https://h/p?token=abc&x=1", "https://h/p?token=***&x=1"),
            (
                "--store 'host=db user=u password=s3cret dbname=x'",
                "--store 'host=db user=u password=*** dbname=x'",
            ),
            (
                "host=db password = 'two words \\' quoted' port=5432",
                "host=db password = '***' port=5432",
            ),
            ("PGPASSWORD=hunter2 psql", "PGPASSWORD=*** psql"),
            (
                "sort_key=created_at and password_file=/x",
                "sort_key=created_at and password_file=/x",
            ),
            ("http://h/?x=1&y=2", "http://h/?x=1&y=2"),
            (
                "unparseable u:pw9@proxy:3128",
                "unparseable u:***@proxy:3128",
            ),
            ("git@github.com:o/r.git", "git@github.com:o/r.git"),
        ];
        for (text, want) in cases {
            assert_eq!(redact_url_credentials(text), want, "{text}");
        }
    }
}
