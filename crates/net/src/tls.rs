//! Trust: which roots a certificate is checked against, and a verifier that remembers the
//! chain it was shown so a refusal can name who signed it.

use std::sync::{Arc, Mutex, OnceLock};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use super::cause::{NetCause, Target};
use metabob_process::env::Env;

/// What TLS saw on the way to a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsInfo {
    pub host: String,
    /// The chain and name verified.
    pub authorized: bool,
    /// Issuer of the top-most certificate served (its common name when it has one).
    pub issuer: Option<String>,
}

pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

// anchor: system-ca
/// The OS store is slow to read on some platforms and does not change under a running
/// process, so it is loaded at most once.
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let loaded = rustls_native_certs::load_native_certs();
        for e in &loaded.errors {
            tracing::debug!("OS trust store: {e}");
        }
        loaded.certs
    })
}

// anchor: trusted-cas
/// The variables naming extra PEM roots: the project's own, and the seed's (Node's) name.
pub const EXTRA_CA_VARS: [&str; 2] = ["METABOB_EXTRA_CA_CERTS", "NODE_EXTRA_CA_CERTS"];

/// Bundled roots, the OS store unless METABOB_NO_SYSTEM_CA=1, and the certificates in the
/// files [`EXTRA_CA_VARS`] name (both, when both are set).
pub(crate) fn root_store(env: &Env) -> RootCertStore {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if env.get("METABOB_NO_SYSTEM_CA") != Some("1") {
        let (added, ignored) = roots.add_parsable_certificates(system_roots().iter().cloned());
        tracing::debug!("OS trust store: {added} roots added, {ignored} unusable");
    }
    for (var, path, certs) in extra_certs(env) {
        match certs {
            Ok(certs) => {
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    tracing::warn!("{var}={path}: no usable certificate in the file");
                }
            }
            Err(e) => {
                tracing::warn!("{var}={path} cannot be read ({e}); continuing without it")
            }
        }
    }
    roots
}

type ExtraCerts<'a> = (
    &'static str,
    &'a str,
    Result<Vec<CertificateDer<'static>>, rustls::pki_types::pem::Error>,
);

/// The certificates in the files [`EXTRA_CA_VARS`] name, each with its variable and path.
fn extra_certs(env: &Env) -> Vec<ExtraCerts<'_>> {
    EXTRA_CA_VARS
        .iter()
        .filter_map(|var| {
            let path = env.get(var)?;
            let certs = CertificateDer::pem_file_iter(path)
                .map(|iter| iter.filter_map(Result::ok).collect());
            Some((*var, path, certs))
        })
        .collect()
}

/// The roots this process trusts, as one PEM bundle for the git CLI, which reads none of
/// [`EXTRA_CA_VARS`]: the OS store (unless METABOB_NO_SYSTEM_CA=1) and the extra files'
/// certificates, so a push trusts what the clone trusted. `None` when no extra file is named,
/// where git's own trust (the OS store) is the same.
pub fn git_ca_bundle(env: &Env) -> Option<String> {
    use base64::Engine as _;
    let extra: Vec<CertificateDer<'static>> = extra_certs(env)
        .into_iter()
        .filter_map(|(_, _, certs)| certs.ok())
        .flatten()
        .collect();
    if extra.is_empty() {
        return None;
    }
    let system = (env.get("METABOB_NO_SYSTEM_CA") != Some("1")).then(system_roots);
    let mut pem = String::new();
    for der in system.into_iter().flatten().chain(&extra) {
        let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    Some(pem)
}

/// The verifier every connection shares; built once per client.
pub(crate) fn base_verifier(env: &Env) -> Arc<WebPkiServerVerifier> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(root_store(env)), provider())
        .build()
        .expect("the bundled webpki roots are never empty")
}

/// What the verifier was shown and what it concluded, for one handshake.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub issuer: Option<String>,
    pub error: Option<CertificateError>,
}

#[derive(Debug)]
struct Recording {
    inner: Arc<WebPkiServerVerifier>,
    seen: Arc<Mutex<Seen>>,
}

impl ServerCertVerifier for Recording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let top = intermediates.last().unwrap_or(end_entity);
        let result = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.issuer = Some(issuer_name(top));
        if let Err(rustls::Error::InvalidCertificate(e)) = &result {
            seen.error = Some(e.clone());
        }
        result
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A client config whose verifier reports into the returned slot. One per handshake, because
/// the slot belongs to that handshake alone.
pub(crate) fn config_for_handshake(
    base: &Arc<WebPkiServerVerifier>,
) -> (Arc<ClientConfig>, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let verifier = Recording {
        inner: base.clone(),
        seen: seen.clone(),
    };
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    (Arc::new(config), seen)
}

/// What the verifier saw during the handshakes of a transport that makes its own connections
/// (clone and fetch over https), so a refused chain is named as `send` names it.
#[derive(Clone, Debug)]
pub struct TlsWitness(Arc<Mutex<Seen>>);

impl TlsWitness {
    /// Forgets the last handshake, before the next request.
    pub fn forget(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Seen::default();
    }

    /// The named cause when the verifier refused the chain it was shown; `None` when it
    /// accepted every chain (or saw none), so the failure lies elsewhere.
    pub fn refusal(&self, target: &Target) -> Option<NetCause> {
        let seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        seen.error.as_ref()?;
        Some(classify_handshake(&seen, target))
    }
}

/// A client config over the shared verifier for a transport that makes its own connections,
/// and the witness its verifier reports into.
pub fn config_for_transport(base: &Arc<WebPkiServerVerifier>) -> (ClientConfig, TlsWitness) {
    let (config, seen) = config_for_handshake(base);
    (Arc::unwrap_or_clone(config), TlsWitness(seen))
}

// anchor: classify-tls
/// Names a failed handshake with `target` from what the verifier saw.
pub(crate) fn classify_handshake(seen: &Seen, target: &Target) -> NetCause {
    use CertificateError as C;
    match &seen.error {
        Some(C::NotValidForName | C::NotValidForNameContext { .. }) => NetCause::TlsNameMismatch {
            host: target.host.clone(),
        },
        #[allow(deprecated)]
        Some(
            C::UnknownIssuer
            | C::BadSignature
            | C::UnsupportedSignatureAlgorithm
            | C::UnsupportedSignatureAlgorithmContext { .. }
            | C::UnsupportedSignatureAlgorithmForPublicKeyContext { .. },
        ) => NetCause::TlsIntercepted {
            issuer: seen
                .issuer
                .clone()
                .unwrap_or_else(|| "unknown issuer".into()),
        },
        _ => NetCause::TlsFailed(target.clone()),
    }
}

// anchor: issuer-name
/// The issuer of a DER certificate: its common name, or the whole name rendered when it has
/// none. Walks Certificate → tbsCertificate → (version?, serial, signature, issuer) by hand,
/// which is all this needs from X.509.
pub(crate) fn issuer_name(cert: &[u8]) -> String {
    issuer_of(cert).unwrap_or_else(|| "unknown issuer".to_string())
}

fn issuer_of(cert: &[u8]) -> Option<String> {
    let (tag, certificate, _) = der_next(cert)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, tbs, _) = der_next(certificate)?;
    if tag != 0x30 {
        return None;
    }
    let mut rest = tbs;
    let (tag, _, after) = der_next(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    let (_serial, _, rest) = der_next(rest)?;
    let (_sig_alg, _, rest) = der_next(rest)?;
    let (tag, name, _) = der_next(rest)?;
    if tag != 0x30 {
        return None;
    }
    let mut parts = Vec::new();
    let mut common_name = None;
    let mut rdns = name;
    while !rdns.is_empty() {
        let (_set, mut atvs, next) = der_next(rdns)?;
        rdns = next;
        while !atvs.is_empty() {
            let (_seq, atv, next) = der_next(atvs)?;
            atvs = next;
            let (tag, oid, after) = der_next(atv)?;
            if tag != 0x06 {
                return None;
            }
            let (vtag, value, _) = der_next(after)?;
            let value = der_string(vtag, value);
            let label = match oid {
                [0x55, 0x04, 0x03] => "CN",
                [0x55, 0x04, 0x06] => "C",
                [0x55, 0x04, 0x07] => "L",
                [0x55, 0x04, 0x08] => "ST",
                [0x55, 0x04, 0x0a] => "O",
                [0x55, 0x04, 0x0b] => "OU",
                _ => "",
            };
            if label == "CN" && common_name.is_none() {
                common_name = Some(value.clone());
            }
            if !label.is_empty() {
                parts.push(format!("{label}={value}"));
            }
        }
    }
    common_name.or_else(|| (!parts.is_empty()).then(|| parts.join(", ")))
}

/// One DER TLV: (tag, contents, bytes after it).
fn der_next(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *input.first()?;
    let first = *input.get(1)?;
    let (len, header) = if first < 0x80 {
        (first as usize, 2)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 {
            return None;
        }
        let bytes = input.get(2..2 + n)?;
        (
            bytes.iter().fold(0usize, |acc, b| (acc << 8) | *b as usize),
            2 + n,
        )
    };
    let end = header.checked_add(len)?;
    Some((tag, input.get(header..end)?, input.get(end..)?))
}

fn der_string(tag: u8, value: &[u8]) -> String {
    match tag {
        // BMPString is UTF-16BE.
        0x1e => {
            let units: Vec<u16> = value
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16_lossy(&units)
        }
        _ => String::from_utf8_lossy(value).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn openssl(args: &[&str], dir: &std::path::Path) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn issuer_of_a_real_certificate() {
        let dir = tempfile::tempdir().expect("temp dir");
        openssl(
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/C=DE/O=Example Corp/CN=Example Inspection CA",
            ],
            dir.path(),
        );
        let der = CertificateDer::from_pem_file(dir.path().join("ca.pem")).expect("PEM parses");
        assert_eq!(issuer_name(&der), "Example Inspection CA");

        // Without a CN the rest of the name stands in for it.
        openssl(
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "o.key",
                "-out",
                "o.pem",
                "-days",
                "2",
                "-subj",
                "/C=DE/O=No Common Name Ltd",
            ],
            dir.path(),
        );
        let der = CertificateDer::from_pem_file(dir.path().join("o.pem")).expect("PEM parses");
        assert_eq!(issuer_name(&der), "C=DE, O=No Common Name Ltd");
    }

    #[test]
    fn garbage_is_an_unknown_issuer() {
        assert_eq!(issuer_name(b""), "unknown issuer");
        assert_eq!(issuer_name(&[0x30, 0x82, 0xff]), "unknown issuer");
        assert_eq!(
            issuer_name(&[0x30, 0x03, 0x02, 0x01, 0x00]),
            "unknown issuer"
        );
    }

    #[test]
    fn unreadable_extra_ca_file_is_not_fatal() {
        let env = Env::new(
            [
                (
                    "NODE_EXTRA_CA_CERTS".to_string(),
                    "/nonexistent/ca.pem".to_string(),
                ),
                (
                    "METABOB_EXTRA_CA_CERTS".to_string(),
                    "/nonexistent/other.pem".to_string(),
                ),
                ("METABOB_NO_SYSTEM_CA".to_string(), "1".to_string()),
            ],
            "/",
        );
        assert_eq!(
            root_store(&env).roots.len(),
            webpki_roots::TLS_SERVER_ROOTS.len()
        );
    }
}
