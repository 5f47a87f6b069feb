//! TLS serving of the API listener (`--tls-cert-file`, `--tls-private-key-file`,
//! `--client-ca-file`, `--requestheader-client-ca-file`), with rustls and the `ring`
//! provider, as kube-apiserver serves:
//!
//! - ALPN offers `h2` and `http/1.1`; the connection speaks what was negotiated (no ALPN:
//!   HTTP/1.1, as Go's server). HTTP/2 over TLS is only reached through ALPN.
//! - With a client CA (either file), the handshake asks for a client certificate but does
//!   not require one and accepts any that the client proves it holds the key of (Go's
//!   `tls.RequestClientCert`, which kube-apiserver uses); the certificate is verified after
//!   the handshake against each CA for its own purpose (`auth::x509`), so a certificate
//!   that does not verify costs the client its certificate identity, not its connection.
//! - The files are read again every [`TlsFiles::reload_interval`] (kube-apiserver's
//!   dynamic serving certificate checks its files too); when their contents change, the
//!   new set is loaded and new handshakes use it. A set that does not load (a key that
//!   does not match its certificate, half-written files) is logged and the previous one
//!   stays in use. Open connections keep the certificate they started with.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::crypto::{self, CryptoProvider, WebPkiSupportedAlgorithms};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};

use super::express::{DirectWrite, TryWrite};
use super::stall::StallGuard;
use crate::auth::x509::PeerCert;
pub use crate::config::TlsFiles;
use crate::drain::DrainWatch;

/// Why a set of TLS files does not load.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {}: {source}", .path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("{}: not PEM: {source}", .path.display())]
    Pem {
        path: PathBuf,
        source: tokio_rustls::rustls::pki_types::pem::Error,
    },
    #[error("{}: no certificate in it", .path.display())]
    NoCertificate { path: PathBuf },
    #[error("{}: no CA certificate in it that can be used", .path.display())]
    NoCa { path: PathBuf },
    #[error("{}: {source}", .path.display())]
    Ca {
        path: PathBuf,
        source: tokio_rustls::rustls::server::VerifierBuilderError,
    },
    #[error("the serving certificate {} and key {}: {source}", .cert.display(), .key.display())]
    CertKey {
        cert: PathBuf,
        key: PathBuf,
        source: tokio_rustls::rustls::Error,
    },
}

/// The files' bytes as last read: a reload happens when they change.
#[derive(PartialEq, Eq)]
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
    requestheader_ca: Option<Vec<u8>>,
}

/// One loaded set: what a handshake uses and what verifies its client certificate.
pub struct Loaded {
    config: Arc<ServerConfig>,
    client_ca: Option<Arc<dyn ClientCertVerifier>>,
    requestheader_ca: Option<Arc<dyn ClientCertVerifier>>,
}

impl Loaded {
    /// What the client's certificate (if it sent one) proves, per purpose.
    fn peer_cert(&self, chain: Option<&[CertificateDer<'static>]>) -> Option<Arc<PeerCert>> {
        PeerCert::verify(
            chain?,
            self.client_ca.as_deref(),
            self.requestheader_ca.as_deref(),
        )
        .map(Arc::new)
    }
}

/// The API listener's TLS: the current set of files, reloaded when they change.
pub struct TlsServing {
    files: TlsFiles,
    current: RwLock<Arc<Loaded>>,
    /// The contents last read, loaded or not (a set that does not load is reported once,
    /// not at every check; a file that cannot be read is reported at every check).
    seen: Mutex<Contents>,
}

impl fmt::Debug for TlsServing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsServing")
            .field("files", &self.files)
            .finish()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

fn read_all(files: &TlsFiles) -> Result<Contents, TlsError> {
    Ok(Contents {
        cert: read(&files.cert)?,
        key: read(&files.key)?,
        client_ca: files.client_ca.as_deref().map(read).transpose()?,
        requestheader_ca: files.requestheader_ca.as_deref().map(read).transpose()?,
    })
}

fn certs(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

fn ca_verifier(
    path: &Path,
    pem: &[u8],
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs(path, pem)?);
    if added == 0 {
        return Err(TlsError::NoCa {
            path: path.to_owned(),
        });
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|source| TlsError::Ca {
            path: path.to_owned(),
            source,
        })
}

fn load(files: &TlsFiles, c: &Contents) -> Result<Loaded, TlsError> {
    let provider = provider();
    let chain = certs(&files.cert, &c.cert)?;
    let key = PrivateKeyDer::from_pem_slice(&c.key).map_err(|source| TlsError::Pem {
        path: files.key.clone(),
        source,
    })?;
    let client_ca = match (&files.client_ca, &c.client_ca) {
        (Some(path), Some(pem)) => Some(ca_verifier(path, pem, &provider)?),
        _ => None,
    };
    let requestheader_ca = match (&files.requestheader_ca, &c.requestheader_ca) {
        (Some(path), Some(pem)) => Some(ca_verifier(path, pem, &provider)?),
        _ => None,
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions");
    let hints: Vec<DistinguishedName> = [&client_ca, &requestheader_ca]
        .into_iter()
        .flatten()
        .flat_map(|v| v.root_hint_subjects().iter().cloned())
        .collect();
    let builder = if client_ca.is_some() || requestheader_ca.is_some() {
        builder.with_client_cert_verifier(Arc::new(RequestClientCert {
            hints,
            algorithms: provider.signature_verification_algorithms,
        }))
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|source| TlsError::CertKey {
            cert: files.cert.clone(),
            key: files.key.clone(),
            source,
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Loaded {
        config: Arc::new(config),
        client_ca,
        requestheader_ca,
    })
}

impl TlsServing {
    /// Loads the files; an error here stops the start-up.
    pub fn load(files: TlsFiles) -> Result<Arc<Self>, TlsError> {
        let contents = read_all(&files)?;
        let loaded = load(&files, &contents)?;
        Ok(Arc::new(Self {
            files,
            current: RwLock::new(Arc::new(loaded)),
            seen: Mutex::new(contents),
        }))
    }

    fn current(&self) -> Arc<Loaded> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reads the files again and loads them if they changed: `Ok(true)` when a new set is
    /// in use, `Ok(false)` when nothing changed, an error when the changed set does not
    /// load (the previous set stays; the same bad contents are not reported again).
    pub fn reload(&self) -> Result<bool, TlsError> {
        let contents = read_all(&self.files)?;
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if *seen == contents {
            return Ok(false);
        }
        let loaded = load(&self.files, &contents);
        *seen = contents;
        drop(seen);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(loaded?);
        Ok(true)
    }

    /// Checks the files every `reload_interval` until the drain begins.
    pub async fn watch(self: Arc<Self>, drain: DrainWatch) {
        let mut tick = tokio::time::interval(self.files.reload_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let draining = drain.draining();
        tokio::pin!(draining);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = &mut draining => return,
            }
            // Blocking file reads, off the runtime's workers.
            let this = self.clone();
            match tokio::task::spawn_blocking(move || this.reload()).await {
                Ok(Ok(true)) => {
                    tracing::info!(cert = %self.files.cert.display(), "TLS files changed: new connections use the new set")
                }
                Ok(Ok(false)) => {}
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "TLS files changed but do not load; still serving the previous set")
                }
                Err(err) => tracing::warn!(error = %err, "TLS reload task failed"),
            }
        }
    }

    /// Runs the handshake with the current set. The connection, whether it negotiated
    /// `h2`, and what its client certificate proves.
    pub async fn accept(&self, stream: StallGuard<TcpStream>) -> io::Result<Accepted> {
        let loaded = self.current();
        let acceptor = tokio_rustls::TlsAcceptor::from(loaded.config.clone());
        let tls = acceptor.accept(stream).await?;
        let (_, conn) = tls.get_ref();
        let h2 = conn.alpn_protocol() == Some(b"h2");
        let cert = loaded.peer_cert(conn.peer_certificates());
        Ok(Accepted {
            io: TlsIo(tls),
            h2,
            cert,
        })
    }
}

/// A handshake's outcome.
pub struct Accepted {
    pub io: TlsIo,
    pub h2: bool,
    pub cert: Option<Arc<PeerCert>>,
}

/// Asks for a client certificate, requires none, and accepts any whose key the client
/// proves it holds: verification against the CAs happens per purpose afterwards
/// ([`PeerCert::verify`]), as kube-apiserver's `tls.RequestClientCert` leaves it to its
/// authenticators.
#[derive(Debug)]
struct RequestClientCert {
    /// The CAs' subjects, sent in the certificate request so that clients pick a matching
    /// certificate.
    hints: Vec<DistinguishedName>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for RequestClientCert {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, tokio_rustls::rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A TLS connection as the HTTP layers see it. Its writes go through rustls, so they
/// cannot be made from outside the connection's task: no express lane (`express.rs`);
/// a detached HTTP/1.1 watch is written by its connection's task through this stream.
pub struct TlsIo(tokio_rustls::server::TlsStream<StallGuard<TcpStream>>);

impl DirectWrite for TlsIo {
    fn direct_writer(&self) -> Option<Arc<dyn TryWrite>> {
        None
    }
}

impl AsyncRead for TlsIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
