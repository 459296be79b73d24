//! metabob-ledger, the embedded ledger (see SPEC.md §The embedded ledger): discovery, identity
//! and concept-db in one process over one store: a SQLite file by default, or a PostgreSQL
//! database that any number of replicas share (`db::Location`).
//!
//! Must not depend on: rmcp, tree-sitter, gix, the index, the cell or the MCP server; it shares
//! only metabob-wire (the vocabulary), metabob-process (the house rules) and metabob-net
//! (configuration, the connection server) with the client side (tests/layers.rs holds this).
//!
//! `serve` binds, opens the store, runs the first start, prints the one stdout line and serves
//! until SIGINT/SIGTERM. The key commands (`keys`) open the same store directly.
//!
//! No single request can stall the ledger: a search is bounded in size and words
//! (`concepts::check_query`), reads share a pool of connections (`db::Db`), every request's
//! database work has a time budget that stops it (`db::Budget`), and a connection that sits
//! idle or sends half a request is closed (`metabob_net::serve`). The limits are in [`Limits`].

pub mod board;
pub mod concepts;
pub mod db;
pub mod errors;
pub mod forward;
pub mod goals;
pub mod health;
pub mod input;
pub mod keys;
pub mod metrics;
pub mod open_tasks;
pub mod related;
pub mod resolve;
pub mod routes;
pub mod row_ids;
pub mod sql;
pub mod take;
pub mod task_actions;
pub mod task_edges;
#[cfg(test)]
mod test_support;
pub mod verdict_write;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

pub use errors::{ApiError, ForwardCause, LedgerError, StoreError};
pub use keys::{CreatedKey, KeyInfo, KeyRequest, Revoked, create_key, list_keys, revoke_key};

use db::Db;
pub use db::{BackupReport, Location, backup};
use keys::{DEFAULT_ORG, Scope, create_key_in, has_no_orgs};
use metabob_process::env::Env;
use metabob_wire::shapes::LEDGER_SHAPES;
use resolve::Ledger;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:18100";
pub const DEFAULT_FORWARD_TIMEOUT_MS: u64 = 30_000;

/// A request's time budget for its database work, by default. Under the client's own caps for
/// ledger reads (10 s for discovery, 35 s for concept shapes), so a client hears the named 503
/// rather than its own timeout.
pub const DEFAULT_REQUEST_BUDGET_MS: u64 = 10_000;
/// How long a connection may sit idle, or take to send a request's head (and then its body).
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 10_000;
/// Read-only connections in the pool, by default: enough that a slow read leaves others free.
pub const DEFAULT_READERS: usize = 4;
pub const MAX_READERS: usize = 64;
/// The environment variables that change the limits (SPEC.md §The embedded ledger).
pub const REQUEST_BUDGET_VAR: &str = "METABOB_LEDGER_REQUEST_BUDGET_MS";
pub const IDLE_TIMEOUT_VAR: &str = "METABOB_LEDGER_IDLE_TIMEOUT_MS";
pub const READERS_VAR: &str = "METABOB_LEDGER_READERS";
pub const DRAIN_VAR: &str = "METABOB_LEDGER_DRAIN_MS";
pub use metabob_net::serve::DEFAULT_DRAIN_MS;
/// An hour: the most any duration limit may be set to.
const MAX_LIMIT_MS: u64 = 3_600_000;

/// The limits `ledger serve` holds every request and connection to.
// anchor: Limits
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub request_budget_ms: u64,
    pub idle_timeout_ms: u64,
    pub readers: usize,
    pub drain_ms: u64,
}

/// The limits given as `ledger serve` flags; each one set wins over its environment variable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitFlags {
    pub request_budget_ms: Option<u64>,
    pub idle_timeout_ms: Option<u64>,
    pub readers: Option<u64>,
}

/// One limit: its flag (none for those only a variable sets), variable, default, bound and
/// meaning. `Limits::resolve` and `--help` both read these.
pub struct Limit {
    flag: Option<&'static str>,
    var: &'static str,
    default: u64,
    max: u64,
    what: &'static str,
}

pub const REQUEST_BUDGET: Limit = Limit {
    flag: Some("--request-budget-ms"),
    var: REQUEST_BUDGET_VAR,
    default: DEFAULT_REQUEST_BUDGET_MS,
    max: MAX_LIMIT_MS,
    what: "each request's time for its database work, in ms",
};
pub const IDLE_TIMEOUT: Limit = Limit {
    flag: Some("--idle-timeout-ms"),
    var: IDLE_TIMEOUT_VAR,
    default: DEFAULT_IDLE_TIMEOUT_MS,
    max: MAX_LIMIT_MS,
    what: "how long a connection may idle or take to send a request, in ms",
};
pub const READERS: Limit = Limit {
    flag: Some("--readers"),
    var: READERS_VAR,
    default: DEFAULT_READERS as u64,
    max: MAX_READERS as u64,
    what: "read-only store connections; one org may hold all but one",
};
pub const DRAIN: Limit = Limit {
    flag: None,
    var: DRAIN_VAR,
    default: DEFAULT_DRAIN_MS,
    max: MAX_LIMIT_MS,
    what: "on SIGTERM, how long the requests in flight may finish, in ms",
};

impl Limit {
    /// The flag's `--help` line: the meaning, the default and the variable.
    pub fn flag_help(&self) -> String {
        format!(
            "{}{} [default: {}; env: {}]",
            self.what[..1].to_uppercase(),
            &self.what[1..],
            self.default,
            self.var
        )
    }

    /// The flag's value when given, else the variable's, else the default; a value that is not
    /// a number in range is refused, naming the flag or the variable it came from.
    fn resolve(&self, flag: Option<u64>, env: &Env) -> Result<u64, LedgerError> {
        let (n, given) = match (flag, self.flag) {
            (Some(n), Some(name)) => (Some(n), format!("{name} {n}")),
            _ => match env.get(self.var) {
                Some(text) => (text.trim().parse().ok(), format!("{}={text:?}", self.var)),
                None => return Ok(self.default),
            },
        };
        n.filter(|n| (1..=self.max).contains(n)).ok_or_else(|| {
            LedgerError::Usage(format!(
                "{given}: expected a whole number in 1..={}",
                self.max
            ))
        })
    }
}

impl Limits {
    /// Each limit from its flag, else its environment variable, else its default.
    pub fn resolve(env: &Env, flags: LimitFlags) -> Result<Limits, LedgerError> {
        Ok(Limits {
            request_budget_ms: REQUEST_BUDGET.resolve(flags.request_budget_ms, env)?,
            idle_timeout_ms: IDLE_TIMEOUT.resolve(flags.idle_timeout_ms, env)?,
            readers: READERS.resolve(flags.readers, env)? as usize,
            drain_ms: DRAIN.resolve(None, env)?,
        })
    }
}

/// `ledger serve --help`'s account of the limits, from the same table `Limits::resolve` reads.
pub fn limits_help() -> String {
    let mut text = String::from(
        "Limits (a flag, or its environment variable read at start; the flag wins; a value \
         out of range is refused):",
    );
    for l in [REQUEST_BUDGET, IDLE_TIMEOUT, READERS, DRAIN] {
        let set = match l.flag {
            Some(flag) => format!("{flag}, {}={}", l.var, l.default),
            None => format!("{}={}", l.var, l.default),
        };
        text.push_str(&format!("\n  {set:<60} {} (1..={})", l.what, l.max));
    }
    text
}

/// What `ledger serve` was asked for.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub store: Location,
    pub listen: String,
    pub public_url: Option<String>,
    /// `SHAPE=URL` as given on the command line.
    pub producers: Vec<String>,
    pub forward_timeout_ms: u64,
    /// Whether the atomic take and the verdict write are served and advertised (`--no-take`
    /// turns them off).
    pub take: bool,
    /// The limits named on the command line.
    pub limits: LimitFlags,
    /// `--tls-cert` and `--tls-key`: HTTPS with these PEM files.
    pub tls: Option<TlsFiles>,
    /// `--max-connections`; else drawn from the open-file limit.
    pub max_connections: Option<usize>,
}

/// The certificate chain and private key a ledger serves HTTPS with, as PEM files.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The connection cap: the one asked for, else what the open-file limit (raised to its hard
/// bound first) leaves beyond the descriptors the process holds once its store is open (the
/// store's connections, with their runtimes on PostgreSQL) and a margin for the rest.
// anchor: connection_cap
fn connection_cap(asked: Option<usize>) -> usize {
    let fds = metabob_net::serve::raise_fd_limit();
    let reserve = metabob_net::serve::open_fds() + metabob_net::serve::RESERVED_FDS;
    let fits = metabob_net::serve::default_cap(fds, reserve);
    match asked {
        Some(n) if n > fits => {
            tracing::warn!(
                "--max-connections {n} is more than the open-file limit {fds} leaves room for \
                 ({fits}); connections past that fail with too many open files"
            );
            n
        }
        Some(n) => n,
        None => fits,
    }
}

/// `~/.substrate/ledger`, the data directory when `--data` is not given.
pub fn default_data_dir(env: &Env) -> Result<PathBuf, LedgerError> {
    Ok(env
        .home()
        .ok_or(LedgerError::NoHome)?
        .join(".substrate")
        .join("ledger"))
}

/// Parses the `--producer SHAPE=URL` list; a shape the ledger serves itself cannot be rerouted,
/// except the goal board's, which a real goal-host or activity-api may take over.
// anchor: parse_producers
pub fn parse_producers(specs: &[String]) -> Result<BTreeMap<String, String>, LedgerError> {
    let mut map = BTreeMap::new();
    for spec in specs {
        let (shape, url) = spec
            .split_once('=')
            .map(|(s, u)| (s.trim(), u.trim()))
            .filter(|(s, u)| !s.is_empty() && !u.is_empty())
            .ok_or_else(|| {
                LedgerError::Usage(format!("--producer {spec:?}: expected SHAPE=URL"))
            })?;
        if let Err(source) = metabob_net::Url::parse(url) {
            return Err(LedgerError::ProducerUrl {
                spec: spec.clone(),
                source,
            });
        }
        if LEDGER_SHAPES.contains(&shape) && !goals::GOAL_SHAPES.contains(&shape) {
            return Err(LedgerError::Usage(format!(
                "--producer {spec:?}: the ledger serves {shape} itself"
            )));
        }
        if map.insert(shape.to_string(), url.to_string()).is_some() {
            return Err(LedgerError::Usage(format!(
                "--producer: {shape} is named twice"
            )));
        }
    }
    Ok(map)
}

/// What `/bootstrap` advertises by default: the bound address, dialable from this host.
fn default_public_url(scheme: &str, bound: SocketAddr) -> String {
    let ip = match bound.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("{scheme}://{}", SocketAddr::new(ip, bound.port()))
}

// anchor: serve
pub async fn serve(opts: ServeOptions, env: Env) -> Result<(), LedgerError> {
    let producers = parse_producers(&opts.producers)?;
    let limits = Limits::resolve(&env, opts.limits)?;
    let listener = tokio::net::TcpListener::bind(&opts.listen)
        .await
        .map_err(|source| LedgerError::Bind {
            addr: opts.listen.clone(),
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| LedgerError::Bind {
        addr: opts.listen.clone(),
        source,
    })?;
    let tls = match &opts.tls {
        Some(files) => Some(metabob_net::serve::ServerTls::load(
            &files.cert,
            &files.key,
        )?),
        None => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    if tls.is_none() && !bound.ip().is_loopback() {
        tracing::warn!(
            "serving plain HTTP on {bound}, beyond loopback: API keys cross the network in \
             clear; serve HTTPS with --tls-cert FILE --tls-key FILE"
        );
    }
    let public_url = match &opts.public_url {
        Some(url) => url.trim_end_matches('/').to_string(),
        None => default_public_url(scheme, bound),
    };

    let at = opts.store.clone();
    let db = tokio::task::spawn_blocking(move || Db::open(&at, limits.readers))
        .await
        .map_err(|source| LedgerError::Task {
            what: "opening the ledger",
            source,
        })??;
    {
        let (db, env, url) = (db.clone(), env.clone(), public_url.clone());
        tokio::task::spawn_blocking(move || first_start(&db, &env, &url))
            .await
            .map_err(|source| LedgerError::Task {
                what: "first start",
                source,
            })??;
    }

    let max_connections = connection_cap(opts.max_connections);
    let ledger = Arc::new(Ledger {
        db,
        public_url,
        producers,
        forward_timeout: Duration::from_millis(opts.forward_timeout_ms),
        take: opts.take,
        request_budget_ms: limits.request_budget_ms,
        idle_timeout: Duration::from_millis(limits.idle_timeout_ms),
        resolves: AtomicU64::new(0),
        forwarder: forward::Forwarder::from_env(&env),
        keys: keys::KeyCache::default(),
        metrics: metrics::Metrics::default(),
        metrics_keyless: bound.ip().is_loopback(),
    });
    // The one stdout line: scripts and tests read the bound address (so --listen :0 works) from it.
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "metabob-ledger listening on {scheme}://{bound}");
        let _ = out.flush();
    }
    tracing::info!(store = %ledger.db.shown(), ?limits, max_connections, "ledger serving");
    let config = metabob_net::serve::ServeConfig {
        idle_timeout: ledger.idle_timeout,
        drain: Duration::from_millis(limits.drain_ms),
        max_connections,
        tls: tls.clone(),
    };
    let reloads = tls.map(|tls| tokio::spawn(tls.watch(std::future::pending())));
    // Boxed, so this deep future (hyper's connection over axum's router) is not laid out inside
    // every caller's: a build that spawned the whole command future overflowed rustc's query
    // depth limit with it inline.
    let db = ledger.db.clone();
    Box::pin(metabob_net::serve::serve_connections(
        listener,
        routes::router(ledger),
        config,
        shutdown_signal(),
    ))
    .await;
    if let Some(reloads) = reloads {
        reloads.abort();
    }
    // Every request has been answered (or the drain ran out): the store's connections close off
    // the async runtime, since the synchronous PostgreSQL client runs a runtime of its own when
    // it is dropped.
    tokio::task::spawn_blocking(move || db.close())
        .await
        .map_err(|source| LedgerError::Task {
            what: "closing the store",
            source,
        })?;
    tracing::info!("ledger stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("ledger shutting down");
}

/// On a file with no org yet: org `default`, an admin key shown once, and (when the host has no
/// configuration) `~/.substrate/config.json` pointing at this ledger, so clients attach with no flags.
// anchor: first_start
fn first_start(db: &Db, env: &Env, public_url: &str) -> Result<(), LedgerError> {
    let created = db.with_writer(|w| -> Result<Option<CreatedKey>, ApiError> {
        if !has_no_orgs(w.sql())? {
            return Ok(None);
        }
        create_key_in(
            w.sql(),
            DEFAULT_ORG,
            &[Scope::Read, Scope::Write, Scope::Admin],
            Some("first-start admin"),
            None,
        )
        .map(Some)
    })?;
    let Some(key) = created else { return Ok(()) };
    // Printed, not logged: the operator must see it whatever RUST_LOG says, and it is shown once.
    metabob_process::errln!(
        "metabob-ledger: first start: created org {} ({}) and admin key {}: {}",
        key.org,
        key.org_id,
        key.key_id,
        key.key
    );
    metabob_process::errln!(
        "metabob-ledger: this key is shown once; `metabob-mcp ledger key create` makes more"
    );
    match write_first_config(env, &key.key, public_url) {
        Ok(Some(path)) => metabob_process::errln!(
            "metabob-ledger: wrote {} (mode 0600) with this key and discovery endpoint {public_url}",
            path.display()
        ),
        Ok(None) => {}
        Err(e) => tracing::warn!("could not write the client configuration: {e}"),
    }
    Ok(())
}

/// Writes the client configuration unless any configuration already exists; `None` when skipped.
// anchor: write_first_config
fn write_first_config(
    env: &Env,
    key: &str,
    public_url: &str,
) -> Result<Option<PathBuf>, LedgerError> {
    if let Some(existing) = metabob_net::config::find_config_file(env) {
        tracing::info!(
            "client configuration exists at {}; not writing one",
            existing.display()
        );
        return Ok(None);
    }
    let Some(home) = env.home() else {
        tracing::warn!("no HOME: not writing a client configuration");
        return Ok(None);
    };
    let path = home.join(".substrate").join("config.json");
    // Never overwrite: a file there that does not qualify as configuration is still someone's.
    if path.exists() {
        return Ok(None);
    }
    let body = serde_json::json!({ "metabob": { "apiKey": key, "discoveryEndpoint": public_url } });
    let text = serde_json::to_string_pretty(&body).expect("a JSON value always serializes");
    metabob_process::files::write_atomic(&path, text.as_bytes(), Some(0o600)).map_err(
        |source| LedgerError::Io {
            path: path.clone(),
            source,
        },
    )?;
    Ok(Some(path))
}
