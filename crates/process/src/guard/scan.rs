//! The text scanners behind the outgoing guard: variable-name rules, placeholder and
//! randomness tests, and the credential patterns. Small hand-written scanners rather than a
//! regex engine: each pattern is a fixed prefix plus a character class and a length, and the
//! few context rules (header names, assignments) read better as code than as expressions.

use std::collections::HashMap;
use std::fmt;

/// What a refused string looked like. `Display` is the token that appears inside
/// `outgoing_secret(<kind>, <field>)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretKind {
    /// A value the guard knows to be secret (the attachment key, a secret-named variable).
    KnownSecret,
    PrivateKey,
    AwsAccessKey,
    GithubToken,
    GitlabToken,
    NpmToken,
    SlackToken,
    GoogleApiKey,
    StripeKey,
    /// `sk-…` keys in the style of OpenAI and Anthropic.
    SkApiKey,
    MetabobKey,
    Jwt,
    AuthorizationHeader,
    Cookie,
    UrlCredentials,
    ConfigAssignment,
}

impl fmt::Display for SecretKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SecretKind::KnownSecret => "known_secret",
            SecretKind::PrivateKey => "private_key",
            SecretKind::AwsAccessKey => "aws_access_key",
            SecretKind::GithubToken => "github_token",
            SecretKind::GitlabToken => "gitlab_token",
            SecretKind::NpmToken => "npm_token",
            SecretKind::SlackToken => "slack_token",
            SecretKind::GoogleApiKey => "google_api_key",
            SecretKind::StripeKey => "stripe_key",
            SecretKind::SkApiKey => "sk_api_key",
            SecretKind::MetabobKey => "metabob_key",
            SecretKind::Jwt => "jwt",
            SecretKind::AuthorizationHeader => "authorization_header",
            SecretKind::Cookie => "cookie",
            SecretKind::UrlCredentials => "url_credentials",
            SecretKind::ConfigAssignment => "config_assignment",
        })
    }
}

/// Minimum Shannon entropy, in bits per character, for a value to read as random.
pub const MIN_ENTROPY: f64 = 3.0;
/// Minimum length of a known secret value and of a header or cookie token.
pub const MIN_SECRET_LEN: usize = 16;

/// AWS's documented example credentials: they appear in docs and tests everywhere.
const AWS_EXAMPLES: [&str; 2] = [
    "AKIAIOSFODNN7EXAMPLE",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
];

/// Shannon entropy of `s` in bits per character; 0 for the empty string.
pub fn entropy(s: &str) -> f64 {
    let mut counts: HashMap<char, usize> = HashMap::new();
    let mut n = 0usize;
    for c in s.chars() {
        *counts.entry(c).or_default() += 1;
        n += 1;
    }
    if n == 0 {
        return 0.0;
    }
    let n = n as f64;
    counts
        .values()
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// Splits a variable or key name into upper-cased words: on any non-alphanumeric character
/// and at camelCase boundaries (`apiKey` → API, KEY; `//registry/:_authToken` → …, AUTH, TOKEN).
pub fn name_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower && !cur.is_empty() {
            words.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        cur.push(c.to_ascii_uppercase());
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

const SECRET_WORDS: [&str; 6] = ["KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "PASSWD"];
/// Password words: PASS counts as a whole word only (DB_PASS, not BYPASS).
const PASSWORD_WORDS: [&str; 2] = ["PASSWORD", "PASSWD"];
/// Words that make the secret word a property of something rather than the thing itself.
const QUALIFIER_WORDS: [&str; 24] = [
    "MAX",
    "MIN",
    "NUM",
    "COUNT",
    "LIMIT",
    "LENGTH",
    "LEN",
    "TTL",
    "DAYS",
    "HOURS",
    "SECONDS",
    "EXPIRY",
    "EXPIRES",
    "EXPIRATION",
    "ROTATION",
    "SIZE",
    "TIMEOUT",
    "BUDGET",
    "TYPE",
    "ALGORITHM",
    "FORMAT",
    "USAGE",
    "INTERVAL",
    "LIFETIME",
];
/// A name ending in one of these is a location or an identifier, never a secret.
const LOCATION_SUFFIXES: [&str; 10] = [
    "PATH", "FILE", "DIR", "ID", "URL", "HOST", "PORT", "NAME", "USER", "REGION",
];

fn word_is_secret(w: &str) -> bool {
    if w == "PASS" {
        return true;
    }
    let w = w.strip_suffix('S').filter(|s| s.len() >= 3).unwrap_or(w);
    SECRET_WORDS.iter().any(|s| w == *s || w.ends_with(s))
}

/// A name that holds a secret: one of its words is (or ends in) KEY, TOKEN, SECRET, PASSWORD,
/// CREDENTIAL or PASSWD, no word qualifies it (MAX_TOKENS, TOKEN_TTL), and it does not end
/// in a location or identifier word (…_PATH, …_ID, …_URL).
pub fn is_secret_name(name: &str) -> bool {
    let words = name_words(name);
    if !words.iter().any(|w| word_is_secret(w)) {
        return false;
    }
    if words.iter().any(|w| QUALIFIER_WORDS.contains(&w.as_str())) {
        return false;
    }
    !words
        .last()
        .is_some_and(|w| LOCATION_SUFFIXES.contains(&w.as_str()))
}

/// A secret name whose value is a password: weak values still count.
pub(super) fn is_password_name(name: &str) -> bool {
    name_words(name).iter().any(|w| {
        let w = w.strip_suffix('S').filter(|s| s.len() >= 4).unwrap_or(w);
        w == "PASS" || PASSWORD_WORDS.iter().any(|p| w.ends_with(p))
    })
}

fn strip_wrapping(v: &str) -> &str {
    let v = v.trim();
    let v = v.trim_end_matches([',', ';']);
    for (open, close) in [('"', '"'), ('\'', '\''), ('`', '`'), ('[', ']')] {
        if v.len() >= 2
            && v.starts_with(open)
            && v.ends_with(close)
            && !(open == '[' && v.contains("]["))
        {
            return &v[1..v.len() - 1];
        }
    }
    v
}

const PLACEHOLDER_LITERALS: [&str; 16] = [
    "true",
    "false",
    "null",
    "none",
    "nil",
    "undefined",
    "password",
    "changeme",
    "secret",
    "redacted",
    "hidden",
    "masked",
    "dummy",
    "example",
    "placeholder",
    "...",
];

/// The masked forms that also exempt a token that matched a credential pattern: an example,
/// a masked run, an angle-bracket slot, a run of x, one repeated character.
fn is_masked(v: &str) -> bool {
    let lower = v.to_ascii_lowercase();
    if lower.contains("example") || v.contains("***") || lower.contains("xxxx") {
        return true;
    }
    if v.contains('<') && v.contains('>') {
        return true;
    }
    if v.contains('…') || v.contains("...") {
        return true;
    }
    let mut chars = v.chars();
    match chars.next() {
        Some(first) => chars.all(|c| c == first),
        None => true,
    }
}

fn is_number(v: &str) -> bool {
    let v = v.strip_prefix(['-', '+']).unwrap_or(v);
    !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == '_')
        && v.chars().any(|c| c.is_ascii_digit())
}

fn is_duration(v: &str) -> bool {
    let digits_end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    if digits_end == 0 || digits_end == v.len() {
        return false;
    }
    let unit = v[digits_end..].to_ascii_lowercase();
    [
        "ms", "s", "sec", "secs", "m", "min", "mins", "h", "hr", "hrs", "d", "w", "y", "day",
        "days", "hour", "hours", "minutes", "seconds", "weeks",
    ]
    .contains(&unit.as_str())
}

fn is_all_caps_name(v: &str) -> bool {
    v.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && v.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        // A digit without an underscore reads as a shouted password (HUNTER2), not a name.
        && (v.contains('_') || !v.chars().any(|c| c.is_ascii_digit()))
}

fn is_var_reference(v: &str) -> bool {
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit())
    };
    (v.starts_with("${") && v.ends_with('}'))
        || v.strip_prefix('$').is_some_and(ident)
        || (v.len() > 2 && v.starts_with('%') && v.ends_with('%') && ident(&v[1..v.len() - 1]))
        || (v.starts_with("{{") && v.ends_with("}}"))
}

/// A value that stands in for a secret rather than being one.
pub fn is_placeholder(value: &str) -> bool {
    let v = strip_wrapping(value);
    if v.is_empty() || is_masked(v) {
        return true;
    }
    let lower = v.to_ascii_lowercase();
    lower.starts_with("your_")
        || lower.starts_with("your-")
        || lower.starts_with("your ")
        || PLACEHOLDER_LITERALS.contains(&lower.as_str())
        || is_all_caps_name(v)
        || is_var_reference(v)
        || is_number(v)
        || is_duration(v)
}

/// A filesystem path: absolute, home-relative or explicitly relative.
fn looks_like_path(v: &str) -> bool {
    v.starts_with('/')
        || v.starts_with("~/")
        || v.starts_with("./")
        || v.starts_with("../")
        || (v.len() > 2 && v.as_bytes()[1] == b':' && matches!(v.as_bytes()[2], b'\\' | b'/'))
}

/// A URL that carries no credentials in its authority.
fn is_plain_url(v: &str) -> bool {
    match v.split_once("://") {
        Some((scheme, rest)) if !scheme.is_empty() && scheme.chars().all(is_scheme_char) => {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            !authority.contains('@')
        }
        _ => false,
    }
}

/// Whether a value from a secret-named variable is worth treating as a known secret.
pub fn counts_as_known_value(value: &str) -> bool {
    let v = value.trim();
    v.chars().count() >= MIN_SECRET_LEN
        && !looks_like_path(v)
        && !is_plain_url(v)
        && !is_placeholder(v)
        && entropy(v) >= MIN_ENTROPY
}

pub(super) fn random_enough(v: &str) -> bool {
    v.chars().count() >= MIN_SECRET_LEN && entropy(v) >= MIN_ENTROPY && !is_placeholder(v)
}

pub(super) fn is_scheme_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-')
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The run of bytes from `start` that satisfy `pred`.
pub(super) fn run(s: &[u8], start: usize, pred: impl Fn(u8) -> bool) -> usize {
    s[start.min(s.len())..]
        .iter()
        .take_while(|&&b| pred(b))
        .count()
}

/// Every index where `needle` starts in `hay`, ASCII case-insensitively when asked.
pub(super) fn find_all(hay: &str, needle: &str, ci: bool) -> Vec<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    if n.is_empty() || h.len() < n.len() {
        return Vec::new();
    }
    (0..=h.len() - n.len())
        .filter(|&i| {
            if ci {
                h[i..i + n.len()].eq_ignore_ascii_case(n)
            } else {
                &h[i..i + n.len()] == n
            }
        })
        .collect()
}

/// A fixed-prefix token pattern: the prefix must start a word, the body is a run of
/// `class` bytes of at least `min` (and at most `max`, when the pattern is exact).
struct TokenPattern {
    prefixes: &'static [&'static str],
    class: fn(u8) -> bool,
    min: usize,
    max: usize,
    kind: SecretKind,
}

fn alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}
fn upper_alnum(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit()
}
fn word_dash(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}
fn word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

const TOKEN_PATTERNS: &[TokenPattern] = &[
    TokenPattern {
        prefixes: &["AKIA", "ASIA"],
        class: upper_alnum,
        min: 16,
        max: 16,
        kind: SecretKind::AwsAccessKey,
    },
    TokenPattern {
        prefixes: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
        class: alnum,
        min: 30,
        max: usize::MAX,
        kind: SecretKind::GithubToken,
    },
    TokenPattern {
        prefixes: &["github_pat_"],
        class: word,
        min: 22,
        max: usize::MAX,
        kind: SecretKind::GithubToken,
    },
    TokenPattern {
        prefixes: &["glpat-"],
        class: word_dash,
        min: 20,
        max: usize::MAX,
        kind: SecretKind::GitlabToken,
    },
    TokenPattern {
        prefixes: &["npm_"],
        class: alnum,
        min: 36,
        max: usize::MAX,
        kind: SecretKind::NpmToken,
    },
    TokenPattern {
        prefixes: &["xoxb-", "xoxa-", "xoxp-", "xoxr-", "xoxs-"],
        class: word_dash,
        min: 10,
        max: usize::MAX,
        kind: SecretKind::SlackToken,
    },
    TokenPattern {
        prefixes: &["AIza"],
        class: word_dash,
        min: 35,
        max: 35,
        kind: SecretKind::GoogleApiKey,
    },
    TokenPattern {
        prefixes: &["sk_live_", "rk_live_"],
        class: alnum,
        min: 16,
        max: usize::MAX,
        kind: SecretKind::StripeKey,
    },
    TokenPattern {
        prefixes: &["sk-"],
        class: word_dash,
        min: 32,
        max: usize::MAX,
        kind: SecretKind::SkApiKey,
    },
    TokenPattern {
        prefixes: &["mb_live_"],
        class: alnum,
        min: 16,
        max: usize::MAX,
        kind: SecretKind::MetabobKey,
    },
];

fn scan_token_patterns(s: &str) -> Option<SecretKind> {
    let b = s.as_bytes();
    for p in TOKEN_PATTERNS {
        for prefix in p.prefixes {
            for i in find_all(s, prefix, false) {
                if i > 0 && (is_word_byte(b[i - 1]) || b[i - 1] == b'-') {
                    continue;
                }
                let body_start = i + prefix.len();
                let n = run(b, body_start, p.class);
                if n < p.min || n > p.max {
                    continue;
                }
                let token = &s[i..body_start + n];
                let body = &s[body_start..body_start + n];
                if AWS_EXAMPLES.contains(&token) || is_masked(body) {
                    continue;
                }
                // Long free-form bodies (sk-…) must also look random, so a kebab-case
                // identifier that happens to start with sk- is not a key.
                if p.kind == SecretKind::SkApiKey
                    && (entropy(body) < MIN_ENTROPY || !body.bytes().any(|c| c.is_ascii_digit()))
                {
                    continue;
                }
                return Some(p.kind);
            }
        }
    }
    None
}

fn b64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')
}

/// `-----BEGIN … PRIVATE KEY-----` followed by a key body; a header named in prose is not a key.
fn scan_private_key(s: &str) -> bool {
    for i in find_all(s, "-----BEGIN ", false) {
        let rest = &s[i + 11..];
        let Some(end) = rest.find("-----") else {
            continue;
        };
        let label = &rest[..end];
        if label.contains('\n') || !label.contains("PRIVATE KEY") {
            continue;
        }
        let body = &rest[end + 5..];
        let body = body.split("-----END").next().unwrap_or(body);
        let b64_chars = body.bytes().filter(|&c| b64(c)).count();
        if b64_chars >= 40 && !is_masked(body.trim()) {
            return true;
        }
    }
    false
}

fn b64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Three base64url segments whose first (the header) starts `eyJ`, the encoding of `{"`.
fn scan_jwt(s: &str) -> bool {
    let b = s.as_bytes();
    for i in find_all(s, "eyJ", false) {
        if i > 0 && b64url(b[i - 1]) {
            continue;
        }
        let h = run(b, i, b64url);
        if h < 10 || b.get(i + h) != Some(&b'.') {
            continue;
        }
        let p_start = i + h + 1;
        let p = run(b, p_start, b64url);
        if p < 10 || b.get(p_start + p) != Some(&b'.') {
            continue;
        }
        let sig = run(b, p_start + p + 1, b64url);
        if sig >= 16 {
            return true;
        }
    }
    false
}

fn header_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'+' | b'/' | b'=' | b'-' | b':')
}

/// `Authorization: <scheme> <credential>` (any quoting), and a bare `Bearer <token>`.
fn scan_authorization(s: &str) -> bool {
    let b = s.as_bytes();
    let token_at = |start: usize| -> &str {
        let n = run(b, start, header_token_byte);
        &s[start..start + n]
    };
    let skip = |mut i: usize, set: &[u8]| {
        while i < b.len() && set.contains(&b[i]) {
            i += 1;
        }
        i
    };
    for i in find_all(s, "authorization", true) {
        let mut j = skip(i + 13, b"\"' ");
        if j >= b.len() || !matches!(b[j], b':' | b'=') {
            continue;
        }
        j = skip(j + 1, b"\"' \t");
        let first = token_at(j);
        let scheme = ["bearer", "basic", "token", "digest", "apikey", "bot"]
            .iter()
            .any(|sch| first.eq_ignore_ascii_case(sch));
        let cred = if scheme {
            token_at(skip(j + first.len(), b" \t"))
        } else {
            first
        };
        if random_enough(cred) {
            return true;
        }
    }
    for i in find_all(s, "bearer ", true) {
        if i > 0 && is_word_byte(b[i - 1]) {
            continue;
        }
        if random_enough(token_at(skip(i + 7, b" \t"))) {
            return true;
        }
    }
    false
}

/// `Cookie:` and `Set-Cookie:` headers whose values look random.
fn scan_cookie(s: &str) -> bool {
    let b = s.as_bytes();
    for i in find_all(s, "cookie", true) {
        if i > 0 && b[i - 1].is_ascii_alphanumeric() {
            continue;
        }
        let mut j = i + 6;
        while j < b.len() && matches!(b[j], b'"' | b'\'' | b' ') {
            j += 1;
        }
        if j >= b.len() || b[j] != b':' {
            continue;
        }
        let line_end = s[j..].find('\n').map_or(s.len(), |n| j + n);
        for pair in s[j + 1..line_end].split(';') {
            if let Some((_, value)) = pair.split_once('=') {
                let value = value
                    .trim()
                    .trim_matches(|c: char| c == '"' || c == '\'' || c == ',');
                let value = value.split_whitespace().next().unwrap_or("");
                if random_enough(value) {
                    return true;
                }
            }
        }
    }
    false
}

/// `scheme://user:password@host`, or a random-looking token as the whole user part.
fn scan_url_credentials(s: &str) -> bool {
    !super::redact::url_credential_spans(s).is_empty()
}

fn name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// Whether an assigned value counts for this name. A password counts however weak; a key,
/// token or secret counts when it could be a credential: not a placeholder, and either random
/// enough or at least 8 characters mixing in digits or symbols (a bare word or snake_case
/// identifier, like `sort_key: created_at`, is a reference to something, not a credential).
fn assigned_value_counts(name: &str, value: &str) -> bool {
    if is_placeholder(value) || AWS_EXAMPLES.contains(&value) {
        return false;
    }
    if is_password_name(name) {
        return true;
    }
    let plain_identifier = value
        .bytes()
        .all(|c| c.is_ascii_alphabetic() || matches!(c, b'_' | b'-' | b'.'));
    random_enough(value) || (value.len() >= 8 && !plain_identifier)
}

/// `NAME=value`, `NAME: value` and `"name": "value"` where NAME is secret-named.
/// An unquoted `name: value` counts only when the value ends its line, so that prose
/// such as "Key: this breaks when…" is not read as configuration.
fn scan_assignment(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if !name_byte(b[i]) || (i > 0 && name_byte(b[i - 1])) {
            i += 1;
            continue;
        }
        let n = run(b, i, name_byte);
        let name = &s[i..i + n];
        let mut j = i + n;
        // Closing quote of a quoted key, then spaces.
        if j < b.len() && matches!(b[j], b'"' | b'\'') {
            j += 1;
        }
        while j < b.len() && matches!(b[j], b' ' | b'\t') {
            j += 1;
        }
        let sep = b.get(j).copied();
        let is_sep = match sep {
            Some(b'=') => b.get(j + 1) != Some(&b'='),
            Some(b':') => b.get(j + 1) != Some(&b':') && b.get(j + 1) != Some(&b'/'),
            _ => false,
        };
        if !is_sep || !is_secret_name(name) {
            i += n.max(1);
            continue;
        }
        let mut k = j + 1;
        while k < b.len() && matches!(b[k], b' ' | b'\t') {
            k += 1;
        }
        let (value, end, quoted) = match b.get(k) {
            Some(&q @ (b'"' | b'\'' | b'`')) => {
                let close = s[k + 1..].find(q as char).map_or(s.len(), |m| k + 1 + m);
                (&s[k + 1..close], close, true)
            }
            // A `${VAR}` / `${{ expr }}` reference runs to its closing brace.
            _ if s[k..].starts_with("${") => {
                let close = s[k..].find('}').map_or(s.len(), |m| k + m + 1);
                let close = if s[close..].starts_with('}') {
                    close + 1
                } else {
                    close
                };
                (&s[k..close], close, false)
            }
            _ => {
                let m = run(b, k, |c| {
                    !c.is_ascii_whitespace() && !matches!(c, b',' | b';' | b')' | b'}' | b']')
                });
                (&s[k..k + m], k + m, false)
            }
        };
        let line_rest = s[end.min(s.len())..].split('\n').next().unwrap_or("");
        let ends_line = {
            let r = line_rest.trim();
            r.is_empty() || r.starts_with('#') || r == "," || r == ";"
        };
        let considered = sep == Some(b'=') || quoted || ends_line;
        if considered && !value.is_empty() && assigned_value_counts(name, value) {
            return true;
        }
        i = end.max(i + 1);
    }
    false
}

/// The first credential pattern found in `s`, in a fixed order.
pub fn scan_patterns(s: &str) -> Option<SecretKind> {
    if scan_private_key(s) {
        return Some(SecretKind::PrivateKey);
    }
    if let Some(kind) = scan_token_patterns(s) {
        return Some(kind);
    }
    if scan_jwt(s) {
        return Some(SecretKind::Jwt);
    }
    if scan_authorization(s) {
        return Some(SecretKind::AuthorizationHeader);
    }
    if scan_cookie(s) {
        return Some(SecretKind::Cookie);
    }
    if scan_url_credentials(s) {
        return Some(SecretKind::UrlCredentials);
    }
    if scan_assignment(s) {
        return Some(SecretKind::ConfigAssignment);
    }
    None
}

#[cfg(test)]
mod tests;
