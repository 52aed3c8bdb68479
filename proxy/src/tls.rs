//! TLS (rustls, through Pingora). On the proxy listener: the certificate and key PEM files,
//! checked whenever they are loaded (readable, matching, valid now), and served through a
//! resolver whose certificate is replaced in place on reload: connections already open keep the
//! certificate they were accepted with, new handshakes get the new one, none is dropped. With
//! `client_ca_file`, the listener asks for client certificates (mTLS), required or optional,
//! verified against that bundle, which is reloaded with the certificate; the verified
//! certificate of a connection is kept in Pingora's TLS digest ([`PeerCert`]). To upstreams:
//! the name to send and verify, the CA bundle to verify against, and a client certificate.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use http::HeaderValue;
use pingora::listeners::tls::TlsSettings;
use pingora::listeners::{ALPN, TlsAccept};
use pingora::protocols::tls::TlsRef;
use pingora::tls::sign::CertifiedKey;
use pingora::tls::{
    CertificateDer, ClientCertVerified, ClientCertVerifier, ClientHello, CryptoProvider,
    DigitallySignedStruct, HandshakeSignatureValid, PrivateKeyDer, ResolvesServerCert,
    RootCertStore, SignatureScheme, UnixTime, WebPkiClientVerifier,
};
use pingora::utils::tls::{CertKey, WrappedX509, parse_x509};
use resource_server::CertThumbprint;
use resource_server::client_cert::escaped_pem;
use resource_server::metrics::Scrape;
use rustls::DistinguishedName;
use x509_parser::pem::Pem;

/// A certificate this close to its expiry is logged as a warning whenever it is loaded.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 24 * 3600);

/// The `tls:` section of a listener: PEM files of the certificate chain (leaf first) and of its
/// private key (PKCS#8, PKCS#1 RSA or SEC1 EC, unencrypted); client certificates, if asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub client_auth: Option<ClientAuth>,
}

/// Client certificates on a listener (mTLS): the CA bundle (PEM) they must chain to, and
/// whether a connection without one is refused (`required`) or let through (`optional`: its
/// requests have no certificate, and certificate-bound tokens are refused on them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientAuth {
    pub ca_file: PathBuf,
    pub required: bool,
}

/// Why a certificate and key cannot be served. `field` is `cert_file`, `key_file` or
/// `client_ca_file`.
#[derive(Debug, thiserror::Error)]
#[error("tls.{field} = {}: {message}", file.display())]
pub struct CertError {
    pub field: &'static str,
    pub file: PathBuf,
    pub message: String,
}

/// A loaded certificate and key, ready to serve.
#[derive(Debug)]
pub struct ServerCert {
    pub key: Arc<CertifiedKey>,
    /// The leaf's validity (unix seconds).
    pub not_before: i64,
    pub not_after: i64,
    pub subject: String,
    /// The client-certificate verifier, built from the CA bundle of `client_auth`.
    pub clients: Option<Arc<dyn ClientCertVerifier>>,
}

/// Reads and checks `files` as of `now` (unix seconds): both readable PEM, a certificate chain and
/// a private key the ring provider can sign with, the key matching the leaf, the leaf valid now.
pub fn load(files: &TlsFiles, now: i64) -> Result<ServerCert, CertError> {
    let cert_err = |message: String| CertError {
        field: "cert_file",
        file: files.cert_file.clone(),
        message,
    };
    let key_err = |message: String| CertError {
        field: "key_file",
        file: files.key_file.clone(),
        message,
    };
    let certs: Vec<CertificateDer<'static>> = pem_blocks(&files.cert_file)
        .map_err(cert_err)?
        .into_iter()
        .filter(|p| p.label == "CERTIFICATE")
        .map(|p| CertificateDer::from(p.contents))
        .collect();
    let Some(leaf) = certs.first() else {
        return Err(cert_err("no CERTIFICATE block (PEM) in the file".into()));
    };
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| cert_err(format!("the first certificate cannot be parsed: {e}")))?;
    let validity = parsed.validity();
    let (not_before, not_after) = (
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    );
    if now < not_before {
        return Err(cert_err(format!(
            "the certificate is not valid yet (not before {})",
            validity.not_before
        )));
    }
    if now >= not_after {
        return Err(cert_err(format!(
            "the certificate has expired (not after {})",
            validity.not_after
        )));
    }
    let subject = parsed.subject().to_string();

    let key_pem = pem_blocks(&files.key_file)
        .map_err(key_err)?
        .into_iter()
        .find(|p| p.label.ends_with("PRIVATE KEY"))
        .ok_or_else(|| key_err("no PRIVATE KEY block (PEM) in the file".into()))?;
    if key_pem.label.contains("ENCRYPTED") {
        return Err(key_err(
            "the private key is encrypted; give it unencrypted".into(),
        ));
    }
    let key = PrivateKeyDer::try_from(key_pem.contents)
        .map_err(|e| key_err(format!("malformed private key: {e}")))?;
    let signer = provider()
        .ok_or_else(|| key_err("no rustls crypto provider installed".into()))?
        .key_provider
        .load_private_key(key)
        .map_err(|e| key_err(format!("unusable private key: {e}")))?;
    let key = CertifiedKey::new(certs, signer);
    key.keys_match().map_err(|_| {
        key_err(format!(
            "the private key does not match the certificate in {}",
            files.cert_file.display()
        ))
    })?;
    let clients = files
        .client_auth
        .as_ref()
        .map(client_verifier)
        .transpose()?;
    Ok(ServerCert {
        key: Arc::new(key),
        not_before,
        not_after,
        subject,
        clients,
    })
}

/// The verifier of client certificates against `auth`'s CA bundle (each certificate in it a
/// trust anchor).
fn client_verifier(auth: &ClientAuth) -> Result<Arc<dyn ClientCertVerifier>, CertError> {
    let err = |message: String| CertError {
        field: "client_ca_file",
        file: auth.ca_file.clone(),
        message,
    };
    let mut roots = RootCertStore::empty();
    for cert in load_ca(&auth.ca_file).map_err(err)?.iter() {
        roots
            .add(CertificateDer::from(cert.borrow_raw_cert().clone()))
            .map_err(|e| err(format!("not a usable CA certificate: {e}")))?;
    }
    provider().ok_or_else(|| err("no rustls crypto provider installed".into()))?;
    let builder = WebPkiClientVerifier::builder(Arc::new(roots));
    let builder = if auth.required {
        builder
    } else {
        builder.allow_unauthenticated()
    };
    builder.build().map_err(|e| err(format!("{e}")))
}

/// A client certificate and key for TLS to an upstream, checked as a listener's are ([`load`]).
pub fn load_client_pair(files: &TlsFiles) -> Result<Arc<CertKey>, CertError> {
    load(files, unix_now())?;
    let cert_err = |message: String| CertError {
        field: "client_cert_file",
        file: files.cert_file.clone(),
        message,
    };
    let certs: Vec<Vec<u8>> = pem_blocks(&files.cert_file)
        .map_err(cert_err)?
        .into_iter()
        .filter(|p| p.label == "CERTIFICATE")
        .map(|p| p.contents)
        .collect();
    let key = pem_blocks(&files.key_file)
        .ok()
        .and_then(|blocks| {
            blocks
                .into_iter()
                .find(|p| p.label.ends_with("PRIVATE KEY"))
        })
        .map(|p| p.contents)
        .unwrap_or_default();
    // Pingora reads the key back by guessing its DER form: make sure it will.
    if PrivateKeyDer::try_from(key.clone()).is_err() {
        return Err(CertError {
            field: "client_key_file",
            file: files.key_file.clone(),
            message: "the private key's DER form is not recognised".into(),
        });
    }
    Ok(Arc::new(CertKey::new(certs, key)))
}

/// The verified client certificate of a connection, kept in its TLS digest's extension from the
/// end of the handshake: its thumbprint for the gate, its escaped PEM for upstreams.
#[derive(Debug)]
pub struct PeerCert {
    pub thumbprint: CertThumbprint,
    /// [`resource_server::CLIENT_CERT_HEADER`]'s value.
    pub escaped_pem: HeaderValue,
}

impl PeerCert {
    /// The client certificate of the connection whose `digest` this is, if it presented one.
    pub fn of(digest: Option<&pingora::protocols::Digest>) -> Option<&PeerCert> {
        digest?.ssl_digest.as_ref()?.extension.get::<PeerCert>()
    }
}

/// Keeps the client certificate in the digest once the handshake is done.
struct KeepPeerCert;

#[async_trait]
impl TlsAccept for KeepPeerCert {
    async fn handshake_complete_callback(
        &self,
        tls: &TlsRef,
    ) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        let der = tls.peer_certificate_der()?;
        let escaped_pem = HeaderValue::from_str(&escaped_pem(der)).ok()?;
        Some(Arc::new(PeerCert {
            thumbprint: CertThumbprint::of_der(der),
            escaped_pem,
        }))
    }
}

/// TLS to one upstream.
#[derive(Clone)]
pub struct UpstreamTls {
    /// Sent as SNI (unless an IP address) and verified against the certificate's names.
    pub sni: String,
    /// The CA bundle the upstream's certificate must chain to; `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    pub ca: Option<Arc<[WrappedX509]>>,
    /// `false` only when the file says `insecure_skip_verify: true`.
    pub verify: bool,
    /// The client certificate shown to the upstream (its files, and the pair loaded), if any.
    /// Pingora keeps connections with different client certificates apart in its pool.
    pub client: Option<(TlsFiles, Arc<CertKey>)>,
    /// See [`UpstreamTls::pool_key`]; computed once.
    pool_key: u64,
}

impl UpstreamTls {
    pub fn new(
        sni: String,
        ca_file: Option<PathBuf>,
        ca: Option<Arc<[WrappedX509]>>,
        verify: bool,
        client: Option<(TlsFiles, Arc<CertKey>)>,
    ) -> UpstreamTls {
        let mut tls = UpstreamTls {
            sni,
            ca_file,
            ca,
            verify,
            client,
            pool_key: 0,
        };
        tls.pool_key = tls.roots_hash();
        tls
    }

    /// Keeps this upstream's pooled connections apart from those of another upstream at the same
    /// address and name but with other roots: Pingora 0.9's connection pool key (`HttpPeer`'s
    /// hash) has the SNI and whether to verify, not the CA, so a connection verified against one
    /// bundle would otherwise be reused for an upstream that trusts another (or the system's).
    pub fn pool_key(&self) -> u64 {
        self.pool_key
    }

    fn roots_hash(&self) -> u64 {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let mut h = DefaultHasher::new();
        self.ca_file.hash(&mut h);
        for cert in self.ca.iter().flat_map(|c| c.iter()) {
            cert.borrow_raw_cert().hash(&mut h);
        }
        self.ca.is_some().hash(&mut h);
        h.finish()
    }
}

impl PartialEq for UpstreamTls {
    fn eq(&self, other: &Self) -> bool {
        let der = |ca: &Option<Arc<[WrappedX509]>>| {
            ca.as_ref().map(|c| {
                c.iter()
                    .map(|x| x.borrow_raw_cert().clone())
                    .collect::<Vec<_>>()
            })
        };
        let pair = |c: &Option<(TlsFiles, Arc<CertKey>)>| {
            c.as_ref()
                .map(|(files, key)| (files.clone(), key.leaf().borrow_raw_cert().clone()))
        };
        self.sni == other.sni
            && self.ca_file == other.ca_file
            && self.verify == other.verify
            && der(&self.ca) == der(&other.ca)
            && pair(&self.client) == pair(&other.client)
    }
}

impl Eq for UpstreamTls {}

impl fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("sni", &self.sni)
            .field("ca_file", &self.ca_file)
            .field("verify", &self.verify)
            .field(
                "client_cert_file",
                &self.client.as_ref().map(|c| &c.0.cert_file),
            )
            .finish()
    }
}

/// The certificates of a CA bundle (PEM), each parsed.
pub fn load_ca(path: &Path) -> Result<Arc<[WrappedX509]>, String> {
    let mut certs = Vec::new();
    for block in pem_blocks(path)? {
        if block.label != "CERTIFICATE" {
            continue;
        }
        if let Err(e) = x509_parser::parse_x509_certificate(&block.contents) {
            return Err(format!("a certificate cannot be parsed: {e}"));
        }
        certs.push(WrappedX509::new(block.contents, parse_x509));
    }
    if certs.is_empty() {
        return Err("no CERTIFICATE block (PEM) in the file".into());
    }
    Ok(certs.into())
}

/// The process-wide rustls crypto provider (ring, installed if none was).
fn provider() -> Option<&'static Arc<CryptoProvider>> {
    pingora::tls::install_default_crypto_provider();
    CryptoProvider::get_default()
}

fn pem_blocks(path: &Path) -> Result<Vec<Pem>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    Pem::iter_from_buffer(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM file: {e}"))
}

/// The served certificate of one listener, replaced on reload.
pub struct CertStore {
    files: TlsFiles,
    current: RwLock<Arc<ServerCert>>,
    reloads: AtomicU64,
    reloads_failed: AtomicU64,
}

impl fmt::Debug for CertStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertStore")
            .field("files", &self.files)
            .field("subject", &self.current().subject)
            .finish()
    }
}

impl CertStore {
    /// Loads `files` (see [`load`]).
    pub fn open(files: TlsFiles) -> Result<Arc<CertStore>, CertError> {
        let cert = load(&files, unix_now())?;
        warn_if_expiring(&files, &cert);
        Ok(Arc::new(CertStore {
            files,
            current: RwLock::new(Arc::new(cert)),
            reloads: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
        }))
    }

    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// The certificate served to new handshakes.
    pub fn current(&self) -> Arc<ServerCert> {
        match self.current.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Re-reads the files; a pair that fails [`load`] is refused with a log line and the
    /// certificate in force stays.
    pub fn reload(&self) -> Result<(), CertError> {
        match load(&self.files, unix_now()) {
            Ok(cert) => {
                warn_if_expiring(&self.files, &cert);
                tracing::info!(
                    subject = %cert.subject,
                    not_after = cert.not_after,
                    file = %self.files.cert_file.display(),
                    "TLS certificate reloaded"
                );
                let cert = Arc::new(cert);
                match self.current.write() {
                    Ok(mut c) => *c = cert,
                    Err(poisoned) => *poisoned.into_inner() = cert,
                }
                self.reloads.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(error) => {
                self.reloads_failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(%error, "TLS certificate reload refused; the certificate in force stays");
                Err(error)
            }
        }
    }

    /// Pingora's listener settings: TLS 1.2 and 1.3, ALPN `h2` then `http/1.1`, the certificate
    /// from this store at each handshake. With `clients` (the proxy listener) and
    /// `client_auth`, client certificates are asked for, verified by this store's verifier in
    /// force and kept in the connection's digest ([`PeerCert`]); the admin and forward-auth
    /// listeners never ask for one.
    pub fn settings(self: &Arc<Self>, clients: bool) -> TlsSettings {
        let mut settings = TlsSettings::with_callbacks(Box::new(KeepPeerCert))
            .unwrap_or_else(|_| unreachable!("rustls settings without files never fail"));
        settings.set_cert_resolver(self.clone());
        if clients && self.files.client_auth.is_some() {
            settings.set_client_cert_verifier(Arc::new(ClientCerts(self.clone())));
        }
        settings.set_alpn(ALPN::H2H1);
        settings
    }

    /// The files watched for a reload: the certificate, its key, the client CA bundle.
    pub fn watched(&self) -> Vec<PathBuf> {
        let mut files = vec![self.files.cert_file.clone(), self.files.key_file.clone()];
        files.extend(self.files.client_auth.as_ref().map(|c| c.ca_file.clone()));
        files
    }

    /// Writes the served certificate's expiry, and reloads by result.
    pub fn collect(&self, listener: &'static str, s: &mut Scrape) -> std::fmt::Result {
        s.gauges(
            "tls_certificate_expiry_seconds",
            "When the served TLS certificate expires (unix seconds)",
            [([("listener", listener)], self.current().not_after)],
        )?;
        s.counters(
            "tls_certificate_reloads",
            "TLS certificate reloads, by result",
            [
                ("ok", self.reloads.load(Ordering::Relaxed)),
                ("refused", self.reloads_failed.load(Ordering::Relaxed)),
            ]
            .map(|(result, n)| ([("listener", listener), ("result", result)], n)),
        )
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current().key.clone())
    }
}

/// The client-certificate verifier of a listener: the one loaded with the certificate in force,
/// so that a reload replaces the CA bundle for new handshakes too.
#[derive(Debug)]
struct ClientCerts(Arc<CertStore>);

impl ClientCerts {
    fn verifier(&self) -> Result<Arc<dyn ClientCertVerifier>, rustls::Error> {
        self.0
            .current()
            .clients
            .clone()
            .ok_or_else(|| rustls::Error::General("no client CA bundle loaded".into()))
    }
}

impl ClientCertVerifier for ClientCerts {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.0
            .files
            .client_auth
            .as_ref()
            .is_some_and(|c| c.required)
    }

    /// No CA names are sent in the certificate request (the bundle may change under a reload,
    /// and the names cannot be lent out of it): a client offers the certificate it has.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.verifier()?
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier()?.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier()?.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier()
            .map(|v| v.supported_verify_schemes())
            .unwrap_or_default()
    }
}

fn warn_if_expiring(files: &TlsFiles, cert: &ServerCert) {
    let left = cert.not_after.saturating_sub(unix_now());
    if left < EXPIRY_WARNING.as_secs() as i64 {
        tracing::warn!(
            file = %files.cert_file.display(),
            subject = %cert.subject,
            days_left = left / 86_400,
            "the TLS certificate expires soon"
        );
    }
}

pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
