//! Orgs and API keys: creation, listing, revocation, and the per-request key check.
//!
//! A key is shown once and stored only as its SHA-256, so the file never holds a usable secret.

use serde::Serialize;

use super::db::{Location, with_store};
use super::errors::{ApiError, LedgerError};
use super::sql::{Sql, args};
use metabob_wire::util::{now_ms, random_hex, rfc3339_ms, sha256_hex};

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
}

impl KeyIdentity {
    pub fn can_write(&self) -> bool {
        self.scopes
            .iter()
            .any(|s| matches!(s, Scope::Write | Scope::Admin))
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
/// revoked one is asked again every time.
#[derive(Default)]
pub struct KeyCache(
    std::sync::Mutex<std::collections::HashMap<String, (KeyIdentity, std::time::Instant)>>,
);

impl KeyCache {
    /// The key's identity if it was accepted less than [`KEY_CACHE_TTL`] ago.
    pub fn get(&self, raw_key: &str) -> Option<KeyIdentity> {
        let hash = sha256_hex(raw_key.trim().as_bytes());
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&hash)
            .filter(|(_, at)| at.elapsed() < KEY_CACHE_TTL)
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
        "SELECT k.id, k.org_id, o.name, k.scopes, k.label, k.revoked_at
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
            ))
        },
    )?;
    let Some((key_id, org_id, org_name, scopes, label, revoked)) = row else {
        return Err(ApiError::KeyRejected("unknown key"));
    };
    if revoked.is_some() {
        return Err(ApiError::KeyRejected("key revoked"));
    }
    let scopes =
        parse_scopes(&scopes).map_err(|e| ApiError::Internal(format!("stored scopes: {e}")))?;
    Ok(KeyIdentity {
        key_id,
        org_id,
        org_name,
        scopes,
        label,
    })
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

/// Creates a key in org `org` (creating the org when missing), inside the caller's transaction.
// anchor: create_key_in
pub fn create_key_in(
    conn: Sql<'_>,
    org: &str,
    scopes: &[Scope],
    label: Option<&str>,
) -> Result<CreatedKey, ApiError> {
    let tx = conn;
    let org_id = ensure_org(tx, org)?;
    let key = format!("{KEY_PREFIX}{}", random_hex(16));
    let key_id = format!("key_{}", random_hex(6));
    tx.execute(
        "INSERT INTO api_keys (id, org_id, key_hash, scopes, label, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        args![key_id, org_id, sha256_hex(key.as_bytes()), scopes_text(scopes), label, now_ms()],
    )?;
    Ok(CreatedKey {
        key_id,
        key,
        org: org.to_string(),
        org_id,
        scopes: scopes.to_vec(),
        label: label.map(str::to_string),
    })
}

/// `ledger key create`: opens the store directly, so it works with or without a running server.
pub fn create_key(
    at: &Location,
    org: &str,
    scopes: &str,
    label: Option<&str>,
) -> Result<CreatedKey, LedgerError> {
    let org = org.trim();
    if org.is_empty() {
        return Err(LedgerError::Usage("--org must not be empty".into()));
    }
    let scopes = parse_scopes(scopes).map_err(LedgerError::Usage)?;
    with_store(at, |conn| create_key_in(conn, org, &scopes, label))
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
}

pub fn list_keys(at: &Location) -> Result<Vec<KeyInfo>, LedgerError> {
    with_store(at, |conn| {
        conn.query(
            "SELECT k.id, o.name, k.org_id, k.scopes, k.label, k.created_at, k.revoked_at
         FROM api_keys k JOIN orgs o ON o.id = k.org_id ORDER BY k.created_at, k.id",
            &[],
            |r| {
                let scopes: String = r.get(3)?;
                let revoked_at: Option<i64> = r.get(6)?;
                Ok(KeyInfo {
                    key_id: r.get(0)?,
                    org: r.get(1)?,
                    org_id: r.get(2)?,
                    scopes: scopes.split(',').map(str::to_string).collect(),
                    label: r.get(4)?,
                    created_at: rfc3339_ms(r.get(5)?),
                    revoked: revoked_at.is_some(),
                    revoked_at: revoked_at.map(rfc3339_ms),
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
        None => Err(LedgerError::UnknownKey(key_id.to_string())),
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
