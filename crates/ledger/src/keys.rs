//! Orgs and API keys: creation, listing, revocation, and the per-request key check.
//!
//! A key is shown once and stored only as its SHA-256, so the file never holds a usable secret.

use serde::Serialize;

use super::db::{Location, require_ledger, with_store};
use super::errors::{ApiError, LedgerError};
use super::sql::{Sql, args};
use metabob_process::clock::now_ms;
use metabob_process::random::random_hex;
use metabob_wire::row::MAX_TIME_MS;
use metabob_wire::text::{parse_duration, parse_rfc3339_ms, rfc3339_ms, sha256_hex};

pub const KEY_PREFIX: &str = "mb_live_";
pub const DEFAULT_ORG: &str = "default";

/// A key's permissions. `read` is implied by every key that authenticates; `write` (or `admin`)
/// is what write shapes need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Read,
    Write,
    Admin,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }
}

/// Parses `read,write,admin` (any subset, any order); the result is sorted and deduplicated.
pub fn parse_scopes(text: &str) -> Result<Vec<Scope>, String> {
    let mut scopes = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        scopes.push(match part {
            "read" => Scope::Read,
            "write" => Scope::Write,
            "admin" => Scope::Admin,
            other => {
                return Err(format!(
                    "unknown scope {other:?}; scopes are read, write, admin"
                ));
            }
        });
    }
    scopes.sort();
    scopes.dedup();
    if scopes.is_empty() {
        return Err("no scopes given; pass a subset of read,write,admin".into());
    }
    Ok(scopes)
}

fn scopes_text(scopes: &[Scope]) -> String {
    scopes
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// The key a request carried, once checked: who it is and what it may do.
#[derive(Clone, Debug)]
pub struct KeyIdentity {
    pub key_id: String,
    pub org_id: String,
    pub org_name: String,
    pub scopes: Vec<Scope>,
    pub label: Option<String>,
    /// When the key stops working, epoch milliseconds; `None`: never.
    pub expires_at: Option<i64>,
}

impl KeyIdentity {
    pub fn can_write(&self) -> bool {
        self.scopes
            .iter()
            .any(|s| matches!(s, Scope::Write | Scope::Admin))
    }

    /// Whether the key's expiry has passed at `now_ms`.
    pub fn expired_at(&self, now_ms: i64) -> bool {
        self.expires_at.is_some_and(|at| at <= now_ms)
    }
}

/// How long a checked key is believed without asking the store again: a revocation by `ledger
/// key revoke` (another process, or another replica's store client) holds on every replica
/// within one second (anchor: KEY_CACHE_TTL).
pub const KEY_CACHE_TTL: std::time::Duration = std::time::Duration::from_millis(900);
/// The most keys believed at once; a full cache is emptied, so a flood of keys costs reads,
/// never memory.
const KEY_CACHE_ENTRIES: usize = 4096;

/// Keys checked lately, by their hash (never the secret), so a busy cell's requests skip the
/// store's key check (anchor: KeyCache). Only a key the store accepted is kept: an unknown or
/// revoked one is asked again every time. A key's expiry is held against the clock at every
/// use, not only when it was believed, so a believed key stops the moment it expires, on every
/// replica alike.
#[derive(Default)]
pub struct KeyCache(
    std::sync::Mutex<std::collections::HashMap<String, (KeyIdentity, std::time::Instant)>>,
);

impl KeyCache {
    /// The key's identity if it was accepted less than [`KEY_CACHE_TTL`] ago and has not
    /// expired since; an expired one is left to the store's check, which refuses it.
    pub fn get(&self, raw_key: &str) -> Option<KeyIdentity> {
        let hash = sha256_hex(raw_key.trim().as_bytes());
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&hash)
            .filter(|(k, at)| at.elapsed() < KEY_CACHE_TTL && !k.expired_at(now_ms()))
            .map(|(k, _)| k.clone())
    }

    /// Believes `key` from now, as the store just accepted it.
    pub fn put(&self, raw_key: &str, key: &KeyIdentity) {
        let hash = sha256_hex(raw_key.trim().as_bytes());
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= KEY_CACHE_ENTRIES {
            map.retain(|_, (_, at)| at.elapsed() < KEY_CACHE_TTL);
            if map.len() >= KEY_CACHE_ENTRIES {
                map.clear();
            }
        }
        map.insert(hash, (key.clone(), std::time::Instant::now()));
    }
}

/// Checks a presented key against the store: every request, unless [`KeyCache`] accepted it
/// less than [`KEY_CACHE_TTL`] ago.
// anchor: authenticate
pub fn authenticate(conn: Sql<'_>, key: &str) -> Result<KeyIdentity, ApiError> {
    let key = key.trim();
    if !key.starts_with(KEY_PREFIX) {
        return Err(ApiError::KeyRejected("unknown key"));
    }
    // Cached: every request asks it.
    let row = conn.query_opt(
        "SELECT k.id, k.org_id, o.name, k.scopes, k.label, k.revoked_at, k.expires_at
         FROM api_keys k JOIN orgs o ON o.id = k.org_id WHERE k.key_hash = ?1",
        args![sha256_hex(key.as_bytes())],
        |r| {
            Ok((
                r.get::<String>(0)?,
                r.get::<String>(1)?,
                r.get::<String>(2)?,
                r.get::<String>(3)?,
                r.get::<Option<String>>(4)?,
                r.get::<Option<i64>>(5)?,
                r.get::<Option<i64>>(6)?,
            ))
        },
    )?;
    let Some((key_id, org_id, org_name, scopes, label, revoked, expires_at)) = row else {
        return Err(ApiError::KeyRejected("unknown key"));
    };
    if revoked.is_some() {
        return Err(ApiError::KeyRejected("key revoked"));
    }
    let scopes =
        parse_scopes(&scopes).map_err(|e| ApiError::Internal(format!("stored scopes: {e}")))?;
    let key = KeyIdentity {
        key_id,
        org_id,
        org_name,
        scopes,
        label,
        expires_at,
    };
    if key.expired_at(now_ms()) {
        return Err(ApiError::KeyRejected("key expired"));
    }
    Ok(key)
}

/// A freshly minted key: the only moment its secret exists outside the caller's hands.
#[derive(Clone, Debug, Serialize)]
pub struct CreatedKey {
    pub key_id: String,
    pub key: String,
    pub org: String,
    pub org_id: String,
    pub scopes: Vec<Scope>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// RFC 3339; absent for a key that never expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

fn ensure_org(conn: Sql<'_>, name: &str) -> Result<String, ApiError> {
    if let Some(id) = conn.query_opt("SELECT id FROM orgs WHERE name = ?1", args![name], |r| {
        r.get(0)
    })? {
        return Ok(id);
    }
    let id = format!("org_{}", random_hex(6));
    conn.execute(
        "INSERT INTO orgs (id, name, created_at) VALUES (?1, ?2, ?3)",
        args![id, name, now_ms()],
    )?;
    Ok(id)
}

/// Creates a key in org `org` (creating the org when missing), inside the caller's transaction;
/// it stops working at `expires_at` (epoch milliseconds) when one is given.
// anchor: create_key_in
pub fn create_key_in(
    conn: Sql<'_>,
    org: &str,
    scopes: &[Scope],
    label: Option<&str>,
    expires_at: Option<i64>,
) -> Result<CreatedKey, ApiError> {
    let tx = conn;
    let org_id = ensure_org(tx, org)?;
    let key = format!("{KEY_PREFIX}{}", random_hex(16));
    let key_id = format!("key_{}", random_hex(6));
    tx.execute(
        "INSERT INTO api_keys (id, org_id, key_hash, scopes, label, created_at, expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        args![
            key_id,
            org_id,
            sha256_hex(key.as_bytes()),
            scopes_text(scopes),
            label,
            now_ms(),
            expires_at
        ],
    )?;
    Ok(CreatedKey {
        key_id,
        key,
        org: org.to_string(),
        org_id,
        scopes: scopes.to_vec(),
        label: label.map(str::to_string),
        expires_at: expires_at.map(rfc3339_ms),
    })
}

/// What `ledger key create` was asked for, as given on the command line.
#[derive(Clone, Debug, Default)]
pub struct KeyRequest {
    pub org: String,
    /// Comma-separated scopes.
    pub scopes: String,
    pub label: Option<String>,
    /// `--expires-in`: a duration from now, as people write it (`24h`, `7days`).
    pub expires_in: Option<String>,
    /// `--expires-at`: an RFC 3339 time in UTC.
    pub expires_at: Option<String>,
    /// `--init`: make a new ledger when the data directory has none.
    pub init: bool,
}

/// When a key asked for with `expires_in` or `expires_at` (at most one) stops working, in epoch
/// milliseconds from `now`; `None`: never. An unreadable value, or one not after `now`, is
/// refused in one line naming the flag (anchor: key-expiry).
pub fn parse_expiry(
    expires_in: Option<&str>,
    expires_at: Option<&str>,
    now: i64,
) -> Result<Option<i64>, LedgerError> {
    let usage = |text: String| Err(LedgerError::Usage(text));
    let (flag, given, at) = match (expires_in, expires_at) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return usage("give --expires-in or --expires-at, not both".into());
        }
        (Some(text), None) => {
            let Some(d) = parse_duration(text) else {
                return usage(format!(
                    "--expires-in {text:?}: not a duration; write it as 90s, 30m, 24h or 7days"
                ));
            };
            let at = i64::try_from(d.as_millis())
                .ok()
                .and_then(|ms| now.checked_add(ms));
            ("--expires-in", text, at)
        }
        (None, Some(text)) => {
            let Some(at) = parse_rfc3339_ms(text.trim()) else {
                return usage(format!(
                    "--expires-at {text:?}: not an RFC 3339 time in UTC; write it as \
                     2030-01-31T18:00:00Z"
                ));
            };
            ("--expires-at", text, Some(at))
        }
    };
    match at {
        Some(at) if at > now && at <= MAX_TIME_MS => Ok(Some(at)),
        Some(at) if at <= now => usage(format!(
            "{flag} {given:?}: that is not in the future (it is now {}); a key must expire later",
            rfc3339_ms(now)
        )),
        _ => usage(format!(
            "{flag} {given:?}: past the year 9999; give a nearer expiry, or none for a key that \
             never expires"
        )),
    }
}

/// The refusal's way out when `key create` finds no ledger.
const OR_INIT: &str = ", or --init to make a new ledger there";

/// `ledger key create`: opens the store directly, so it works with or without a running server.
/// A SQLite data directory with no ledger is refused unless `init` asks for a new one.
pub fn create_key(at: &Location, req: &KeyRequest) -> Result<CreatedKey, LedgerError> {
    let org = req.org.trim();
    if org.is_empty() {
        return Err(LedgerError::Usage("--org must not be empty".into()));
    }
    let scopes = parse_scopes(&req.scopes).map_err(LedgerError::Usage)?;
    let expires_at = parse_expiry(
        req.expires_in.as_deref(),
        req.expires_at.as_deref(),
        now_ms(),
    )?;
    if !req.init {
        require_ledger(at, OR_INIT)?;
    }
    let label = req.label.as_deref();
    with_store(at, |conn| {
        create_key_in(conn, org, &scopes, label, expires_at)
    })
}

/// One row of `ledger key list`; never the key itself, which is not stored.
#[derive(Clone, Debug, Serialize)]
pub struct KeyInfo {
    pub key_id: String,
    pub org: String,
    pub org_id: String,
    pub scopes: Vec<String>,
    pub label: Option<String>,
    pub created_at: String,
    pub revoked: bool,
    pub revoked_at: Option<String>,
    /// When the key stops working, RFC 3339; `null` for a key that never expires.
    pub expires_at: Option<String>,
    /// Whether `expires_at` has passed.
    pub expired: bool,
}

impl KeyInfo {
    /// What the key is now, as `key list` shows it: `revoked`, `expired` or `active`.
    pub fn state(&self) -> &'static str {
        if self.revoked {
            "revoked"
        } else if self.expired {
            "expired"
        } else {
            "active"
        }
    }
}

pub fn list_keys(at: &Location) -> Result<Vec<KeyInfo>, LedgerError> {
    require_ledger(at, "")?;
    let now = now_ms();
    with_store(at, |conn| {
        conn.query(
            "SELECT k.id, o.name, k.org_id, k.scopes, k.label, k.created_at, k.revoked_at,
                    k.expires_at
         FROM api_keys k JOIN orgs o ON o.id = k.org_id ORDER BY k.created_at, k.id",
            &[],
            |r| {
                let scopes: String = r.get(3)?;
                let revoked_at: Option<i64> = r.get(6)?;
                let expires_at: Option<i64> = r.get(7)?;
                Ok(KeyInfo {
                    key_id: r.get(0)?,
                    org: r.get(1)?,
                    org_id: r.get(2)?,
                    scopes: scopes.split(',').map(str::to_string).collect(),
                    label: r.get(4)?,
                    created_at: rfc3339_ms(r.get(5)?),
                    revoked: revoked_at.is_some(),
                    revoked_at: revoked_at.map(rfc3339_ms),
                    expires_at: expires_at.map(rfc3339_ms),
                    expired: expires_at.is_some_and(|at| at <= now),
                })
            },
        )
    })
}

/// Outcome of `ledger key revoke`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revoked {
    Now,
    Already,
}

pub fn revoke_key(at: &Location, key_id: &str) -> Result<Revoked, LedgerError> {
    require_ledger(at, "")?;
    let revoked = with_store(at, |conn| {
        let revoked: Option<Option<i64>> = conn.query_opt(
            "SELECT revoked_at FROM api_keys WHERE id = ?1",
            args![key_id],
            |r| r.get(0),
        )?;
        if let Some(None) = revoked {
            conn.execute(
                "UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1",
                args![key_id, now_ms()],
            )?;
        }
        Ok(revoked)
    })?;
    match revoked {
        None => Err(LedgerError::UnknownKey {
            key_id: key_id.to_string(),
        }),
        Some(Some(_)) => Ok(Revoked::Already),
        Some(None) => Ok(Revoked::Now),
    }
}

/// True when the file has no org yet: the first start, which mints the admin key.
pub fn has_no_orgs(conn: Sql<'_>) -> Result<bool, ApiError> {
    let n: i64 = conn.value("SELECT count(*) FROM orgs", &[])?;
    Ok(n == 0)
}

/// The first `limit` orgs by name, as (id, name).
pub fn orgs(conn: Sql<'_>, limit: i64) -> Result<Vec<(String, String)>, ApiError> {
    conn.query(
        "SELECT id, name FROM orgs ORDER BY name LIMIT ?1",
        args![limit],
        |r| Ok((r.get::<String>(0)?, r.get::<String>(1)?)),
    )
}
