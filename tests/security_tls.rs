//! A secured gateway serving HTTPS (issue 17): kubectl 1.37 through TLS with tokens and
//! with x509 client certificates, front proxies (`--requestheader-*`), certificate reload,
//! ALPN, and watches over TLS on both protocols.
//!
//! Certificates are made in each test (rcgen, `support::tls`); the simulator upstream
//! enforces the demo policy plus the certificate users below (`support::secure`).

mod support;

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt as _;
use serde_json::json;
use support::objects::configmap;
use support::secure::{Secure, ADMIN, ALICE, GATEWAY_USER};
use support::tls::{self as tlsx, Pki};
use support::{wait_until, Kubectl};
use watchgate::auth::authn::RequestHeaderConfig;
use watchgate::auth::SecurityConfig;
use watchgate::server::tls::TlsFiles;
use watchgate::sim::auth::{Policy, DEMO_POLICY};

/// The demo policy plus users known only by certificate: `carol` (x509, writes configmaps)
/// and `dave` (asserted by a front proxy, writes configmaps).
fn policy() -> Arc<Policy> {
    let extra = r#"
  - name: carol
    rules:
      - verbs: [get, list, watch, create]
        resources: [configmaps, pods]
  - name: dave
    rules:
      - verbs: [get, list, watch, create]
        resources: [configmaps, pods]
"#;
    Arc::new(Policy::parse(&format!("{}{extra}", DEMO_POLICY.trim_end())).unwrap())
}

/// A secured gateway serving HTTPS with `files`.
async fn start(files: TlsFiles, security: SecurityConfig) -> Secure {
    Secure::start_configured(policy(), security, |cfg| cfg.tls = Some(files)).await
}

fn addr(env: &Secure) -> std::net::SocketAddr {
    env.gateway.handle().addr()
}

/// kubectl with a kubeconfig that trusts `pki`'s serving CA, authenticating with `token`
/// and/or a client certificate.
fn kubectl(env: &Secure, pki: &Pki, token: Option<&str>, cert: Option<&tlsx::Pair>) -> Kubectl {
    let mut user = String::new();
    if let Some(t) = token {
        user.push_str(&format!("    token: {t}\n"));
    }
    if let Some(c) = cert {
        user.push_str(&format!(
            "    client-certificate: {}\n    client-key: {}\n",
            c.cert.display(),
            c.key.display()
        ));
    }
    if user.is_empty() {
        // No credential at all makes kubectl prompt for a username and password over
        // HTTPS (client-go's basic-auth prompt, which needs a terminal); a username alone
        // is sent as basic auth, which kube-apiserver (since 1.19) and the gateway do not
        // accept: the request carries no credential either knows.
        user.push_str("    username: nobody\n");
    }
    let server = env.gateway.url().to_string();
    assert!(server.starts_with("https://"), "{server}");
    let ca = pki.serving_ca.cert.display().to_string();
    let url = server.clone();
    Kubectl::with_kubeconfig(&url, move |_| {
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {server}
    certificate-authority: {ca}
contexts:
- name: test
  context:
    cluster: test
    user: test
    namespace: default
current-context: test
users:
- name: test
  user:
{user}"
        )
    })
}

/// A GET over a fresh TLS HTTP/1.1 connection: status, `x-watchgate-source`, body.
async fn https_get(
    env: &Secure,
    pki: &Pki,
    client: Option<&tlsx::Pair>,
    token: Option<&str>,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Option<String>, String) {
    let cfg = tlsx::client_config(&pki.serving_ca.cert, &[b"http/1.1"], client);
    let mut send = tlsx::h1(addr(env), cfg).await;
    let mut req = tlsx::get(path, token);
    for (k, v) in headers {
        req.headers_mut().append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    let resp = send.send_request(req).await.expect("a response");
    let status = resp.status().as_u16();
    let source = support::http::source(resp.headers()).map(str::to_string);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, source, String::from_utf8_lossy(&body).into_owned())
}

/// Waits until `path` is answered 200 from the cache over TLS with `token`.
async fn warm(env: &Secure, pki: &Pki, token: &str, path: &str) {
    wait_until(
        &format!("{path} is served from the cache"),
        Duration::from_secs(20),
        || async {
            let (status, source, _) = https_get(env, pki, None, Some(token), path, &[]).await;
            status == 200 && source.as_deref() == Some("cache")
        },
    )
    .await;
}

fn last_line(s: &str) -> String {
    s.trim().lines().last().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_with_a_token_works_over_tls_and_reads_from_the_cache() {
    let pki = Pki::new();
    let env = start(pki.files(), SecurityConfig::default()).await;
    support::watch::put_pod(
        env.sim.handle(),
        "default",
        "web-1",
        json!({}),
        "n1",
        "Running",
    );
    let kubectl = kubectl(&env, &pki, Some(ALICE), None);

    let out = kubectl.ok(&["get", "pods", "-o", "name"]).await;
    assert_eq!(out.trim(), "pod/web-1");
    // kubectl's list (no resourceVersion: a consistent read) is authorized by the gateway
    // and answered by the cache once it is proven fresh (--consistent-reads=cache).
    wait_until(
        "kubectl's consistent list is answered by the cache",
        Duration::from_secs(20),
        || async {
            let out = kubectl.run(&["get", "pods", "-o", "name", "-v=8"]).await;
            out.success()
                && out.stdout.trim() == "pod/web-1"
                && out
                    .stderr
                    .lines()
                    .any(|l| l.contains("X-Watchgate-Source") && l.contains("cache"))
        },
    )
    .await;

    // A read the cache answers (resourceVersion=0), by kubectl over TLS.
    let path = "/api/v1/namespaces/default/pods?resourceVersion=0";
    warm(&env, &pki, ALICE, path).await;
    let out = kubectl.run(&["get", "--raw", path, "-v=8"]).await;
    let body = out.assert_success();
    assert!(body.contains("\"web-1\""), "{body}");
    let stderr = &out.stderr;
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("X-Watchgate-Source") && l.contains("cache")),
        "kubectl was answered from the cache: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_kubectl_gets_the_apiservers_401_over_tls() {
    let pki = Pki::new();
    let env = start(pki.files(), SecurityConfig::default()).await;
    let out = kubectl(&env, &pki, None, None).run(&["get", "pods"]).await;
    // client-go's words for a 401 on discovery.
    assert_eq!(
        last_line(out.assert_failure()),
        "error: You must be logged in to the server (the server has asked for the client to provide credentials)"
    );
    // The Status bytes, as the apiserver (the simulator) writes them.
    let (status, _, body) = https_get(&env, &pki, None, None, "/api/v1/pods", &[]).await;
    let direct = env.direct(None).get("/api/v1/pods").await;
    assert_eq!(status, 401);
    assert_eq!(direct.status, 401);
    assert_eq!(body, direct.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_the_apiservers_403_for_secrets_also_when_they_are_cached() {
    let pki = Pki::new();
    let env = start(pki.files(), SecurityConfig::default()).await;
    let secrets = watchgate::sim::resources::find("", "v1", "secrets").unwrap();
    support::watch::put_object(
        env.sim.handle(),
        secrets,
        "default",
        json!({"kind": "Secret", "apiVersion": "v1",
               "metadata": {"name": "db", "namespace": "default"},
               "data": {"password": "aHVudGVyMg=="}}),
    );
    let path = "/api/v1/namespaces/default/secrets?resourceVersion=0";
    // The admin warms the secrets cache.
    warm(&env, &pki, ADMIN, path).await;

    let alice = kubectl(&env, &pki, Some(ALICE), None);
    let want = "Error from server (Forbidden): secrets is forbidden: User \"alice\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\"";
    // Forwarded (a consistent list): the apiserver refuses it as alice.
    let out = alice.run(&["get", "secrets"]).await;
    assert_eq!(last_line(out.assert_failure()), want);
    // From the cache's side: the gateway refuses it before the cache is read.
    let out = alice.run(&["get", "--raw", path]).await;
    let err = out.assert_failure();
    assert!(!err.contains("aHVudGVyMg=="), "{err}");
    let (status, source, body) = https_get(&env, &pki, None, Some(ALICE), path, &[]).await;
    assert_eq!(status, 403);
    assert_eq!(
        source.as_deref(),
        Some("gateway"),
        "refused by the gateway, not answered by the cache"
    );
    let direct = env.direct(Some(ALICE)).get(path).await;
    assert_eq!(body, direct.text(), "the apiserver's 403, byte for byte");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_x509_client_certificate_authenticates_as_its_cn_and_organization() {
    let pki = Pki::new();
    let users = pki.ca("client-ca");
    let carol = users.client(pki.dir(), "carol", Some("developers"));
    let mut files = pki.files();
    files.client_ca = Some(users.cert.clone());
    let env = start(files, SecurityConfig::default()).await;

    // kubectl with --client-certificate/--client-key (in its kubeconfig), no token.
    let kubectl = kubectl(&env, &pki, None, Some(&carol));
    kubectl
        .ok(&["create", "configmap", "by-carol", "--from-literal=a=b"])
        .await;
    let audit = env.sim.handle().sim().audit.records();
    let write = audit
        .iter()
        .find(|w| w.path == "/api/v1/namespaces/default/configmaps")
        .expect("the write is recorded");
    assert_eq!(write.user, "carol", "the certificate's CN");
    assert_eq!(
        write.groups,
        ["developers", "system:authenticated"],
        "its O"
    );
    assert_eq!(write.impersonator.as_deref(), Some(GATEWAY_USER));
    let ids = &write.extra["authentication.kubernetes.io/credential-id"];
    let der = rustls_der(&carol.cert);
    let digest = ring::digest::digest(&ring::digest::SHA256, &der);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(ids, &[format!("X509SHA256={hex}")]);

    // Reads the cache answers are authorized as carol too.
    let path = "/api/v1/namespaces/default/configmaps?resourceVersion=0";
    let (status, _, body) = https_get(&env, &pki, Some(&carol), None, path, &[]).await;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = https_get(
        &env,
        &pki,
        Some(&carol),
        None,
        "/api/v1/namespaces/default/secrets?resourceVersion=0",
        &[],
    )
    .await;
    assert_eq!(status, 403);
    assert!(body.contains("User \\\"carol\\\" cannot list"), "{body}");

    // A certificate of a CA the gateway does not trust: the handshake succeeds (a client
    // certificate is asked for, not required), the certificate is no credential.
    let stranger_ca = pki.ca("stranger-ca");
    let mallory = stranger_ca.client(pki.dir(), "admin", Some("system:masters"));
    let (status, _, _) = https_get(&env, &pki, Some(&mallory), None, "/api/v1/pods", &[]).await;
    assert_eq!(status, 401);
    // ... and a token still authenticates alongside it (kube's union authenticator).
    let (status, _, _) = https_get(
        &env,
        &pki,
        Some(&mallory),
        Some(ALICE),
        "/api/v1/namespaces/default/pods",
        &[],
    )
    .await;
    assert_eq!(status, 200);
}

fn rustls_der(pem: &std::path::Path) -> Vec<u8> {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    tokio_rustls::rustls::pki_types::CertificateDer::from_pem_file(pem)
        .unwrap()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_proxy_asserts_the_user_with_its_headers() {
    let pki = Pki::new();
    let proxies = pki.ca("front-proxy-ca");
    let proxy = proxies.client(pki.dir(), "front-proxy", None);
    let other_proxy = proxies.client(pki.dir(), "not-allowed", None);
    let users = pki.ca("client-ca");
    let carol = users.client(pki.dir(), "carol", Some("developers"));
    let mut files = pki.files();
    files.client_ca = Some(users.cert.clone());
    files.requestheader_ca = Some(proxies.cert.clone());
    let security = SecurityConfig {
        requestheader: Some(RequestHeaderConfig {
            allowed_names: vec!["front-proxy".into()],
            ..Default::default()
        }),
        ..Default::default()
    };
    let env = start(files, security).await;
    let post =
        |client: tlsx::Pair, name: &'static str, headers: Vec<(&'static str, &'static str)>| {
            let (addr, ca) = (addr(&env), pki.serving_ca.cert.clone());
            async move {
                let mut send = tlsx::h1(
                    addr,
                    tlsx::client_config(&ca, &[b"http/1.1"], Some(&client)),
                )
                .await;
                let cm = configmap("", name).build();
                let mut req = http::Request::post("/api/v1/namespaces/default/configmaps")
                    .header("host", "127.0.0.1")
                    .header("content-type", "application/json");
                for (k, v) in headers {
                    req = req.header(k, v);
                }
                let req = req.body(watchgate::body::full(cm.to_string())).unwrap();
                let resp = send.send_request(req).await.unwrap();
                let status = resp.status().as_u16();
                let body = resp.into_body().collect().await.unwrap().to_bytes();
                (status, String::from_utf8_lossy(&body).into_owned())
            }
        };
    let asserted = vec![
        ("x-remote-user", "dave"),
        ("x-remote-group", "ops"),
        ("x-remote-group", "developers"),
        ("x-remote-extra-scopes", "read"),
        ("x-remote-extra-a%2fb", "x"),
    ];
    let (status, body) = post(proxy.clone(), "by-dave", asserted.clone()).await;
    assert_eq!(status, 201, "{body}");
    let audit = env.sim.handle().sim().audit.records();
    let dave = audit
        .iter()
        .find(|w| w.user == "dave")
        .expect("dave's write");
    assert_eq!(dave.groups, ["ops", "developers", "system:authenticated"]);
    assert_eq!(dave.extra["scopes"], ["read"]);
    assert_eq!(dave.extra["a/b"], ["x"]);
    assert_eq!(dave.impersonator.as_deref(), Some(GATEWAY_USER));

    // A proxy certificate whose CN is not allowed asserts nothing: no credential, a 401.
    let (status, _) = post(other_proxy, "by-other", asserted.clone()).await;
    assert_eq!(status, 401);
    // A client that is not a front proxy cannot assert another user: carol stays carol.
    let (status, body) = post(carol, "by-carol", asserted.clone()).await;
    assert_eq!(status, 201, "{body}");
    let audit = env.sim.handle().sim().audit.records();
    assert_eq!(audit.iter().filter(|w| w.user == "dave").count(), 1);
    let carol = audit
        .iter()
        .find(|w| w.user == "carol")
        .expect("carol's write");
    assert_eq!(carol.groups, ["developers", "system:authenticated"]);
    assert!(!carol.extra.contains_key("scopes"), "{:?}", carol.extra);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_certificate_is_served_to_new_connections_and_a_bad_one_is_not() {
    let pki = Pki::new();
    let mut files = pki.files();
    files.reload_interval = Duration::from_millis(100);
    let env = start(files, SecurityConfig::default()).await;
    let first = tlsx::served_certificate(addr(&env), &pki.serving_ca.cert).await;
    assert_eq!(first, rustls_der(&pki.serving.cert));

    // A key that does not match the certificate: the old pair stays in use.
    let other = pki.serving_ca.serving(pki.dir(), "other");
    std::fs::copy(&other.key, &pki.serving.key).unwrap();
    // The check, run now (the periodic one may have run first: either way this bad
    // set has been seen once this returns), keeps the old pair.
    let checked = env.gateway.handle().reload_tls();
    assert!(!matches!(checked, Ok(true)), "{checked:?}");
    assert_eq!(
        tlsx::served_certificate(addr(&env), &pki.serving_ca.cert).await,
        first,
        "a key that does not match keeps the old pair"
    );

    // The matching certificate arrives: the periodic check (every 100 ms here) loads it
    // and new connections get it.
    std::fs::copy(&other.cert, &pki.serving.cert).unwrap();
    let want = rustls_der(&other.cert);
    wait_until(
        "a new connection is served the new certificate",
        Duration::from_secs(10),
        || async { tlsx::served_certificate(addr(&env), &pki.serving_ca.cert).await == want },
    )
    .await;
    // And it serves: kubectl trusts it through the same CA.
    let out = kubectl(&env, &pki, Some(ALICE), None)
        .ok(&["get", "pods", "-o", "name"])
        .await;
    assert_eq!(out.trim(), "");
}

/// Writes `n` configmaps (`cm-0`, `cm-1`, ...) in the simulator.
fn write_configmaps(env: &Secure, n: usize) {
    let configmaps = watchgate::sim::resources::find("", "v1", "configmaps").unwrap();
    for i in 0..n {
        support::watch::put_object(
            env.sim.handle(),
            configmaps,
            "default",
            configmap("default", &format!("cm-{i}")).build(),
        );
    }
}

/// Reads `n` events from `body` (a watch) and checks they are the ADDED events of
/// `cm-0` .. `cm-{n-1}`, each once, in order.
async fn every_event(what: &str, mut body: hyper::body::Incoming, n: usize) {
    let lines = support::wait::within(
        &format!("every event over {what}"),
        Duration::from_secs(20),
        tlsx::read_lines(&mut body, n),
    )
    .await;
    let names: Vec<String> = lines
        .iter()
        .map(|l| {
            let e: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(e["type"], "ADDED", "{what}: {l}");
            e["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let want: Vec<String> = (0..n).map(|i| format!("cm-{i}")).collect();
    assert_eq!(names, want, "{what}: every event once, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_over_tls_deliver_every_event_on_http1_and_http2() {
    let pki = Pki::new();
    let env = start(pki.files(), SecurityConfig::default()).await;
    let list = "/api/v1/namespaces/default/configmaps?resourceVersion=0";
    warm(&env, &pki, ALICE, list).await;
    let (_, _, body) = https_get(&env, &pki, None, Some(ALICE), list, &[]).await;
    let rv: serde_json::Value = serde_json::from_str(&body).unwrap();
    let rv = rv["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}");

    // HTTP/1.1 (the watch leaves hyper after its head and is written through TLS).
    let cfg = tlsx::client_config(&pki.serving_ca.cert, &[b"http/1.1"], None);
    let mut h1 = tlsx::h1(addr(&env), cfg).await;
    let resp = h1
        .send_request(tlsx::get(&path, Some(ALICE)))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(support::http::source(resp.headers()), Some("cache"));
    // HTTP/2 through ALPN (asserted by `tlsx::h2`), from the same resourceVersion.
    let cfg = tlsx::client_config(&pki.serving_ca.cert, &[b"h2", b"http/1.1"], None);
    let mut h2 = tlsx::h2(addr(&env), cfg).await;
    let resp2 = h2
        .send_request(tlsx::get(&path, Some(ALICE)))
        .await
        .unwrap();
    assert_eq!(resp2.status(), 200);
    assert_eq!(support::http::source(resp2.headers()), Some("cache"));

    let n = 200;
    write_configmaps(&env, n);
    tokio::join!(
        every_event("TLS HTTP/1.1", resp.into_body(), n),
        every_event("TLS HTTP/2", resp2.into_body(), n),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_negotiates_h2_and_an_http1_client_http1() {
    let pki = Pki::new();
    let env = start(pki.files(), SecurityConfig::default()).await;
    // h2 offered first: the gateway takes it, as kube-apiserver does.
    let cfg = tlsx::client_config(&pki.serving_ca.cert, &[b"h2", b"http/1.1"], None);
    let mut h2 = tlsx::h2(addr(&env), cfg).await;
    let resp = h2
        .send_request(tlsx::get("/version", Some(ALICE)))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), http::Version::HTTP_2);
    // No ALPN at all: HTTP/1.1.
    let cfg = tlsx::client_config(&pki.serving_ca.cert, &[], None);
    let tls = tlsx::connect(addr(&env), cfg).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), None);
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = send
        .send_request(tlsx::get("/version", Some(ALICE)))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), http::Version::HTTP_11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_is_tunnelled_through_tls() {
    let pki = Pki::new();
    let env = start(pki.files(), SecurityConfig::default()).await;
    support::watch::put_pod(
        env.sim.handle(),
        "default",
        "web-1",
        json!({}),
        "n1",
        "Running",
    );
    // The upgrade (WebSocket, kubectl 1.37's default) is completed on the TLS stream, and
    // the tunnel carries the bytes both ways; made as the admin (alice may not exec).
    let out = kubectl(&env, &pki, Some(ADMIN), None)
        .run_stdin(&["exec", "-i", "web-1", "--", "cat"], b"hello over tls\n")
        .await;
    assert_eq!(out.assert_success(), "hello over tls\n");
    let out = kubectl(&env, &pki, Some(ALICE), None)
        .run_stdin(&["exec", "-i", "web-1", "--", "cat"], b"x\n")
        .await;
    let err = out.assert_failure();
    assert!(
        err.contains("cannot create resource \"pods/exec\""),
        "{err}"
    );
}
