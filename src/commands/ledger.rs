//! `metabob-mcp ledger …`: the embedded ledger and its API keys.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::error::{CliError, CliResult, Exit};
use metabob_ledger::{KeyRequest, LedgerError, Location, Revoked, ServeOptions};
use metabob_process::env::Env;

/// The embedded ledger: discovery, identity and concept-db over SQLite or PostgreSQL.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp ledger serve
  metabob-mcp ledger key create --org lab --scopes read,write")]
pub struct LedgerArgs {
    #[command(subcommand)]
    pub command: LedgerCommand,
}

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Serve the ledger over HTTP or HTTPS until SIGINT/SIGTERM; prints one stdout line with its
    /// address.
    Serve(ServeArgs),
    /// Create, list and revoke API keys (works beside a running server).
    Key(KeyArgs),
    /// Copy a SQLite ledger to a new file while it serves: one consistent, checked snapshot.
    Backup(BackupArgs),
    /// Put a backup in place as a stopped SQLite ledger's ledger.db: checked, then swapped in
    /// atomically.
    Restore(RestoreArgs),
    /// Ask a running ledger's GET /health, as a container healthcheck does: exit 0 when it
    /// answers ok (over verified TLS for https), 1 otherwise, naming why.
    Health(HealthArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp ledger health
  metabob-mcp ledger health --url https://ledger:18100   # in a container: its own public name")]
pub struct HealthArgs {
    /// The ledger's address, as clients reach it
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:18100")]
    pub url: String,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp ledger backup --to /backups/ledger-$(date +%F).db
  metabob-mcp ledger backup --data /var/lib/ledger --to /backups/ledger.db --json

Restore: stop `ledger serve`, then `metabob-mcp ledger restore --from FILE` (see its --help).
A PostgreSQL store is backed up with pg_dump instead.")]
pub struct BackupArgs {
    #[command(flatten)]
    pub data: DataArg,
    /// The new file to write; an existing file is never overwritten
    #[arg(long, value_name = "FILE")]
    pub to: PathBuf,
    /// Print {from, to, bytes, pages} as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp ledger restore --from /backups/ledger-2026-12-01.db
  metabob-mcp ledger restore --data /var/lib/ledger --from /backups/ledger.db
  docker compose stop ledger                       # in a container: the image's data dir is /data
  docker compose run --rm --no-deps --entrypoint metabob-mcp ledger \\
      ledger restore --data /data --from /data/backup-2026-12-01.db
  docker compose start ledger

Stop `ledger serve` first: a ledger serving on --data (or any process with its ledger.db open)
is refused, as is a file that fails SQLite's integrity check or holds no ledger. The data
directory is created (0700) when missing; stale ledger.db-wal and ledger.db-shm are removed.
A PostgreSQL store is restored with pg_restore instead.")]
pub struct RestoreArgs {
    #[command(flatten)]
    pub data: DataArg,
    /// The backup to put in place, as `ledger backup` wrote it
    #[arg(long, value_name = "FILE")]
    pub from: PathBuf,
}

/// Where the ledger keeps its rows: a SQLite file in a directory, or a PostgreSQL database.
#[derive(Debug, Args)]
pub struct DataArg {
    /// Data directory holding ledger.db [default: ~/.substrate/ledger]
    #[arg(long, value_name = "DIR", conflicts_with = "store")]
    pub data: Option<PathBuf>,
    /// A PostgreSQL database instead of the SQLite file: postgres://USER[:PASSWORD]@HOST:PORT/DB.
    /// Any number of `ledger serve` processes may share one
    #[arg(
        long,
        value_name = "URL",
        env = "METABOB_LEDGER_STORE",
        hide_env_values = true
    )]
    pub store: Option<String>,
}

#[derive(Debug, Args)]
#[command(after_help = serve_help())]
pub struct ServeArgs {
    #[command(flatten)]
    pub data: DataArg,
    /// Address to listen on; port 0 picks a free one (the stdout line names it)
    #[arg(long, value_name = "ADDR", default_value = metabob_ledger::DEFAULT_LISTEN)]
    pub listen: String,
    /// URL /bootstrap advertises [default: http(s)://<listen ip>:<bound port>, loopback for 0.0.0.0/::; https with --tls-cert]
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
    /// Forward SHAPE to the producer at URL (POST {pointer}); repeatable
    #[arg(long = "producer", value_name = "SHAPE=URL")]
    pub producers: Vec<String>,
    /// How long a producer may take to answer a forwarded pointer
    #[arg(long, value_name = "N", default_value_t = metabob_ledger::DEFAULT_FORWARD_TIMEOUT_MS)]
    pub forward_timeout_ms: u64,
    /// Serve and advertise neither the atomic take nor the verdict write, as a substrate without
    /// them: cells claim by read-back and write a verdict, its link and its credit apart
    #[arg(long)]
    pub no_take: bool,
    #[arg(long, value_name = "MS", help = metabob_ledger::REQUEST_BUDGET.flag_help())]
    pub request_budget_ms: Option<u64>,
    #[arg(long, value_name = "MS", help = metabob_ledger::IDLE_TIMEOUT.flag_help())]
    pub idle_timeout_ms: Option<u64>,
    #[arg(long, value_name = "N", help = metabob_ledger::READERS.flag_help())]
    pub readers: Option<u64>,
    /// Serve HTTPS with this PEM certificate chain (leaf first); reloaded when the file changes
    /// or on SIGHUP. Needs --tls-key
    #[arg(
        long,
        value_name = "FILE",
        env = "METABOB_LEDGER_TLS_CERT",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1)
    #[arg(
        long,
        value_name = "FILE",
        env = "METABOB_LEDGER_TLS_KEY",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// Open connections at most; past it the one idle longest is closed to make room
    /// [default: what the open-file limit leaves]
    #[arg(
        long,
        value_name = "N",
        env = "METABOB_LEDGER_MAX_CONNECTIONS",
        value_parser = clap::value_parser!(u32).range(1..=1_000_000)
    )]
    pub max_connections: Option<u32>,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp ledger key create --org lab --scopes read,write
  metabob-mcp ledger key list
  metabob-mcp ledger key revoke key_0123456789ab

Each refuses a --data directory that holds no ledger.db (a mistyped or forgotten --data) and
names it; `ledger serve` keeps its data in ~/.substrate/ledger unless given --data.
`key create --init` makes a new ledger on purpose.")]
pub struct KeyArgs {
    #[command(subcommand)]
    pub command: KeyCommand,
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Create a key (and its org when missing); the key is printed once and stored only hashed.
    Create(KeyCreateArgs),
    /// List keys: ids, org, scopes, label, creation, expiry and revocation; never the keys themselves.
    List(KeyListArgs),
    /// Revoke a key; a running server refuses it from its next request.
    Revoke(KeyRevokeArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp ledger key create --org lab --scopes read,write --label fleet-a
  metabob-mcp ledger key create --scopes read --json --data /var/lib/ledger
  metabob-mcp ledger key create --label ci-job --expires-in 24h
  metabob-mcp ledger key create --init --data ./ledger     # a new ledger, before its first serve")]
pub struct KeyCreateArgs {
    #[command(flatten)]
    pub data: DataArg,
    /// Org the key belongs to; created when missing
    #[arg(long, default_value = "default")]
    pub org: String,
    /// Comma-separated subset of read,write,admin
    #[arg(long, default_value = "read,write")]
    pub scopes: String,
    /// Free-text label shown by `key list`
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,
    /// The key stops working this long from now: 90s, 30m, 24h, 7days [default: never]
    #[arg(long, value_name = "DURATION", conflicts_with = "expires_at")]
    pub expires_in: Option<String>,
    /// The key stops working at this RFC 3339 time in UTC, e.g. 2030-01-31T18:00:00Z
    #[arg(long, value_name = "TIME")]
    pub expires_at: Option<String>,
    /// Make a new ledger in the --data directory when it holds none (without it, no ledger.db there is refused)
    #[arg(long)]
    pub init: bool,
    /// Print {key_id, key, org, org_id, scopes, label?, expires_at?} as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp ledger key list
  METABOB_LEDGER_STORE=postgres://ledger@db.lan/ledger metabob-mcp ledger key list --json")]
pub struct KeyListArgs {
    #[command(flatten)]
    pub data: DataArg,
    /// Print a JSON array
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  metabob-mcp ledger key list                      # find the id
  metabob-mcp ledger key revoke key_0123456789ab")]
pub struct KeyRevokeArgs {
    /// The key id (key_…) from `key create` or `key list`
    pub key_id: String,
    #[command(flatten)]
    pub data: DataArg,
}

fn serve_help() -> String {
    format!(
        "{}\n\n\
Examples:
  metabob-mcp ledger serve                         # 127.0.0.1:18100, data in ~/.substrate/ledger
  metabob-mcp ledger serve --listen 0.0.0.0:18100 --tls-cert ledger.pem --tls-key ledger.key \\
      --public-url https://ledger.lan:18100       # across hosts: keys never cross in clear
  metabob-mcp ledger serve --listen 127.0.0.1:0 --data ./ledger --readers 8
  metabob-mcp ledger serve --store postgres://ledger@db.lan/ledger   # one of several replicas",
        metabob_ledger::limits_help()
    )
}

fn location(arg: DataArg, env: &Env) -> Result<Location, CliError> {
    Ok(match (arg.store, arg.data) {
        (Some(url), _) => Location::parse_store(&url)?,
        (None, Some(d)) => Location::Sqlite(d),
        (None, None) => Location::Sqlite(metabob_ledger::default_data_dir(env)?),
    })
}

/// The key and backup commands talk to the store with blocking calls (PostgreSQL's client among them),
/// which may not run on the async runtime's own threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, LedgerError> + Send + 'static,
) -> Result<T, CliError> {
    let done = tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CliError::failure(format!("the command did not finish: {e}")).because(e))?;
    Ok(done?)
}

fn to_json(v: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(v).expect("key records always serialize")
}

pub async fn run(args: LedgerArgs, env: Env) -> CliResult {
    match args.command {
        LedgerCommand::Serve(a) => {
            let opts = ServeOptions {
                store: location(a.data, &env)?,
                listen: a.listen,
                public_url: a.public_url,
                producers: a.producers,
                forward_timeout_ms: a.forward_timeout_ms,
                take: !a.no_take,
                limits: metabob_ledger::LimitFlags {
                    request_budget_ms: a.request_budget_ms,
                    idle_timeout_ms: a.idle_timeout_ms,
                    readers: a.readers,
                },
                tls: a
                    .tls_cert
                    .zip(a.tls_key)
                    .map(|(cert, key)| metabob_ledger::TlsFiles { cert, key }),
                max_connections: a.max_connections.map(|n| n as usize),
            };
            metabob_ledger::serve(opts, env).await?;
        }
        LedgerCommand::Health(a) => {
            let healthy = metabob_ledger::health::probe(&a.url, &env)
                .await
                .map_err(|e| CliError::caused_by("ledger health", e))?;
            let tls = if healthy.tls { ", TLS verified" } else { "" };
            metabob_process::outln!("ok: {} (metabob-ledger {}{tls})", a.url, healthy.version);
        }
        LedgerCommand::Backup(a) => {
            let at = location(a.data, &env)?;
            let to = a.to;
            let done = blocking(move || metabob_ledger::backup(&at, &to)).await?;
            if a.json {
                metabob_process::outln!("{}", to_json(&done));
            } else {
                metabob_process::outln!(
                    "backed up {} to {}: {} bytes, integrity ok",
                    done.from.display(),
                    done.to.display(),
                    done.bytes
                );
            }
        }
        LedgerCommand::Restore(a) => {
            let at = location(a.data, &env)?;
            let from = a.from;
            let done = blocking(move || metabob_ledger::db::restore(&at, &from)).await?;
            metabob_process::outln!(
                "restored {} to {}: {} bytes, integrity ok, schema version {}; start ledger serve",
                done.from.display(),
                done.to.display(),
                done.bytes,
                done.schema_version
            );
        }
        LedgerCommand::Key(KeyArgs {
            command: KeyCommand::Create(a),
        }) => {
            let at = location(a.data, &env)?;
            let req = KeyRequest {
                org: a.org,
                scopes: a.scopes,
                label: a.label,
                expires_in: a.expires_in,
                expires_at: a.expires_at,
                init: a.init,
            };
            let key = blocking(move || metabob_ledger::create_key(&at, &req)).await?;
            if a.json {
                metabob_process::outln!("{}", to_json(&key));
            } else {
                let scopes: Vec<_> = key.scopes.iter().map(|s| s.as_str()).collect();
                let expiry = match &key.expires_at {
                    Some(at) => format!(", expiring {at}"),
                    None => String::new(),
                };
                metabob_process::outln!("{}", key.key);
                metabob_process::errln!(
                    "created {} in org {} ({}) with scopes {}{expiry}; the key above is shown once",
                    key.key_id,
                    key.org,
                    key.org_id,
                    scopes.join(",")
                );
            }
        }
        LedgerCommand::Key(KeyArgs {
            command: KeyCommand::List(a),
        }) => {
            let at = location(a.data, &env)?;
            let keys = blocking(move || metabob_ledger::list_keys(&at)).await?;
            if a.json {
                metabob_process::outln!("{}", to_json(&keys));
            } else {
                for k in keys {
                    metabob_process::outln!(
                        "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                        k.key_id,
                        k.org,
                        k.scopes.join(","),
                        k.created_at,
                        k.expires_at.as_deref().unwrap_or("never"),
                        k.state(),
                        k.label.as_deref().unwrap_or_default()
                    );
                }
            }
        }
        LedgerCommand::Key(KeyArgs {
            command: KeyCommand::Revoke(a),
        }) => {
            let at = location(a.data, &env)?;
            let key_id = a.key_id.clone();
            match blocking(move || metabob_ledger::revoke_key(&at, &key_id)).await? {
                Revoked::Now => metabob_process::errln!("revoked {}", a.key_id),
                Revoked::Already => metabob_process::errln!("{} was already revoked", a.key_id),
            }
        }
    }
    Ok(Exit::Ok)
}
