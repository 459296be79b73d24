//! Who this process says it is: the vessel identity and the client claim on writes
//! (SPEC.md §Client claim).

use std::path::Path;

use serde::Serialize;

use metabob_process::env::Env;
use metabob_process::random::uuid_v4;
use metabob_wire::text::sha256_hex;

/// The stable identity of this key in this workspace: `VESSEL_ID`, else
/// `metabob-mcp-<12 hex of sha256(key + workspace)>`; `None` with neither (anchor: vessel_id).
pub fn vessel_id(env: &Env, workspace: &Path) -> Option<String> {
    if let Some(v) = env.get("VESSEL_ID") {
        return Some(v.to_string());
    }
    let key = env.get("METABOB_API_KEY")?;
    let digest = sha256_hex(format!("{key}{}", workspace.display()).as_bytes());
    Some(format!("metabob-mcp-{}", &digest[..12]))
}

/// The claim a write carries: asserted by the client, not attribution.
#[derive(Clone, Debug, Serialize)]
pub struct ClientClaim {
    pub operator: String,
    pub session: String,
    pub client: String,
    #[serde(skip)]
    pub enabled: bool,
}

impl ClientClaim {
    /// Built once per process (anchor: client_claim): the session is SESSION_ID or one UUID per
    /// launch.
    pub fn from_env(env: &Env, workspace: &Path) -> Self {
        let operator = env
            .get("MB_OPERATOR_ID")
            .map(str::to_owned)
            .or_else(|| vessel_id(env, workspace))
            .unwrap_or_else(|| "metabob-mcp-unidentified".into());
        ClientClaim {
            operator,
            session: env
                .get("SESSION_ID")
                .map(str::to_owned)
                .unwrap_or_else(uuid_v4),
            client: metabob_wire::CLIENT.to_string(),
            enabled: !env
                .get("METABOB_CLIENT_CLAIM")
                .is_some_and(|v| v.eq_ignore_ascii_case("off")),
        }
    }
}
