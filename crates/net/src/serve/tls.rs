//! TLS for the servers here: a certificate and key read from PEM files and swapped in place
//! when the files change or on SIGHUP, since cert-manager and ACME clients rotate them where
//! they lie. A swap changes what the next handshake is shown; connections already open keep
//! theirs and are never dropped for it.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

/// The most either PEM file may hold: a chain of a few certificates is a few KB.
const MAX_PEM_BYTES: u64 = 1 << 20;
/// How often the files are looked at for a rotation.
pub const POLL: Duration = Duration::from_secs(1);

/// Why a certificate or key could not be used; the file is named, its contents never.
#[derive(Debug, thiserror::Error)]
pub enum TlsFileError {
    #[error("TLS {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS {what} {}: over {MAX_PEM_BYTES} bytes", path.display())]
    TooLarge { what: &'static str, path: PathBuf },
    #[error("TLS certificate {}: no PEM certificate in the file", path.display())]
    NoCertificate { path: PathBuf },
    #[error("TLS key {}: no PEM private key in the file (PKCS#8, PKCS#1 or SEC1)", path.display())]
    NoKey { path: PathBuf },
    #[error("TLS key {} does not fit certificate {}: {source}", key.display(), cert.display())]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

// Each names the file and what is wrong with it; which file to give instead is the caller's
// to say (the ledger's flags, say).
impl metabob_wire::report::Hint for TlsFileError {}

/// The pair every handshake is answered with, replaced whole on a reload.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

/// What the files looked like when last read: a rotation changes one of these.
type Stamp = [(Option<SystemTime>, u64, u64); 2];

/// A server's TLS: its files, the pair in use, and the acceptor built over them.
pub struct ServerTls {
    cert: PathBuf,
    key: PathBuf,
    current: Arc<Current>,
    acceptor: TlsAcceptor,
    seen: Mutex<Stamp>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads both files; a server refuses to start on an error here.
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<ServerTls>, TlsFileError> {
        let seen = stamp(cert, key);
        let pair = read_pair(cert, key)?;
        let current = Arc::new(Current(RwLock::new(Arc::new(pair))));
        let mut config = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(ServerTls {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            current,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            seen: Mutex::new(seen),
        }))
    }

    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }

    /// Reads the files again and, when they hold a usable pair, serves it from the next
    /// handshake on. On an error the pair in use stays.
    pub fn reload(&self) -> Result<(), TlsFileError> {
        let seen = stamp(&self.cert, &self.key);
        // Remembered before reading, so a pair that fails is tried again only once the files
        // change again, not on every poll.
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = seen;
        let pair = read_pair(&self.cert, &self.key)?;
        *self.current.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(pair);
        Ok(())
    }

    /// Whether either file changed since it was last read.
    fn changed(&self) -> bool {
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) != stamp(&self.cert, &self.key)
    }

    /// Reloads on SIGHUP and whenever the files change, until `stop` completes; each outcome
    /// is logged.
    pub async fn watch(self: Arc<Self>, stop: impl std::future::Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        #[cfg(unix)]
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            #[cfg(unix)]
            let hangup = async {
                match hup.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            #[cfg(not(unix))]
            let hangup = std::future::pending::<()>();
            let why = tokio::select! {
                () = &mut stop => return,
                () = hangup => "SIGHUP",
                _ = tick.tick() => {
                    if !self.changed() {
                        continue;
                    }
                    "the files changed"
                }
            };
            let this = self.clone();
            let done = tokio::task::spawn_blocking(move || this.reload()).await;
            match done {
                Ok(Ok(())) => tracing::info!(
                    cert = %self.cert.display(),
                    "TLS certificate reloaded ({why}); new connections get it"
                ),
                Ok(Err(e)) => tracing::warn!("{e}; still serving the previous certificate"),
                Err(e) => tracing::warn!("reloading the TLS certificate failed: {e}"),
            }
        }
    }
}

fn stamp(cert: &Path, key: &Path) -> Stamp {
    let one = |p: &Path| match std::fs::metadata(p) {
        Ok(m) => {
            #[cfg(unix)]
            let ino = std::os::unix::fs::MetadataExt::ino(&m);
            #[cfg(not(unix))]
            let ino = 0;
            (m.modified().ok(), m.len(), ino)
        }
        Err(_) => (None, 0, 0),
    };
    [one(cert), one(key)]
}

fn read_bounded(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsFileError> {
    let read = |source| TlsFileError::Read {
        what,
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(TlsFileError::TooLarge {
            what,
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

fn read_pair(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsFileError> {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&read_bounded("certificate", cert)?)
            .filter_map(Result::ok)
            .collect();
    if chain.is_empty() {
        return Err(TlsFileError::NoCertificate {
            path: cert.to_path_buf(),
        });
    }
    let der = PrivateKeyDer::from_pem_slice(&read_bounded("key", key)?).map_err(|_| {
        TlsFileError::NoKey {
            path: key.to_path_buf(),
        }
    })?;
    CertifiedKey::from_der(chain, der, &crate::tls::provider()).map_err(|source| {
        TlsFileError::Mismatch {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            source,
        }
    })
}
