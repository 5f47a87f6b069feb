//! Certificates made in the test (rcgen, in a temporary directory) and TLS clients for
//! the gateway's HTTPS listener.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use tempfile::TempDir;
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use watchgate::body::Body;
use watchgate::server::tls::TlsFiles;

/// A CA that signs certificates into files of its directory.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pub cert: PathBuf,
}

/// A certificate and its key, as PEM files.
#[derive(Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The files of one test: a serving CA with the gateway's serving certificate, and CAs
/// for client certificates.
pub struct Pki {
    dir: TempDir,
    /// Signs the gateway's serving certificates (what the clients trust).
    pub serving_ca: Ca,
    /// The gateway's serving certificate for 127.0.0.1 and localhost.
    pub serving: Pair,
}

fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params
}

impl Pki {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir for certificates");
        let serving_ca = Ca::new(dir.path(), "serving-ca");
        let serving = serving_ca.serving(dir.path(), "serving");
        Self {
            dir,
            serving_ca,
            serving,
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Another CA (client users, front proxies) in this directory.
    pub fn ca(&self, name: &str) -> Ca {
        Ca::new(self.dir.path(), name)
    }

    /// The gateway's TLS files: the serving pair, checked at the default interval.
    pub fn files(&self) -> TlsFiles {
        TlsFiles::new(self.serving.cert.clone(), self.serving.key.clone())
    }
}

impl Ca {
    fn new(dir: &Path, name: &str) -> Self {
        let issuer = CertifiedIssuer::self_signed(ca_params(name), KeyPair::generate().unwrap())
            .expect("self-signed CA");
        let cert = dir.join(format!("{name}.crt"));
        std::fs::write(&cert, issuer.pem()).unwrap();
        Self { issuer, cert }
    }

    fn sign(&self, dir: &Path, file: &str, params: CertificateParams) -> Pair {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        let pair = Pair {
            cert: dir.join(format!("{file}.crt")),
            key: dir.join(format!("{file}.key")),
        };
        std::fs::write(&pair.cert, cert.pem()).unwrap();
        std::fs::write(&pair.key, key.serialize_pem()).unwrap();
        pair
    }

    /// A serving certificate for 127.0.0.1 and localhost, as `<file>.crt`/`.key`.
    pub fn serving(&self, dir: &Path, file: &str) -> Pair {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, file);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(dir, file, params)
    }

    /// A client certificate with common name `cn` and organization `org`.
    pub fn client(&self, dir: &Path, cn: &str, org: Option<&str>) -> Pair {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some(o) = org {
            params.distinguished_name.push(DnType::OrganizationName, o);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(dir, &format!("client-{cn}"), params)
    }
}

/// A rustls client trusting `ca`, offering `alpn`, with a client certificate if given.
pub fn client_config(ca: &Path, alpn: &[&[u8]], client: Option<&Pair>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut cfg = match client {
        Some(pair) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(&pair.cert)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_file(&pair.key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

/// A TLS connection to `addr` (server name 127.0.0.1).
pub async fn connect(
    addr: std::net::SocketAddr,
    cfg: Arc<ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::IpAddress(addr.ip().into());
    TlsConnector::from(cfg).connect(name, tcp).await
}

/// The DER of the serving certificate a fresh connection is handed.
pub async fn served_certificate(addr: std::net::SocketAddr, ca: &Path) -> Vec<u8> {
    let tls = connect(addr, client_config(ca, &[b"http/1.1"], None))
        .await
        .expect("TLS handshake");
    let (_, conn) = tls.get_ref();
    conn.peer_certificates().expect("a server certificate")[0].to_vec()
}

/// An HTTP/1.1 client over TLS (ALPN `http/1.1`).
pub async fn h1(
    addr: std::net::SocketAddr,
    cfg: Arc<ClientConfig>,
) -> hyper::client::conn::http1::SendRequest<Body> {
    let tls = connect(addr, cfg).await.expect("TLS handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .expect("HTTP/1.1 handshake");
    tokio::spawn(conn);
    send
}

/// An HTTP/2 client over TLS: asserts that ALPN chose `h2`.
pub async fn h2(
    addr: std::net::SocketAddr,
    cfg: Arc<ClientConfig>,
) -> hyper::client::conn::http2::SendRequest<Body> {
    let tls = connect(addr, cfg).await.expect("TLS handshake");
    assert_eq!(
        tls.get_ref().1.alpn_protocol(),
        Some(&b"h2"[..]),
        "ALPN negotiates h2"
    );
    let (send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(tls),
    )
    .await
    .expect("HTTP/2 handshake");
    tokio::spawn(conn);
    send
}

/// A GET of `path` with a bearer token.
pub fn get(path: &str, token: Option<&str>) -> Request<Body> {
    let mut req = Request::get(path).header("host", "127.0.0.1");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    req.body(watchgate::body::empty()).unwrap()
}

/// Reads a response body's frames until `want` lines have arrived (bounded by the caller).
pub async fn read_lines(body: &mut Incoming, want: usize) -> Vec<String> {
    use http_body_util::BodyExt as _;
    let mut buf = Vec::new();
    let mut lines = Vec::new();
    while lines.len() < want {
        let frame = body
            .frame()
            .await
            .expect("the stream goes on")
            .expect("a frame");
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
            while let Some(i) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=i).collect();
                lines.push(String::from_utf8_lossy(&line[..i]).into_owned());
            }
        }
    }
    lines
}
