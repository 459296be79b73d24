//! Known secrets: the values the guard refuses wherever they appear, gathered from the
//! environment snapshot and from credential files on this machine. The files are read
//! locally, parsed into values, cached by (path, modification time, length), and never sent.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

use super::scan::{counts_as_known_value, is_secret_name};
use crate::env::Env;

/// The attachment key variables; their value counts from this length on, random or not.
pub const ATTACHMENT_KEY_VARS: [&str; 2] = ["METABOB_API_KEY", "SUBSTRATE_API_KEY"];
pub const ATTACHMENT_KEY_MIN_LEN: usize = 12;

/// Files in the workspace root that commonly hold credentials.
// anchor: workspace_secret_files
pub const WORKSPACE_FILES: [&str; 7] = [
    ".env",
    ".env.local",
    ".env.development",
    ".env.production",
    ".env.test",
    ".npmrc",
    ".pypirc",
];

/// Files under the user's home that commonly hold credentials.
pub const HOME_FILES: [&str; 4] = [".netrc", ".aws/credentials", ".npmrc", ".pypirc"];

#[derive(Clone)]
struct CacheEntry {
    mtime: SystemTime,
    len: u64,
    values: Vec<String>,
}

/// Process-wide: every guard built in this process shares one parse per file version.
fn cache() -> &'static Mutex<HashMap<PathBuf, CacheEntry>> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, CacheEntry>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The secret values in one file, from the cache when the file has not changed.
/// A missing or unreadable file holds none.
fn file_values(path: &Path) -> Vec<String> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Vec::new();
    };
    if !meta.is_file() {
        return Vec::new();
    }
    let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    let len = meta.len();
    {
        let guard = cache().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = guard.get(path)
            && e.mtime == mtime
            && e.len == len
        {
            return e.values.clone();
        }
    }
    // A credentials file is small; a huge or endless one is read as holding nothing.
    let Ok(text) = crate::files::read_bounded(path, 1 << 20) else {
        return Vec::new();
    };
    let is_netrc = path.file_name().is_some_and(|n| n == ".netrc");
    let values = if is_netrc {
        netrc_values(&text)
    } else {
        assignment_values(&text)
    };
    cache().lock().unwrap_or_else(|p| p.into_inner()).insert(
        path.to_path_buf(),
        CacheEntry {
            mtime,
            len,
            values: values.clone(),
        },
    );
    values
}

fn unquote(v: &str) -> &str {
    let v = v.trim();
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return &v[1..v.len() - 1];
        }
    }
    // An unquoted value ends at an inline comment.
    v.split(" #").next().unwrap_or(v).trim()
}

/// `NAME=value` / `name = value` / `name: value` lines (dotenv, npmrc, INI files such as
/// .pypirc and .aws/credentials): the values of secret-named entries that count.
pub(crate) fn assignment_values(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty()
            || line.starts_with('#')
            || line.starts_with(';')
            || line.starts_with('[')
        {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let split = match (line.find('='), line.find(':')) {
            // npmrc keys contain ':' (`//host/:_authToken=…`): '=' wins when present.
            (Some(e), _) => Some(e),
            (None, Some(c)) => Some(c),
            (None, None) => None,
        };
        let Some(at) = split else { continue };
        let (name, value) = (line[..at].trim(), unquote(&line[at + 1..]));
        if is_secret_name(name) && counts_as_known_value(value) {
            out.push(value.to_string());
        }
    }
    out
}

/// ~/.netrc: the values after `password` and `login` (a login is often a token).
pub(crate) fn netrc_values(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if (w == "password" || w == "login")
            && let Some(v) = words.next()
            && counts_as_known_value(v)
        {
            out.push(v.to_string());
        }
    }
    out
}

/// Every known secret for this environment and workspace, longest first, without repeats.
pub(crate) fn collect(env: &Env, workspace: Option<&Path>) -> Vec<String> {
    let mut values: Vec<String> = Vec::new();
    for var in ATTACHMENT_KEY_VARS {
        if let Some(v) = env.get(var).map(str::trim)
            && v.chars().count() >= ATTACHMENT_KEY_MIN_LEN
        {
            values.push(v.to_string());
        }
    }
    for (name, value) in env.vars() {
        if is_secret_name(name) && counts_as_known_value(value) {
            values.push(value.trim().to_string());
        }
    }
    if let Some(ws) = workspace {
        for f in WORKSPACE_FILES {
            values.extend(file_values(&ws.join(f)));
        }
    }
    if let Some(home) = env.home() {
        for f in HOME_FILES {
            values.extend(file_values(&home.join(f)));
        }
    }
    values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    values.dedup();
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotenv_ini_and_npmrc_lines() {
        let text = "# comment\nexport GITHUB_TOKEN=\"Qm9vbGVhbkFsZ2VicmExMjM0\"\nMAX_TOKENS=4096\nDATABASE_URL=postgres://db/x\n[default]\naws_secret_access_key = Zq8/Tm1pLk3vW9xYb2Rn5sHc7JdF0gAe\n//registry.npmjs.org/:_authToken=npm_Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6\nAPI_KEY=YOUR_API_KEY_HERE\n";
        let v = assignment_values(text);
        assert_eq!(
            v,
            [
                "Qm9vbGVhbkFsZ2VicmExMjM0",
                "Zq8/Tm1pLk3vW9xYb2Rn5sHc7JdF0gAe",
                "npm_Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
            ]
        );
    }

    #[test]
    fn netrc_tokens() {
        let v = netrc_values(
            "machine api.github.com\n  login ghp_R4nd0mT0kenValue123456789abcdefXYZ\n  password x-oauth-basic\nmachine h login bob password Vx9#kq2!Lm4@Zp8$",
        );
        assert_eq!(
            v,
            ["ghp_R4nd0mT0kenValue123456789abcdefXYZ", "Vx9#kq2!Lm4@Zp8$"]
        );
    }
}
