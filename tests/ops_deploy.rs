//! The deployment material in deploy/ is valid (issue 6): every kustomization renders with
//! kubectl's kustomize; every rendered object passes a strict schema check (unknown field
//! names fail); the kinds the simulator serves pass `kubectl apply --dry-run=server`
//! against it; the watchgate containers' flags parse with the binary's own flag
//! definitions; the pods give the sum of their drain deadlines enough time; each
//! example's ClusterRole grants get/list/watch on exactly the resources it caches, and get
//! on `namespaces/kube-system` (the cluster's identity); and the
//! gateways are warm before their clients come (issue 26): a sidecar's startup probe on
//! `/readyz` holds the app back, a shared gateway's Service routes only to ready replicas,
//! and every gateway keeps its state file on an `emptyDir`.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use serde_json::{json, Value};
use watchgate::config::{AuthMode, GatewayConfig, ServeArgs};
use watchgate::logging::LogArgs;

use support::servers::start_sim;
use support::{process, tools, Http, Kubectl, COMMAND_TIMEOUT};

/// The kustomizations under deploy/, and the kinds each must render.
const KUSTOMIZATIONS: &[(&str, &[&str])] = &[
    (
        "base",
        &["ServiceAccount/watchgate", "PodMonitor/watchgate"],
    ),
    (
        "examples/sidecar",
        &[
            "ServiceAccount/watchgate",
            "ClusterRole/watchgate-example-cache-reader",
            "ClusterRoleBinding/watchgate-example-cache-reader",
            "Role/example-app-writes",
            "RoleBinding/example-app-writes",
            "Deployment/example-app",
            "PodDisruptionBudget/example-app",
            "PodMonitor/watchgate",
        ],
    ),
    (
        "examples/tiered",
        &[
            "ServiceAccount/watchgate",
            "ClusterRole/watchgate-tiered-cache-reader",
            "ClusterRoleBinding/watchgate-tiered-cache-reader",
            "Deployment/tiered-app",
            "PodDisruptionBudget/tiered-app",
            "PodMonitor/watchgate",
        ],
    ),
    (
        "examples/shared",
        &[
            "ServiceAccount/watchgate",
            "ClusterRole/watchgate-shared",
            "ClusterRoleBinding/watchgate-shared",
            "Deployment/watchgate",
            "Service/watchgate",
            "NetworkPolicy/watchgate",
            "PodDisruptionBudget/watchgate",
            "PodMonitor/watchgate",
        ],
    ),
    ("prometheus", &["PrometheusRule/watchgate"]),
];

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

async fn kustomize(dir: &str) -> String {
    let mut cmd = tokio::process::Command::new(tools::kubectl());
    cmd.arg("kustomize").arg(deploy_dir().join(dir));
    let out = process::run(cmd, None, COMMAND_TIMEOUT).await;
    out.assert_success().to_string()
}

/// Runs tests/python/check_manifests.py over `yaml`.
async fn schema_check(yaml: &str) -> process::Output {
    let mut cmd = tokio::process::Command::new(tools::python());
    cmd.arg(tools::python_scripts().join("check_manifests.py"))
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/monitoring-coreos-v1.json"),
        );
    process::run(cmd, Some(yaml.as_bytes()), COMMAND_TIMEOUT).await
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .expect("kustomize output is YAML")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// The multi-document YAML of the documents whose kind is in `kinds`.
fn only_kinds(yaml: &str, kinds: &[&str]) -> String {
    yaml.split("\n---\n")
        .filter(|doc| {
            doc.lines()
                .any(|l| kinds.iter().any(|k| l == format!("kind: {k}")))
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kustomization_renders_and_passes_the_strict_schema_check() {
    for (dir, expected) in KUSTOMIZATIONS {
        let yaml = kustomize(dir).await;
        let out = schema_check(&yaml).await;
        assert!(out.success(), "deploy/{dir} fails the schema check: {out}");
        for object in *expected {
            assert!(
                out.stdout.lines().any(|l| l == format!("ok {object}")),
                "deploy/{dir} does not render {object}: {out}"
            );
        }
        // A Service (or Ingress) only in front of watchgates that authenticate their
        // clients, behind a NetworkPolicy (docs/operations.md, docs/security.md).
        let docs = documents(&yaml);
        for doc in &docs {
            assert_ne!(
                doc["kind"], "Ingress",
                "deploy/{dir} ships an Ingress: {doc}"
            );
            if doc["kind"] != "Service" {
                continue;
            }
            let selector = &doc["spec"]["selector"];
            let selects = |labels: &Value| {
                selector
                    .as_object()
                    .unwrap()
                    .iter()
                    .all(|(k, v)| &labels[k] == v)
            };
            let fronted: Vec<&Value> = docs
                .iter()
                .filter(|d| d["kind"] == "Deployment")
                .filter(|d| selects(&d["spec"]["template"]["metadata"]["labels"]))
                .collect();
            assert!(
                !fronted.is_empty(),
                "deploy/{dir}: a Service selecting nothing"
            );
            for d in fronted {
                for (c, flags) in watchgate_containers(d) {
                    assert_eq!(
                        flags.serve.auth.mode,
                        AuthMode::Delegated,
                        "deploy/{dir}: a Service exposes {} without --auth=delegated",
                        c["name"]
                    );
                }
                let labels = &d["spec"]["template"]["metadata"]["labels"];
                let guarded = docs.iter().any(|p| {
                    p["kind"] == "NetworkPolicy"
                        && p["spec"]["podSelector"]["matchLabels"]
                            .as_object()
                            .is_some_and(|m| m.iter().all(|(k, v)| &labels[k] == v))
                });
                assert!(
                    guarded,
                    "deploy/{dir}: no NetworkPolicy guards the Service's pods"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_check_catches_misspelt_field_names() {
    let tiered = kustomize("examples/tiered").await;
    let rules = kustomize("prometheus").await;
    for (yaml, from, to) in [
        (&tiered, "readinessProbe:", "readinesProbe:"),
        (
            &tiered,
            "terminationGracePeriodSeconds:",
            "terminationGracePeriod:",
        ),
        (&tiered, "podMetricsEndpoints:", "podMetricEndpoints:"),
        (&tiered, "maxUnavailable:", "maxUnavaliable:"),
        (&rules, "expr:", "exp:"),
    ] {
        assert!(yaml.contains(from), "{from} not in the manifests");
        let broken = yaml.replacen(from, to, 1);
        let out = schema_check(&broken).await;
        let field = to.trim_end_matches(':');
        assert!(
            !out.success() && out.stdout.contains(&format!("unknown field \"{field}\"")),
            "the misspelt {field:?} was not caught: {out}"
        );
    }
    // A scalar of the wrong type is caught too.
    let broken = tiered.replacen("containerPort: 9090", "containerPort: nine", 1);
    let out = schema_check(&broken).await;
    assert!(
        !out.success() && out.stdout.contains("expected int"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_accepts_the_kinds_it_serves_in_a_server_side_dry_run() {
    let sim = start_sim().await;
    let http = Http::new(sim.url());
    for ns in ["watchgate-example", "watchgate-tiered"] {
        let resp = http
            .post_json(
                "/api/v1/namespaces",
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            )
            .await;
        assert_eq!(resp.status, 201, "{}", resp.text());
    }
    let kubectl = Kubectl::new(sim.url());
    for dir in ["examples/sidecar", "examples/tiered"] {
        let yaml = kustomize(dir).await;
        // The simulator serves Deployments and ConfigMaps; the other kinds (RBAC, PDB,
        // ServiceAccount, the Prometheus Operator's) get the schema check above.
        let served = only_kinds(&yaml, &["Deployment", "ConfigMap"]);
        assert_eq!(
            documents(&served).len(),
            2,
            "deploy/{dir}: a Deployment and a ConfigMap"
        );
        let out = kubectl
            .run_stdin(
                &["apply", "--dry-run=server", "--validate=strict", "-f", "-"],
                served.as_bytes(),
            )
            .await;
        let stdout = out.assert_success();
        assert!(
            stdout.contains("created (server dry run)"),
            "deploy/{dir}: {out}"
        );
    }
    // Dry run: nothing was stored.
    let deployments = http
        .get_json("/apis/apps/v1/namespaces/watchgate-example/deployments")
        .await;
    assert_eq!(deployments["items"], json!([]), "{deployments}");
}

/// The flags of a watchgate container, parsed by the binary's own definitions.
#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    serve: ServeArgs,
    #[command(flatten)]
    log: LogArgs,
}

/// The watchgate containers of a Deployment (native sidecars and regular containers),
/// each with its flags parsed by the binary's own definitions.
fn watchgate_containers(deployment: &Value) -> Vec<(&Value, Flags)> {
    let spec = &deployment["spec"]["template"]["spec"];
    spec["initContainers"]
        .as_array()
        .into_iter()
        .chain(spec["containers"].as_array())
        .flatten()
        .filter(|c| c["image"].as_str().unwrap_or("").starts_with("watchgate"))
        .map(|c| {
            let args = c["args"]
                .as_array()
                .expect("args")
                .iter()
                .map(|a| a.as_str().unwrap().to_string());
            let flags = Flags::try_parse_from(std::iter::once("watchgate".to_string()).chain(args))
                .unwrap_or_else(|e| panic!("{}: flags do not parse: {e}", c["name"]));
            (c, flags)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_cluster_role_grants_exactly_the_resources_its_example_caches() {
    let mut cluster_scoped = std::collections::BTreeSet::new();
    for dir in ["examples/sidecar", "examples/tiered", "examples/shared"] {
        let docs = documents(&kustomize(dir).await);
        let deployment = docs
            .iter()
            .find(|d| d["kind"] == "Deployment")
            .expect("a Deployment");
        let service_account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .expect("serviceAccountName");
        let namespace = deployment["metadata"]["namespace"].as_str().unwrap();
        // Only the containers that talk to the apiserver with the pod's ServiceAccount
        // (in-cluster config) need RBAC; a tiered edge's --kubeconfig points at its origin.
        let mut cached = std::collections::BTreeSet::new();
        for (c, flags) in watchgate_containers(deployment) {
            if flags.serve.kubeconfig.is_some() {
                continue;
            }
            assert!(
                !flags.serve.cache.is_empty(),
                "{dir}/{}: --cache",
                c["name"]
            );
            for spec in &flags.serve.cache {
                let (resource, group) = spec.split_once('.').unwrap_or((spec, ""));
                cached.insert((group.to_string(), resource.to_string()));
            }
        }
        assert!(
            !cached.is_empty(),
            "{dir}: no watchgate talks to the apiserver"
        );

        // The ClusterRoles bound to that ServiceAccount, and what they grant.
        let bound: Vec<&str> = docs
            .iter()
            .filter(|d| d["kind"] == "ClusterRoleBinding")
            .filter(|b| {
                b["subjects"].as_array().into_iter().flatten().any(|s| {
                    s["kind"] == "ServiceAccount"
                        && s["name"] == service_account
                        && s["namespace"] == namespace
                })
            })
            .map(|b| {
                assert_eq!(b["roleRef"]["kind"], "ClusterRole", "{b}");
                b["roleRef"]["name"].as_str().unwrap()
            })
            .collect();
        assert_eq!(
            bound.len(),
            1,
            "{dir}: one ClusterRole for the caches: {bound:?}"
        );
        let role = docs
            .iter()
            .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == bound[0])
            .unwrap_or_else(|| panic!("{dir}: ClusterRole {} is not shipped", bound[0]));
        let mut granted = std::collections::BTreeSet::new();
        let mut security = std::collections::BTreeSet::new();
        // The cluster's identity, kube-system's uid (cache::identity): that one namespace.
        let identity = json!({"apiGroups": [""], "resources": ["namespaces"], "resourceNames": ["kube-system"], "verbs": ["get"]});
        let mut reads_identity = false;
        for rule in role["rules"].as_array().expect("rules") {
            if *rule == identity {
                reads_identity = true;
                continue;
            }
            let verbs: Vec<&str> = rule["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            if verbs != ["get", "list", "watch"] {
                // The reviews and impersonation of --auth=delegated (docs/security.md).
                security.insert(rule.to_string());
                continue;
            }
            for group in rule["apiGroups"].as_array().unwrap() {
                for resource in rule["resources"].as_array().unwrap() {
                    granted.insert((
                        group.as_str().unwrap().to_string(),
                        resource.as_str().unwrap().to_string(),
                    ));
                }
            }
        }
        assert_eq!(granted, cached, "{dir}: the ClusterRole vs --cache");
        assert!(
            reads_identity,
            "{dir}: get on namespaces/kube-system, the cluster's identity"
        );
        let delegated = watchgate_containers(deployment)
            .iter()
            .any(|(_, f)| f.serve.auth.mode == AuthMode::Delegated);
        let expected: std::collections::BTreeSet<String> = if delegated {
            [
                json!({"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}),
                json!({"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}),
                json!({"apiGroups": [""], "resources": ["users", "groups", "serviceaccounts"], "verbs": ["impersonate"]}),
                json!({"apiGroups": ["authentication.k8s.io"], "resources": ["*"], "verbs": ["impersonate"]}),
            ]
            .iter()
            .map(|v| v.to_string())
            .collect()
        } else {
            Default::default()
        };
        assert_eq!(
            security, expected,
            "{dir}: beyond the caches' reads, exactly the reviews and impersonation --auth=delegated needs"
        );

        // Cluster-scoped names must differ between examples, or applying both would let
        // one overwrite the other's rules and binding.
        for d in &docs {
            if matches!(
                d["kind"].as_str(),
                Some("ClusterRole" | "ClusterRoleBinding")
            ) {
                let key = format!("{}/{}", d["kind"], d["metadata"]["name"]);
                assert!(cluster_scoped.insert(key.clone()), "{dir}: {key} is shared");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchgate_containers_use_real_flags_probes_and_a_long_enough_grace_period() {
    for dir in ["examples/sidecar", "examples/tiered", "examples/shared"] {
        let yaml = kustomize(dir).await;
        let docs = documents(&yaml);
        let deployment = docs
            .iter()
            .find(|d| d["kind"] == "Deployment")
            .expect("a Deployment");
        let pod = &deployment["spec"]["template"];
        let spec = &pod["spec"];
        let grace = spec["terminationGracePeriodSeconds"]
            .as_u64()
            .expect("terminationGracePeriodSeconds is set");
        assert_eq!(
            pod["metadata"]["annotations"]["prometheus.io/scrape"], "true",
            "{dir}: prometheus.io annotations"
        );
        let containers = watchgate_containers(deployment);
        let watchgates = containers.len();
        // The pod's own application containers (not watchgates): they must not start
        // before their gateway is warm.
        let apps = spec["containers"]
            .as_array()
            .expect("containers")
            .iter()
            .filter(|c| !c["image"].as_str().unwrap_or("").starts_with("watchgate"))
            .count();
        let volume = |name: &Value| {
            spec["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|v| &v["name"] == name)
                .unwrap_or_else(|| panic!("{dir}: no volume {name}"))
        };
        let mut state_files = std::collections::BTreeSet::new();
        if apps == 0 {
            // A shared gateway: a rollout must not take a ready replica away before its
            // successor is ready (warm).
            let rolling = &deployment["spec"]["strategy"]["rollingUpdate"];
            assert_eq!(rolling["maxUnavailable"], 0, "{dir}: maxUnavailable");
        }
        // The kubelet stops native sidecars one after the other (reverse order) within
        // the one grace period: every watchgate's drain deadline must fit, together.
        let drains: Duration = containers
            .iter()
            .map(|(_, f)| f.serve.shutdown_timeout)
            .sum();
        assert!(
            Duration::from_secs(grace) > drains,
            "{dir}: terminationGracePeriodSeconds {grace} does not exceed the sum of the drain deadlines {drains:?}"
        );
        for (c, flags) in containers {
            let name = c["name"].as_str().unwrap();
            let serve = flags.serve;
            assert!(
                serve.address.is_loopback() || serve.auth.mode == AuthMode::Delegated,
                "{dir}/{name}: the API listener must stay on loopback unless clients are authenticated"
            );
            // Probes on the admin port: the port name maps to --admin-port.
            let ports = c["ports"].as_array().expect("ports");
            let admin = ports
                .iter()
                .find(|p| p["containerPort"] == serve.admin_port)
                .unwrap_or_else(|| panic!("{dir}/{name}: no port for --admin-port"));
            for (probe, path) in [("livenessProbe", "/livez"), ("readinessProbe", "/readyz")] {
                assert_eq!(c[probe]["httpGet"]["path"], path, "{dir}/{name} {probe}");
                assert_eq!(
                    c[probe]["httpGet"]["port"], admin["name"],
                    "{dir}/{name} {probe}"
                );
            }
            // Warm before the clients come: the state file on an emptyDir (it outlives the
            // container's restarts), one file per gateway.
            let state = serve
                .cache_state_file
                .as_ref()
                .unwrap_or_else(|| panic!("{dir}/{name}: --cache-state-file"));
            assert!(
                state_files.insert(state.clone()),
                "{dir}/{name}: {} is another gateway's state file too",
                state.display()
            );
            let mount = c["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| state.parent() == Some(Path::new(m["mountPath"].as_str().unwrap())))
                .unwrap_or_else(|| {
                    panic!(
                        "{dir}/{name}: the directory of {} is not a mount",
                        state.display()
                    )
                });
            assert_ne!(mount["readOnly"], true, "{dir}/{name}: state mount");
            assert!(
                volume(&mount["name"])["emptyDir"].is_object(),
                "{dir}/{name}: the state file's volume is not an emptyDir"
            );
            if apps > 0 {
                // A native sidecar whose startup probe is /readyz: the kubelet starts the
                // next container (the app, or the tier it serves) only once it passes.
                assert_eq!(c["restartPolicy"], "Always", "{dir}/{name}: native sidecar");
                assert!(
                    spec["initContainers"]
                        .as_array()
                        .is_some_and(|i| i.iter().any(|x| x["name"] == name)),
                    "{dir}/{name}: a native sidecar is an init container"
                );
                let startup = &c["startupProbe"];
                assert_eq!(startup["httpGet"]["path"], "/readyz", "{dir}/{name}");
                assert_eq!(startup["httpGet"]["port"], admin["name"], "{dir}/{name}");
                // The kubelet's defaults: 10 s, 3 failures, a 1 s timeout.
                let field = |k: &str, default: u64| startup[k].as_u64().unwrap_or(default);
                let window =
                    Duration::from_secs(field("periodSeconds", 10) * field("failureThreshold", 3));
                assert!(
                    window > serve.cache_warmup_timeout,
                    "{dir}/{name}: a startup window of {window:?} restarts a gateway that is only waiting out its {:?} warm-up",
                    serve.cache_warmup_timeout
                );
                // /readyz may wait 2 s for its upstream probe (src/server/probe.rs).
                assert!(
                    field("timeoutSeconds", 1) > 2,
                    "{dir}/{name}: startupProbe timeoutSeconds"
                );
            }
            assert!(
                c["resources"]["requests"]["memory"].is_string()
                    && c["resources"]["limits"]["memory"].is_string(),
                "{dir}/{name}: memory request and limit"
            );
            assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
            // --kubeconfig and the TLS files must be mounted (a ConfigMap, a Secret).
            let tls = &serve.tls;
            for path in serve.kubeconfig.iter().chain(
                [
                    &tls.tls_cert_file,
                    &tls.tls_private_key_file,
                    &tls.client_ca_file,
                    &tls.requestheader_client_ca_file,
                ]
                .into_iter()
                .flatten(),
            ) {
                let mounted = c["volumeMounts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|m| path.starts_with(m["mountPath"].as_str().unwrap()));
                assert!(mounted, "{dir}/{name}: {} is not mounted", path.display());
            }
            // And the whole flag set resolves like `watchgate serve` would (with a
            // kubeconfig the test cannot mount, the in-cluster default is skipped).
            if serve.kubeconfig.is_none() {
                let mut args = serve.clone();
                args.server = vec!["http://127.0.0.1:1".into()];
                GatewayConfig::from_args(&args)
                    .await
                    .unwrap_or_else(|e| panic!("{dir}/{name}: {e:#}"));
            }
        }
        // Every kubeconfig the kustomization mounts resolves, with kube's own parser, to a
        // loopback http:// server and no credentials.
        // (The shared example mounts none: it talks to the apiserver in-cluster.)
        let configmaps = docs.iter().filter(|d| d["kind"] == "ConfigMap");
        let scratch = tempfile::tempdir().unwrap();
        for (key, text) in configmaps.flat_map(|c| c["data"].as_object().unwrap()) {
            let path = scratch.path().join(key);
            std::fs::write(&path, text.as_str().unwrap()).unwrap();
            let mut args = Flags::try_parse_from(["watchgate"]).unwrap().serve;
            args.kubeconfig = Some(path);
            let cfg = GatewayConfig::from_args(&args)
                .await
                .unwrap_or_else(|e| panic!("{dir}: kubeconfig {key}: {e:#}"));
            let url = cfg.upstream.cluster_url.to_string();
            assert!(
                url.starts_with("http://127.0.0.1:"),
                "{dir}: kubeconfig {key} points at {url}"
            );
            assert!(
                cfg.upstream.auth_info.token.is_none(),
                "{dir}: {key} has a token"
            );
        }
        assert!(watchgates >= 1, "{dir}: no watchgate container");
        if dir.ends_with("tiered") {
            assert_eq!(watchgates, 2, "tiered: an edge and an origin");
        }
    }
}

#[test]
fn the_dockerfile_is_multi_stage_and_runs_as_non_root() {
    let text = std::fs::read_to_string(deploy_dir().join("Dockerfile")).unwrap();
    let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(
        froms.len(),
        2,
        "a build stage and a runtime stage: {froms:?}"
    );
    assert!(froms[0].ends_with(" AS build"), "{froms:?}");
    assert!(
        text.contains("COPY --from=build "),
        "the binary comes from the build stage"
    );
    let user = text
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    assert!(
        !user.starts_with('0') && !user.starts_with("root"),
        "USER {user}"
    );
    // The default command's flags are real flags.
    let cmd = text
        .lines()
        .find_map(|l| l.strip_prefix("CMD "))
        .expect("a CMD line");
    let args: Vec<String> = serde_json::from_str(cmd).expect("CMD in exec form");
    Flags::try_parse_from(std::iter::once("watchgate".to_string()).chain(args))
        .unwrap_or_else(|e| panic!("CMD flags do not parse: {e}"));
}
