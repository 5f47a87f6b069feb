//! A TLS upstream configured through a kubeconfig: the CA bundle and bearer token come from
//! kube's config inference, and the upstream connection uses HTTP/2 when the server offers
//! it through ALPN. Upgrades still go over HTTP/1.1.

mod support;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use http::{Request, Response, StatusCode, Version};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::raw::*;
use support::servers::gateway;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use watchgate::body;
use watchgate::config::{GatewayConfig, ServeArgs};
use watchgate::server::Gateway;

const CA: &str = include_str!("fixtures/tls/ca.crt");
const CERT: &str = include_str!("fixtures/tls/server.crt");
const KEY: &str = include_str!("fixtures/tls/server.key");

#[derive(Debug, Clone)]
struct Seen {
    version: Version,
    path: String,
    authorization: Option<String>,
    user: Option<String>,
}

/// An HTTPS upstream offering h2 and http/1.1; records each request, echoes on upgrade.
async fn tls_stub() -> (
    std::net::SocketAddr,
    Arc<Mutex<Vec<Seen>>>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    let certs = vec![CertificateDer::from_pem_slice(CERT.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(KEY.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let accepted = connections.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let log = log.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = service_fn(move |mut req: Request<hyper::body::Incoming>| {
                    let log = log.clone();
                    async move {
                        let h = |n: &str| {
                            req.headers()
                                .get(n)
                                .map(|v| v.to_str().unwrap().to_string())
                        };
                        log.lock().unwrap().push(Seen {
                            version: req.version(),
                            path: req.uri().path().to_string(),
                            authorization: h("authorization"),
                            user: h("impersonate-user"),
                        });
                        if req.headers().contains_key("upgrade") {
                            let on = hyper::upgrade::on(&mut req);
                            tokio::spawn(async move {
                                let mut io = TokioIo::new(on.await.unwrap());
                                let mut buf = [0u8; 64];
                                let n = io.read(&mut buf).await.unwrap();
                                io.write_all(&buf[..n]).await.unwrap();
                            });
                            return Ok::<_, Infallible>(
                                Response::builder()
                                    .status(StatusCode::SWITCHING_PROTOCOLS)
                                    .header("connection", "Upgrade")
                                    .header("upgrade", "SPDY/3.1")
                                    .body(body::empty())
                                    .unwrap(),
                            );
                        }
                        Ok(Response::new(body::full("{\"kind\":\"PodList\"}")))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (addr, seen, connections)
}

#[tokio::test]
async fn kubeconfig_ca_and_token_reach_a_tls_upstream_over_http2() {
    let (addr, seen, connections) = tls_stub().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    let ca_b64 = base64::engine::general_purpose::STANDARD.encode(CA);
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\n\
             clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority-data: {ca_b64}\n\
             users:\n- name: u\n  user:\n    token: kubeconfig-token\n    as: impersonated-admin\n\
             contexts:\n- name: test\n  context: {{cluster: c, user: u}}\n",
            port = addr.port()
        ),
    )
    .unwrap();
    // Exactly the flags a user would type.
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }
    let args = <Cli as clap::Parser>::try_parse_from([
        "watchgate".as_ref(),
        "--port=0".as_ref(),
        "--admin-port=0".as_ref(),
        "--kubeconfig".as_ref(),
        kubeconfig.as_os_str(),
    ])
    .unwrap()
    .serve;
    // Nothing cached: the stub answers (and counts) only the test's requests.
    let mut cfg = GatewayConfig::from_args(&args).await.unwrap();
    cfg.cache = None;
    let gw = Gateway::start(cfg).await.unwrap();

    // Two requests from two downstream connections share one h2 upstream connection.
    for _ in 0..2 {
        let (parts, bytes) = get(gw.addr(), "/api/v1/pods").await;
        assert_eq!(parts.status, 200);
        assert_eq!(bytes, "{\"kind\":\"PodList\"}");
    }
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2);
        for s in seen.iter() {
            assert_eq!(s.version, Version::HTTP_2, "ALPN chose h2");
            assert_eq!(s.authorization.as_deref(), Some("Bearer kubeconfig-token"));
            assert_eq!(s.user.as_deref(), Some("impersonated-admin"));
        }
    }
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one pooled h2 connection"
    );

    // An upgrade goes over HTTP/1.1 (upgrades do not exist in HTTP/2), still over TLS.
    let mut conn = TcpStream::connect(gw.addr()).await.unwrap();
    conn.write_all(b"POST /api/v1/namespaces/a/pods/p/exec HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
        .await
        .unwrap();
    assert!(read_head(&mut conn).await.starts_with("HTTP/1.1 101"));
    conn.write_all(b"over tls").await.unwrap();
    let mut got = [0u8; 8];
    conn.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"over tls");
    let last = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last.version, Version::HTTP_11);
    assert_eq!(last.path, "/api/v1/namespaces/a/pods/p/exec");
    assert_eq!(
        last.authorization.as_deref(),
        Some("Bearer kubeconfig-token")
    );
}

#[tokio::test]
async fn an_untrusted_upstream_certificate_is_a_503_status() {
    let (addr, seen, _) = tls_stub().await;
    // No CA configured: the platform trust store does not know the test CA.
    let gw = gateway(&format!("https://127.0.0.1:{}", addr.port())).await;
    let (parts, bytes) = get(gw.addr(), "/api/v1/pods").await;
    assert_eq!(parts.status, 503);
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["reason"], "ServiceUnavailable");
    assert!(seen.lock().unwrap().is_empty());
}
