//! Configuration lookup and precedence (SPEC.md §Configuration).
//!
//! Every entry point reads configuration through [`load`], which fills the environment snapshot
//! in precedence order (flags, then environment, then the first config file that is ours) so
//! that later readers see one settled set of variables.

use std::path::{Path, PathBuf};

use serde_json::Value;

use metabob_process::env::Env;

/// Variables this process reads whose values a plugin host may pass unsubstituted.
const CONFIG_VARS: &[&str] = &[
    "METABOB_API_KEY",
    "METABOB_ENDPOINT",
    "SUBSTRATE_API_KEY",
    "SUBSTRATE_ENDPOINT",
    "DISCOVERY_ENDPOINT",
    "IDENTITY_ENDPOINT",
    "VESSEL_ID",
    "SESSION_ID",
    "MB_OPERATOR_ID",
    "METABOB_CONFIG_PATH",
    "SUBSTRATE_CONFIG_PATH",
];

/// Where the anchor (discovery's URL) came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnchorSource {
    Explicit,
    DerivedH1,
    None,
}

impl AnchorSource {
    pub fn as_str(self) -> &'static str {
        match self {
            AnchorSource::Explicit => "explicit",
            AnchorSource::DerivedH1 => "derived-h1",
            AnchorSource::None => "none",
        }
    }
}

/// The settled configuration: what the attachment needs, and where each part came from.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Config {
    #[serde(skip)]
    pub api_key: Option<String>,
    /// The config file that was read, if any.
    pub file: Option<PathBuf>,
    pub endpoint: Option<String>,
    pub discovery: Option<String>,
    pub anchor_source: Option<AnchorSource>,
    pub identity_endpoint: Option<String>,
    pub vessel_id: Option<String>,
    /// Warnings raised while loading (already logged); kept for doctor's report.
    pub warnings: Vec<String>,
    /// The file to create when none qualifies.
    pub create_at: Option<PathBuf>,
}

impl Config {
    /// The last four characters of the key, the only part ever shown.
    pub fn key_hint(&self) -> Option<String> {
        self.api_key.as_deref().map(key_hint)
    }

    /// The one line naming the missing input, when the attachment cannot even start.
    pub fn unattached_line(&self) -> Option<String> {
        self.missing()
            .map(|m| unattached_message(m, self.create_at.as_deref()))
    }

    /// The missing input, when the attachment cannot even start.
    pub fn missing(&self) -> Option<Missing> {
        if self.api_key.is_none() {
            Some(Missing::ApiKey)
        } else if self.discovery.is_none() && self.identity_endpoint.is_none() {
            Some(Missing::Endpoint)
        } else {
            None
        }
    }
}

pub fn key_hint(key: &str) -> String {
    let tail: String = key
        .chars()
        .rev()
        .take(4)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("…{tail}")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    ApiKey,
    Endpoint,
}

/// The one message naming the missing input and the lookup order (anchor: unattached-message).
pub fn unattached_message(missing: Missing, create_at: Option<&Path>) -> String {
    let what = match missing {
        Missing::ApiKey => "no API key (METABOB_API_KEY, SUBSTRATE_API_KEY or metabob.apiKey)",
        Missing::Endpoint => {
            "no ledger address (--ledger URL or METABOB_LEDGER with the address `ledger serve` \
             prints; or DISCOVERY_ENDPOINT, METABOB_ENDPOINT, metabob.discoveryEndpoint / \
             metabob.endpoint)"
        }
    };
    let create = create_at
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "~/.substrate/config.json".into());
    format!(
        "not_configured: {what}; set it in the environment or in a config file, looked up in \
         order: $SUBSTRATE_CONFIG_PATH, $METABOB_CONFIG_PATH, ./.substrate/config.json, \
         ./.metabob/config.json, ~/.substrate/config.json, ~/.metabob/config.json (create {create}, \
         or run `metabob-mcp ledger serve` to start a local ledger that writes it)"
    )
}

pub fn home_config_path(env: &Env) -> Option<PathBuf> {
    env.home().map(|h| h.join(".substrate").join("config.json"))
}

/// A file in the lookup order and whether it was named explicitly (explicit files are never
/// skipped).
fn candidates(env: &Env) -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    for var in ["SUBSTRATE_CONFIG_PATH", "METABOB_CONFIG_PATH"] {
        if let Some(p) = env.get(var).filter(|v| !is_placeholder(v)) {
            out.push((env.cwd().join(p), true));
        }
    }
    for dir in [".substrate", ".metabob"] {
        out.push((env.cwd().join(dir).join("config.json"), false));
    }
    if let Some(home) = env.home() {
        for dir in [".substrate", ".metabob"] {
            out.push((home.join(dir).join("config.json"), false));
        }
    }
    out
}

/// A config file holds a key and an endpoint or two; past this it is not one of ours.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The first config file in the lookup order that exists and is ours, with its parsed body.
/// Skipped files produce warnings (anchor: config-lookup).
pub fn lookup_config(env: &Env) -> (Option<(PathBuf, Value)>, Vec<String>) {
    let mut warnings = Vec::new();
    for (path, explicit) in candidates(env) {
        let text = match metabob_process::files::read_bounded(&path, MAX_CONFIG_BYTES) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => continue,
            Err(e) => {
                let w = format!("config {}: cannot be read ({e}); skipped", path.display());
                if explicit {
                    // Named explicitly: reading it failed, and falling through to another file
                    // would attach somewhere the user did not ask for.
                    warnings.push(format!("{w}; no other file is consulted"));
                    return (None, warnings);
                }
                warnings.push(w);
                continue;
            }
        };
        match serde_json::from_str::<Value>(&text) {
            Ok(v) if explicit || section(&v).is_some() => return (Some((path, v)), warnings),
            Ok(_) => warnings.push(format!(
                "config {}: no top-level \"metabob\" section, so it belongs to another tool; skipped",
                path.display()
            )),
            Err(e) if explicit => {
                warnings.push(format!(
                    "config {}: not valid JSON ({e}); it was named explicitly, so no other file \
                     is consulted",
                    path.display()
                ));
                return (None, warnings);
            }
            Err(e) => warnings
                .push(format!("config {}: not valid JSON ({e}); skipped", path.display())),
        }
    }
    (None, warnings)
}

/// The path of the config file that would be read, if any. Used by the embedded ledger's first
/// start, which writes one only when none exists.
pub fn find_config_file(env: &Env) -> Option<PathBuf> {
    lookup_config(env).0.map(|(p, _)| p)
}

fn section(v: &Value) -> Option<&serde_json::Map<String, Value>> {
    let obj = v.as_object()?;
    obj.get("metabob")
        .or_else(|| obj.get("instance"))
        .and_then(Value::as_object)
}

fn is_placeholder(v: &str) -> bool {
    v.contains("${")
}

/// Discovery derived from a local substrate endpoint: an http URL whose explicit port ends in 80
/// maps to the same block's …100 (anchor: derive-local-discovery). Remote endpoints derive nothing.
pub fn derive_local_discovery(endpoint: &str) -> Option<String> {
    let rest = endpoint.strip_prefix("http://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let hostport = authority.rsplit('@').next()?;
    // The port follows the last ':' that is outside an IPv6 literal's brackets.
    let (host, port) = hostport
        .rsplit_once(':')
        .filter(|(h, _)| !h.ends_with(':'))?;
    if host.is_empty() || (host.starts_with('[') && !host.ends_with(']')) {
        return None;
    }
    let port: u16 = port.parse().ok()?;
    if port % 100 != 80 {
        return None;
    }
    Some(format!("http://{host}:{}", port + 20))
}

/// Settles configuration into `env` and returns what was settled (anchor: apply-configuration).
pub fn load(env: &mut Env) -> Config {
    let mut warnings = Vec::new();

    // Placeholders a plugin host left unfilled are removed, so they are never sent or dialled.
    for var in CONFIG_VARS {
        if env.get(var).is_some_and(is_placeholder) {
            warnings.push(format!(
                "{var} holds an unsubstituted placeholder; ignoring it (as if unset)"
            ));
            env.remove(var);
        }
    }

    // The installer's names fill ours when ours are unset (anchor: substrate-env-aliases).
    for (ours, theirs) in [
        ("METABOB_API_KEY", "SUBSTRATE_API_KEY"),
        ("METABOB_ENDPOINT", "SUBSTRATE_ENDPOINT"),
    ] {
        match (
            env.get(ours).map(str::to_owned),
            env.get(theirs).map(str::to_owned),
        ) {
            (None, Some(v)) => env.set(ours, v),
            (Some(a), Some(b)) if a != b => warnings.push(format!(
                "{ours} and {theirs} are both set and differ; using {ours}"
            )),
            _ => {}
        }
    }

    let mut anchor_source = env
        .is_set("DISCOVERY_ENDPOINT")
        .then_some(AnchorSource::Explicit);
    if anchor_source.is_none()
        && let Some(d) = env.get("METABOB_ENDPOINT").and_then(derive_local_discovery)
    {
        env.set("DISCOVERY_ENDPOINT", d);
        anchor_source = Some(AnchorSource::DerivedH1);
    }

    let endpoints_from_env = env.is_set("METABOB_ENDPOINT") || env.is_set("DISCOVERY_ENDPOINT");
    let (found, lookup_warnings) = lookup_config(env);
    warnings.extend(lookup_warnings);
    let mut file = None;
    if let Some((path, value)) = found {
        let empty = serde_json::Map::new();
        let sec = section(&value).unwrap_or(&empty);
        let get = |k: &str| {
            sec.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty() && !is_placeholder(s))
        };
        if let Some(v) = get("apiKey") {
            env.set_default("METABOB_API_KEY", v);
        }
        if let Some(v) = get("vesselId") {
            env.set_default("VESSEL_ID", v);
        }
        // An endpoint chosen in the environment chooses the substrate: the file's endpoints
        // never complete it, so one attachment cannot span two substrates.
        if !endpoints_from_env {
            if let Some(v) = get("endpoint") {
                env.set_default("METABOB_ENDPOINT", v);
            }
            if let Some(v) = get("discoveryEndpoint") {
                env.set_default("DISCOVERY_ENDPOINT", v);
                anchor_source = Some(AnchorSource::Explicit);
            }
            if let Some(v) = get("identityEndpoint") {
                env.set_default("IDENTITY_ENDPOINT", v);
            }
            if anchor_source.is_none()
                && let Some(d) = get("endpoint").and_then(derive_local_discovery)
            {
                env.set("DISCOVERY_ENDPOINT", d);
                anchor_source = Some(AnchorSource::DerivedH1);
            }
        }
        file = Some(path);
    }

    if anchor_source == Some(AnchorSource::DerivedH1) {
        warnings.push(format!(
            "discovery {} was derived from the endpoint's port (interim H1 rule); set \
             DISCOVERY_ENDPOINT or metabob.discoveryEndpoint to anchor explicitly",
            env.get("DISCOVERY_ENDPOINT").unwrap_or_default()
        ));
    }
    for w in &warnings {
        tracing::warn!("{w}");
    }

    Config {
        api_key: env.get("METABOB_API_KEY").map(str::to_owned),
        file,
        endpoint: env.get("METABOB_ENDPOINT").map(str::to_owned),
        discovery: env.get("DISCOVERY_ENDPOINT").map(str::to_owned),
        anchor_source: Some(anchor_source.unwrap_or(AnchorSource::None)),
        identity_endpoint: env.get("IDENTITY_ENDPOINT").map(str::to_owned),
        vessel_id: env.get("VESSEL_ID").map(str::to_owned),
        warnings,
        create_at: home_config_path(env),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_endpoints_derive_the_same_block_discovery() {
        assert_eq!(
            derive_local_discovery("http://127.0.0.1:18080").as_deref(),
            Some("http://127.0.0.1:18100")
        );
        assert_eq!(
            derive_local_discovery("http://localhost:8080/x").as_deref(),
            Some("http://localhost:8100")
        );
        assert_eq!(derive_local_discovery("http://127.0.0.1:18081"), None);
        assert_eq!(derive_local_discovery("https://hub.example:8080"), None);
        assert_eq!(derive_local_discovery("http://hub.example"), None);
    }

    #[test]
    fn key_hint_shows_only_the_tail() {
        assert_eq!(key_hint("mb_live_abcdef123456"), "…3456");
    }
}
