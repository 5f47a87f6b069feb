//! src/proto: the JSON ↔ protobuf transcoder, checked against `k8s-pb` (prost types
//! generated from the upstream .proto files) as an independent decoder/encoder, and
//! against golden bytes derived by hand from Go's generated `Marshal` code.
//!
//! The fixtures in tests/fixtures/proto are objects as kube-apiserver 1.36 prints them
//! (Go struct field order, `omitempty`, sorted map keys, HTML-safe escapes), one line each.

use prost::Message as _;
use watchgate::proto::{self, ListEnvelope, ListMeta, MessageType, ProtoError};

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::discovery::v1 as discovery;
use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime as rt;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/proto/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut b = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    while b.last() == Some(&b'\n') {
        b.pop();
    }
    b
}

fn ty(api_version: &str, kind: &str) -> MessageType {
    proto::type_of(api_version, kind).unwrap_or_else(|e| panic!("{api_version} {kind}: {e}"))
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// JSON → ours → prost decode → prost encode → ours decode must give the original JSON
/// back; ours → JSON → ours must be byte-identical. Returns (our bytes, prost bytes).
fn round_trip<M: prost::Message + Default>(
    name: &str,
    api_version: &str,
    kind: &str,
) -> (M, Vec<u8>, Vec<u8>) {
    round_trip_except::<M>(name, api_version, kind, &[])
}

/// `prost_differs`: (in the JSON, after the k8s-pb round trip) replacements for what
/// prost cannot carry — it leaves default values out of map entries, so an empty
/// `[]byte` map value (Go writes `12 00`) comes back nil.
fn round_trip_except<M: prost::Message + Default>(
    name: &str,
    api_version: &str,
    kind: &str,
    prost_differs: &[(&str, &str)],
) -> (M, Vec<u8>, Vec<u8>) {
    let json = fixture(name);
    let mut via_prost = show(&json);
    for (from, to) in prost_differs {
        assert!(via_prost.contains(from), "{name}: {from}");
        via_prost = via_prost.replace(from, to);
    }
    let t = ty(api_version, kind);
    let ours = proto::encode(t, &json).unwrap_or_else(|e| panic!("{name}: encode: {e}"));
    let typed = M::decode(ours.as_slice())
        .unwrap_or_else(|e| panic!("{name}: k8s-pb cannot decode our bytes: {e}"));
    let theirs = typed.encode_to_vec();
    let back = proto::decode(t, &theirs, Some((api_version, kind)))
        .unwrap_or_else(|e| panic!("{name}: decode: {e}"));
    assert_eq!(
        show(&back),
        via_prost,
        "{name}: JSON → ours → k8s-pb → ours → JSON"
    );
    let again = proto::decode(t, &ours, Some((api_version, kind))).unwrap();
    assert_eq!(show(&again), show(&json), "{name}: decode(encode(json))");
    assert_eq!(
        proto::encode(t, &again).unwrap(),
        ours,
        "{name}: protobuf → JSON → protobuf"
    );
    (typed, ours, theirs)
}

#[test]
fn pod_round_trips_through_k8s_pb_and_typed_fields_match() {
    let (pod, ours, theirs): (core::Pod, _, _) = round_trip("pod", "v1", "Pod");
    // prost writes every Some field in tag order, as Go writes every value field: for an
    // object without empty map values the bytes are the same.
    assert_eq!(ours, theirs, "k8s-pb re-encodes the same bytes");
    let (_, o, t): (core::Pod, _, _) = round_trip("pod-4k", "v1", "Pod");
    assert_eq!(o, t);
    let meta = pod.metadata.as_ref().unwrap();
    assert_eq!(meta.name.as_deref(), Some("web-7d4b9c8f6d-x2x9k"));
    assert_eq!(
        meta.creation_timestamp.as_ref().unwrap().seconds,
        Some(1_772_359_200)
    );
    assert_eq!(meta.creation_timestamp.as_ref().unwrap().nanos, Some(0));
    assert_eq!(meta.owner_references[0].controller, Some(true));
    let spec = pod.spec.as_ref().unwrap();
    let web = &spec.containers[0];
    assert_eq!(web.ports[0].container_port, Some(8080));
    assert_eq!(
        web.ports[0].host_port,
        Some(0),
        "Go writes the zero hostPort"
    );
    let limits = &web.resources.as_ref().unwrap().limits;
    assert_eq!(limits["cpu"].string.as_deref(), Some("500m"));
    let http = web
        .liveness_probe
        .as_ref()
        .unwrap()
        .handler
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    let port = http.port.as_ref().unwrap();
    assert_eq!(
        (port.r#type, port.int_val, port.str_val.as_deref()),
        (Some(1), Some(0), Some("http"))
    );
    let tcp = web
        .readiness_probe
        .as_ref()
        .unwrap()
        .handler
        .as_ref()
        .unwrap()
        .tcp_socket
        .as_ref()
        .unwrap();
    assert_eq!(tcp.port.as_ref().unwrap().int_val, Some(8080));
    assert_eq!(spec.priority, Some(0), "a pointer set to zero is written");
    assert_eq!(spec.active_deadline_seconds, None, "a nil pointer is not");
    assert_eq!(
        spec.security_context.as_ref().unwrap().supplemental_groups,
        vec![2000, -1]
    );
    let status = pod.status.as_ref().unwrap();
    assert_eq!(
        status.conditions[0]
            .last_probe_time
            .as_ref()
            .map(|t| t.seconds),
        Some(None),
        "zero Time: empty message"
    );
    assert_eq!(status.container_statuses[0].started, Some(true));
    let mf = &meta.managed_fields[0];
    assert!(show(mf.fields_v1.as_ref().unwrap().raw.as_deref().unwrap())
        .starts_with(r#"{"f:metadata":{"f:generateName":{}"#));
}

#[test]
fn configmap_with_data_binary_data_and_escapes() {
    let (cm, ours, theirs): (core::ConfigMap, _, _) = round_trip_except(
        "configmap",
        "v1",
        "ConfigMap",
        &[(r#""none":"""#, r#""none":null"#)],
    );
    assert_ne!(
        ours, theirs,
        "prost drops the empty key, empty value and empty bytes Go writes"
    );
    assert_eq!(cm.data["html"], "<b>bold & brave</b>");
    assert_eq!(cm.data["empty"], "");
    assert_eq!(cm.binary_data["logo.png"], b"\x89PNG\r\n\x1a\n");
    assert_eq!(cm.binary_data["none"], b"");
}

#[test]
fn secret_node_service_endpointslice_deployment_event_crd_namespace_round_trip() {
    let (s, o, t): (core::Secret, _, _) = round_trip("secret", "v1", "Secret");
    assert_eq!(o, t);
    assert_eq!(s.data["password"], b"s3cr3t");
    assert_eq!(s.immutable, Some(true));

    let (n, o, t): (core::Node, _, _) = round_trip("node", "v1", "Node");
    assert_eq!(o, t);
    let st = n.status.as_ref().unwrap();
    assert_eq!(st.capacity["memory"].string.as_deref(), Some("32795380Ki"));
    assert_eq!(st.addresses[0].address.as_deref(), Some("10.0.0.17"));
    assert_eq!(st.images[1].size_bytes, Some(320368));
    assert_eq!(
        st.daemon_endpoints
            .as_ref()
            .unwrap()
            .kubelet_endpoint
            .as_ref()
            .unwrap()
            .port,
        Some(10250)
    );

    let (svc, o, t): (core::Service, _, _) = round_trip("service", "v1", "Service");
    assert_eq!(o, t);
    let p = &svc.spec.as_ref().unwrap().ports;
    assert_eq!(
        p[0].target_port.as_ref().unwrap().str_val.as_deref(),
        Some("http")
    );
    assert_eq!(p[1].target_port.as_ref().unwrap().int_val, Some(9090));
    assert_eq!(p[1].node_port, Some(31090));

    let (es, o, t): (discovery::EndpointSlice, _, _) =
        round_trip("endpointslice", "discovery.k8s.io/v1", "EndpointSlice");
    assert_eq!(o, t);
    assert_eq!(
        es.endpoints[0].conditions.as_ref().unwrap().terminating,
        Some(false)
    );
    assert_eq!(es.ports[0].port, Some(8080));

    let (d, o, t): (apps::Deployment, _, _) = round_trip("deployment", "apps/v1", "Deployment");
    assert_eq!(o, t);
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(3));
    let ru = spec
        .strategy
        .as_ref()
        .unwrap()
        .rolling_update
        .as_ref()
        .unwrap();
    assert_eq!(
        ru.max_unavailable.as_ref().unwrap().str_val.as_deref(),
        Some("25%")
    );
    assert_eq!(ru.max_surge.as_ref().unwrap().int_val, Some(1));

    let (ev, o, t): (core::Event, _, _) = round_trip("event", "v1", "Event");
    assert_eq!(o, t);
    assert_eq!(ev.count, Some(1));
    assert_eq!(
        ev.event_time.as_ref().map(|t| t.seconds),
        Some(None),
        "zero MicroTime: empty message"
    );

    let (crd, o, t): (apiext::CustomResourceDefinition, _, _) =
        round_trip("crd", "apiextensions.k8s.io/v1", "CustomResourceDefinition");
    assert_eq!(o, t);
    let schema = crd.spec.as_ref().unwrap().versions[0]
        .schema
        .as_ref()
        .unwrap();
    let root = schema.open_apiv3_schema.as_ref().unwrap();
    let spec = &root.properties["spec"];
    assert_eq!(
        spec.properties["color"]
            .default
            .as_ref()
            .unwrap()
            .raw
            .as_deref(),
        Some(&b"\"blue\""[..])
    );
    assert_eq!(spec.properties["size"].multiple_of, Some(0.5));
    assert_eq!(
        spec.properties["extra"].x_kubernetes_preserve_unknown_fields,
        Some(true)
    );
    let status = &root.properties["status"];
    let ap = status.additional_properties.as_ref().unwrap();
    assert_eq!((ap.allows, ap.schema.is_some()), (Some(false), false));
    let labels = &spec.properties["labels"]
        .additional_properties
        .as_ref()
        .unwrap();
    assert_eq!(
        labels.allows,
        Some(true),
        "a schema means Allows=true (marshal.go)"
    );
    let items = spec.properties["ports"].items.as_ref().unwrap();
    assert_eq!(items.schema.as_ref().unwrap().maximum, Some(65535.0));

    let (job, o, t): (k8s_pb::api::batch::v1::Job, _, _) = round_trip("job", "batch/v1", "Job");
    assert_eq!(o, t);
    let st = job.status.as_ref().unwrap();
    assert_eq!(
        (st.succeeded, st.terminating, st.ready),
        (Some(1), Some(0), Some(0))
    );
    assert!(st.uncounted_terminated_pods.is_some());

    let (ing, o, t): (k8s_pb::api::networking::v1::Ingress, _, _) =
        round_trip("ingress", "networking.k8s.io/v1", "Ingress");
    assert_eq!(o, t);
    let rule = &ing.spec.as_ref().unwrap().rules[0];
    let paths = &rule
        .ingress_rule_value
        .as_ref()
        .unwrap()
        .http
        .as_ref()
        .unwrap()
        .paths;
    assert_eq!(
        paths[1]
            .backend
            .as_ref()
            .unwrap()
            .service
            .as_ref()
            .unwrap()
            .port
            .as_ref()
            .unwrap()
            .number,
        Some(9090)
    );

    let (rs, o, t): (k8s_pb::api::resource::v1::ResourceSlice, _, _) =
        round_trip("resourceslice", "resource.k8s.io/v1", "ResourceSlice");
    assert_eq!(o, t);
    let dev = &rs.spec.as_ref().unwrap().devices[0];
    assert_eq!(
        dev.attributes["gpu.example.com/numa"].int,
        Some(0),
        "a pointer to 0 is written"
    );
    assert_eq!(
        dev.capacity["gpu.example.com/memory"]
            .value
            .as_ref()
            .unwrap()
            .string
            .as_deref(),
        Some("80Gi")
    );

    let (ns, o, t): (core::Namespace, _, _) = round_trip("namespace", "v1", "Namespace");
    assert_eq!(o, t);
    assert_eq!(ns.status.as_ref().unwrap().phase.as_deref(), Some("Active"));

    let (hpa, o, t): (k8s_pb::api::autoscaling::v2::HorizontalPodAutoscaler, _, _) =
        round_trip("hpa", "autoscaling/v2", "HorizontalPodAutoscaler");
    assert_eq!(o, t);
    let spec = hpa.spec.as_ref().unwrap();
    let up = spec.behavior.as_ref().unwrap().scale_up.as_ref().unwrap();
    assert_eq!(up.stabilization_window_seconds, Some(0), "a pointer to 0");
    let status = hpa.status.as_ref().unwrap();
    // A value string that is empty is still written (`0a 00`).
    assert_eq!(status.current_metrics[3].r#type.as_deref(), Some(""));
}

/// The webhook configurations, API priority and fairness and autoscaling/v1: pointers
/// without `omitempty` (`sideEffects`, `nominalConcurrencyShares`) print `null` when nil,
/// nil slices without `omitempty` (`namespaces`) too, and the inline `Rule` of
/// `RuleWithOperations` is flat in JSON but field 2 in protobuf.
#[test]
fn admission_flowcontrol_and_autoscaling_v1_round_trip() {
    use k8s_pb::api::{admissionregistration, autoscaling, flowcontrol};

    let (mw, o, t): (
        admissionregistration::v1::MutatingWebhookConfiguration,
        _,
        _,
    ) = round_trip(
        "mutatingwebhook",
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
    );
    assert_eq!(o, t);
    let hook = &mw.webhooks[0];
    assert_eq!(
        hook.rules[0].rule.as_ref().unwrap().resources,
        vec!["pods"],
        "inline Rule is the nested field 2"
    );
    assert_eq!(
        hook.client_config
            .as_ref()
            .unwrap()
            .service
            .as_ref()
            .unwrap()
            .port,
        Some(443)
    );
    assert_eq!(mw.webhooks[1].side_effects, None, "null pointer is absent");

    let (fs, o, t): (flowcontrol::v1::FlowSchema, _, _) = round_trip(
        "flowschema",
        "flowcontrol.apiserver.k8s.io/v1",
        "FlowSchema",
    );
    assert_eq!(o, t);
    let spec = fs.spec.as_ref().unwrap();
    assert_eq!(spec.matching_precedence, Some(800));
    assert!(spec.rules[0].resource_rules[1].namespaces.is_empty());

    let (plc, o, t): (flowcontrol::v1::PriorityLevelConfiguration, _, _) = round_trip(
        "prioritylevel",
        "flowcontrol.apiserver.k8s.io/v1",
        "PriorityLevelConfiguration",
    );
    assert_eq!(o, t);
    let limited = plc.spec.as_ref().unwrap().limited.as_ref().unwrap();
    assert_eq!(limited.nominal_concurrency_shares, Some(40));
    assert!(
        plc.status.is_some(),
        "an empty status struct is still written"
    );

    let (hpa, o, t): (autoscaling::v1::HorizontalPodAutoscaler, _, _) =
        round_trip("hpa-v1", "autoscaling/v1", "HorizontalPodAutoscaler");
    assert_eq!(o, t);
    let status = hpa.status.as_ref().unwrap();
    assert_eq!(
        (status.current_replicas, status.desired_replicas),
        (Some(0), Some(0)),
        "zero value ints are written"
    );
}

/// An empty ConfigMap with a name and a creation timestamp, derived by hand from Go's
/// `ConfigMap.MarshalToSizedBuffer` / `ObjectMeta.MarshalToSizedBuffer` /
/// `Time.MarshalToSizedBuffer` and `Unknown.NestedMarshalTo`.
#[test]
fn golden_empty_configmap() {
    let json = br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","creationTimestamp":"2024-01-01T00:00:00Z"}}"#;
    #[rustfmt::skip]
    let object_meta: &[u8] = &[
        0x0a, 0x02, b'c', b'm', // 1 name
        0x12, 0x00,             // 2 generateName: value string, written empty
        0x1a, 0x00,             // 3 namespace
        0x22, 0x00,             // 4 selfLink
        0x2a, 0x00,             // 5 uid
        0x32, 0x00,             // 6 resourceVersion
        0x38, 0x00,             // 7 generation: value int64, written 0
        0x42, 0x08,             // 8 creationTimestamp = Timestamp{seconds, nanos}
        0x08, 0x80, 0x81, 0xc8, 0xac, 0x06, // seconds 1704067200
        0x10, 0x00,             // nanos 0 (always written)
        // 9 deletionTimestamp, 10 deletionGracePeriodSeconds: nil pointers; maps and
        // slices empty: nothing.
    ];
    let mut message = vec![0x0a, object_meta.len() as u8];
    message.extend_from_slice(object_meta);
    // data, binaryData: empty maps; immutable: nil pointer.
    let cm = ty("v1", "ConfigMap");
    assert_eq!(proto::encode(cm, json).unwrap(), message);

    let mut envelope = b"k8s\0".to_vec();
    envelope.extend_from_slice(&[0x0a, 0x0f, 0x0a, 0x02, b'v', b'1', 0x12, 0x09]);
    envelope.extend_from_slice(b"ConfigMap");
    envelope.extend_from_slice(&[0x12, message.len() as u8]);
    envelope.extend_from_slice(&message);
    envelope.extend_from_slice(&[0x1a, 0x00, 0x22, 0x00]);
    assert_eq!(
        proto::encode_object("v1", "ConfigMap", json).unwrap(),
        envelope
    );
    assert_eq!(proto::encode_unknown("v1", "ConfigMap", &message), envelope);

    let u = proto::decode_unknown(&envelope).unwrap();
    assert_eq!(
        (u.api_version, u.kind, u.raw),
        ("v1", "ConfigMap", &message[..])
    );
    let k = rt::Unknown::decode(&envelope[4..]).unwrap();
    assert_eq!(k.type_meta.unwrap().kind.as_deref(), Some("ConfigMap"));
    assert_eq!(show(&proto::decode_object(&envelope).unwrap()), show(json));
}

#[test]
fn golden_scalars_intorstring_negative_ints_and_sorted_maps() {
    let port = MessageType::by_name("io.k8s.api.core.v1.ServicePort").unwrap();
    #[rustfmt::skip]
    let expect: &[u8] = &[
        0x0a, 0x00,                   // 1 name ""
        0x12, 0x00,                   // 2 protocol ""
        0x18, 0x50,                   // 3 port 80
        0x22, 0x0a,                   // 4 targetPort IntOrString: all three fields
        0x08, 0x01, 0x10, 0x00, 0x1a, 0x04, b'h', b't', b't', b'p',
        0x28, 0x00,                   // 5 nodePort 0
        // 6 appProtocol: nil pointer
    ];
    assert_eq!(
        proto::encode(port, br#"{"port":80,"targetPort":"http"}"#).unwrap(),
        expect
    );

    let tol = MessageType::by_name("io.k8s.api.core.v1.Toleration").unwrap();
    let bytes = proto::encode(tol, br#"{"tolerationSeconds":-1}"#).unwrap();
    let mut expect = vec![0x0a, 0x00, 0x12, 0x00, 0x1a, 0x00, 0x22, 0x00, 0x28];
    expect.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    assert_eq!(bytes, expect, "int64(-1) is a 10-byte varint");

    let sel = MessageType::by_name("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector").unwrap();
    assert_eq!(
        proto::encode(sel, br#"{"matchLabels":{"b":"2","a":"1","a":"3"}}"#).unwrap(),
        [
            0x0a, 0x06, 0x0a, 0x01, b'a', 0x12, 0x01, b'3', 0x0a, 0x06, 0x0a, 0x01, b'b', 0x12,
            0x01, b'2'
        ],
        "entries sorted by key; a repeated key keeps its last value"
    );
}

#[test]
fn unknown_json_fields_fail_with_a_typed_error() {
    let mut pod = show(&fixture("pod"));
    pod = pod.replacen(
        r#""dnsPolicy":"ClusterFirst""#,
        r#""dnsPolicy":"ClusterFirst","futureField":{"x":1}"#,
        1,
    );
    match proto::encode(ty("v1", "Pod"), pod.as_bytes()) {
        Err(ProtoError::UnknownField { message, field }) => {
            assert_eq!(
                (message, field.as_str()),
                ("io.k8s.api.core.v1.PodSpec", "futureField")
            )
        }
        other => panic!("expected UnknownField, got {other:?}"),
    }
    // Inline structs: their keys are known at the parent (a Volume's source), others not.
    let vol = MessageType::by_name("io.k8s.api.core.v1.Volume").unwrap();
    assert!(proto::encode(vol, br#"{"name":"v","emptyDir":{}}"#).is_ok());
    assert!(matches!(
        proto::encode(vol, br#"{"name":"v","nfsv9":{}}"#),
        Err(ProtoError::UnknownField { .. })
    ));
    // Type errors are errors too.
    assert!(matches!(
        proto::encode(vol, br#"{"name":7}"#),
        Err(ProtoError::TypeMismatch { .. })
    ));
    assert!(proto::encode(vol, b"{").is_err());
}

#[test]
fn malformed_protobuf_is_an_error_never_a_panic() {
    let t = ty("v1", "Pod");
    let good = proto::encode(t, &fixture("pod")).unwrap();
    // Every prefix: no panic; cut inside the first (metadata) field: an error.
    for n in 0..good.len() {
        let r = proto::decode(t, &good[..n], None);
        if (1..good.len().min(200)).contains(&n) {
            assert!(r.is_err(), "prefix {n} decoded");
        }
    }
    assert!(matches!(
        proto::decode(t, &[0x08, 0x01], None),
        Err(ProtoError::WrongWireType { .. })
    ));
    assert!(matches!(
        proto::decode(t, &[0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f], None),
        Err(ProtoError::Truncated)
    ));
    assert!(matches!(
        proto::decode(
            t,
            &[0x0a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
            None
        ),
        Err(ProtoError::VarintOverflow)
    ));
    assert!(
        proto::decode(t, &[0x0f, 0x00], None).is_err(),
        "wire type 7"
    );
    // 300 nested JSONSchemaProps.not (field 28).
    let props = MessageType::by_name(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps",
    )
    .unwrap();
    let mut deep: Vec<u8> = Vec::new();
    for _ in 0..300 {
        let mut outer = vec![0xe2, 0x01]; // tag 28, wire type 2
        let mut len = Vec::new();
        let mut v = deep.len();
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                len.push(b);
                break;
            }
            len.push(b | 0x80);
        }
        outer.extend(len);
        outer.extend(deep);
        deep = outer;
    }
    assert!(matches!(
        proto::decode(props, &deep, None),
        Err(ProtoError::TooDeep)
    ));
    let deep_json = format!("{}{}", r#"{"not":"#.repeat(300), "}".repeat(301));
    assert!(matches!(
        proto::encode(props, deep_json.as_bytes()),
        Err(ProtoError::TooDeep)
    ));

    // Random corruption of real bytes and envelopes: errors or other JSON, no panics.
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(14);
    let envelope = proto::encode_unknown("v1", "Pod", &good);
    for i in 0..20_000 {
        let mut b = if i % 2 == 0 {
            good.clone()
        } else {
            envelope.clone()
        };
        for _ in 0..rng.random_range(1..6) {
            let at = rng.random_range(0..b.len());
            match rng.random_range(0..3) {
                0 => b[at] = rng.random(),
                1 => b.truncate(at),
                _ => b.insert(at, rng.random()),
            }
            if b.is_empty() {
                break;
            }
        }
        let _ = proto::decode(t, &b, None);
        let _ = proto::decode_object(&b);
        let _ = proto::parse_watch_event(&b);
    }
}

#[test]
fn list_assembled_from_item_bytes_equals_the_encoded_list() {
    let pod = fixture("pod");
    let pod_json = show(&pod);
    // Items of a list carry no kind/apiVersion.
    let item_json = pod_json.replacen(r#""kind":"Pod","apiVersion":"v1","#, "", 1);
    let item = proto::encode(ty("v1", "Pod"), item_json.as_bytes()).unwrap();
    let items = [item.clone(), item.clone()];
    let meta = ListMeta {
        resource_version: "123470",
        continue_token: "",
        remaining_item_count: None,
    };
    let total: usize = items.iter().map(|i| proto::item_frame_len(i.len())).sum();
    let env = ListEnvelope::new(ty("v1", "PodList"), "v1", "PodList", &meta, total).unwrap();
    let mut body = env.prefix.clone();
    for i in &items {
        body.extend_from_slice(&env.item_header(i.len()));
        body.extend_from_slice(i);
    }
    body.extend_from_slice(&env.suffix);

    let list_json = format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"123470"}},"items":[{item_json},{item_json}]}}"#
    );
    assert_eq!(
        body,
        proto::encode_object("v1", "PodList", list_json.as_bytes()).unwrap()
    );
    let u = proto::decode_unknown(&body).unwrap();
    let list = core::PodList::decode(u.raw).unwrap();
    assert_eq!(list.items.len(), 2);
    assert_eq!(
        list.metadata.unwrap().resource_version.as_deref(),
        Some("123470")
    );
    assert_eq!(show(&proto::decode_object(&body).unwrap()), list_json);

    // meta.k8s.io/v1beta1 PartialObjectMetadataList numbers items 1 and metadata 2.
    let pom = proto::partial_object_metadata(&pod).unwrap();
    let l = ty("meta.k8s.io/v1beta1", "PartialObjectMetadataList");
    let meta = ListMeta {
        resource_version: "9",
        continue_token: "abc",
        remaining_item_count: Some(0),
    };
    let env = ListEnvelope::new(
        l,
        "meta.k8s.io/v1beta1",
        "PartialObjectMetadataList",
        &meta,
        proto::item_frame_len(pom.len()),
    )
    .unwrap();
    let mut body = env.prefix.clone();
    env.write_item(&mut body, &pom);
    body.extend_from_slice(&env.suffix);
    let obj = proto::decode_object(&body).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&obj).unwrap();
    assert_eq!(v["metadata"]["continue"], "abc");
    assert_eq!(v["metadata"]["remainingItemCount"], 0);
    assert_eq!(v["items"][0]["metadata"]["name"], "web-7d4b9c8f6d-x2x9k");
    assert!(v["items"][0].get("spec").is_none());
    let reenc =
        proto::encode_object("meta.k8s.io/v1beta1", "PartialObjectMetadataList", &obj).unwrap();
    assert_eq!(reenc, body);
}

#[test]
fn partial_object_metadata_is_the_objects_metadata() {
    let pod = fixture("pod");
    let pom = proto::partial_object_metadata(&pod).unwrap();
    let typed = meta::PartialObjectMetadata::decode(pom.as_slice()).unwrap();
    let m = typed.metadata.unwrap();
    assert_eq!(m.name.as_deref(), Some("web-7d4b9c8f6d-x2x9k"));
    assert_eq!(m.labels["tier"], "frontend");
    assert_eq!(m.managed_fields.len(), 2);
    // The same bytes as the pod's own ObjectMeta field.
    let pod_bytes = proto::encode(ty("v1", "Pod"), &pod).unwrap();
    let om = core::Pod::decode(pod_bytes.as_slice())
        .unwrap()
        .metadata
        .unwrap()
        .encode_to_vec();
    let mut expect = vec![0x0a];
    let mut n = om.len();
    while n >= 0x80 {
        expect.push((n as u8) | 0x80);
        n >>= 7;
    }
    expect.push(n as u8);
    expect.extend_from_slice(&om);
    assert_eq!(pom, expect);
    // Works for any object with metadata, custom resources included.
    let cr = br#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"n","creationTimestamp":"2026-01-01T00:00:00Z"},"spec":{"size":3}}"#;
    let pom = proto::partial_object_metadata(cr).unwrap();
    let env = proto::encode_unknown("meta.k8s.io/v1", "PartialObjectMetadata", &pom);
    assert_eq!(
        show(&proto::decode_object(&env).unwrap()),
        r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"w","namespace":"n","creationTimestamp":"2026-01-01T00:00:00Z"}}"#
    );
}

#[test]
fn watch_frames_and_status() {
    let pod = proto::encode_object("v1", "Pod", &fixture("pod")).unwrap();
    let frame = proto::watch_frame("ADDED", &pod);
    let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(len, frame.len() - 4, "4-byte big-endian length prefix");
    let ev = meta::WatchEvent::decode(&frame[4..]).unwrap();
    assert_eq!(ev.r#type.as_deref(), Some("ADDED"));
    assert_eq!(
        ev.object.as_ref().unwrap().raw.as_deref(),
        Some(&pod[..]),
        "the object keeps its k8s\\0 envelope"
    );
    let (typ, obj) = proto::parse_watch_event(&frame[4..]).unwrap();
    assert_eq!((typ, obj), ("ADDED", &pod[..]));
    let mut stream = frame.clone();
    stream.extend_from_slice(&proto::watch_frame("DELETED", &pod)[..10]);
    let (first, rest) = proto::split_frame(&stream, 1 << 20).unwrap().unwrap();
    assert_eq!(first, &frame[4..]);
    assert!(
        proto::split_frame(rest, 1 << 20).unwrap().is_none(),
        "incomplete frame"
    );
    assert!(
        proto::split_frame(&stream, 16).is_err(),
        "over the frame limit"
    );

    // ERROR events and error responses carry a metav1.Status (apiVersion v1).
    let status = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}"#;
    let env = proto::encode_status(status).unwrap();
    let u = proto::decode_unknown(&env).unwrap();
    assert_eq!((u.api_version, u.kind), ("v1", "Status"));
    let mut expect = vec![0x0a, 0x06, 0x0a, 0x00, 0x12, 0x00, 0x1a, 0x00, 0x12, 0x07];
    expect.extend_from_slice(b"Failure");
    expect.extend_from_slice(&[0x1a, 31]);
    expect.extend_from_slice(b"too old resource version: 1 (5)");
    expect.extend_from_slice(&[0x22, 0x07]);
    expect.extend_from_slice(b"Expired");
    expect.extend_from_slice(&[0x30, 0x9a, 0x03]);
    assert_eq!(u.raw, &expect[..]);
    let s = meta::Status::decode(u.raw).unwrap();
    assert_eq!((s.code, s.reason.as_deref()), (Some(410), Some("Expired")));
    assert_eq!(show(&proto::decode_object(&env).unwrap()), show(status));
    let err_frame = proto::watch_frame("ERROR", &env);
    assert_eq!(
        proto::parse_watch_event(&err_frame[4..]).unwrap().1,
        &env[..]
    );
}

/// The gateway writes an object's event frame in one go from its bare message; it must
/// be the frame of the enveloped object, whatever the lengths' varint widths.
#[test]
fn object_watch_frame_is_the_frame_of_the_envelope() {
    let pod = fixture("pod");
    let msg = proto::encode(ty("v1", "Pod"), &pod).unwrap();
    let mut sizes = vec![
        0, 1, 100, 115, 116, 127, 128, 16_000, 16_370, 16_384, 70_000,
    ];
    sizes.push(msg.len());
    for n in sizes {
        let message: Vec<u8> = msg.iter().copied().cycle().take(n).collect();
        for (ev, av, kind) in [
            ("MODIFIED", "v1", "Pod"),
            ("ADDED", "meta.k8s.io/v1", "PartialObjectMetadata"),
            ("DELETED", "apps/v1", "Deployment"),
        ] {
            assert_eq!(
                proto::object_watch_frame(ev, av, kind, &message),
                proto::watch_frame(ev, &proto::encode_unknown(av, kind, &message)),
                "{n} bytes, {ev} {av} {kind}"
            );
        }
    }
}

/// A kubelet's event frame is encoded straight from the object's JSON: the same bytes as
/// framing `encode`'s message, and the range it returns is that message.
#[test]
fn encode_watch_frame_is_the_frame_of_the_encoded_message() {
    for name in ["pod", "pod-4k", "pod-kubelet"] {
        let json = fixture(name);
        let pod = ty("v1", "Pod");
        let msg = proto::encode(pod, &json).unwrap();
        let (frame, at) = proto::encode_watch_frame(pod, &json, "MODIFIED", "v1", "Pod").unwrap();
        assert_eq!(
            frame,
            proto::object_watch_frame("MODIFIED", "v1", "Pod", &msg),
            "{name}"
        );
        assert_eq!(&frame[at], &msg[..], "{name}: the range is the message");
    }
    let err = proto::encode_watch_frame(
        ty("v1", "Pod"),
        br#"{"spec":{"noSuchField":1}}"#,
        "ADDED",
        "v1",
        "Pod",
    );
    assert!(
        matches!(err, Err(proto::ProtoError::UnknownField { .. })),
        "{err:?}"
    );
}

#[test]
fn lookup_covers_the_cached_kinds_and_refuses_others() {
    for (av, kind) in [
        ("v1", "Pod"),
        ("v1", "ConfigMap"),
        ("v1", "Node"),
        ("v1", "Service"),
        ("v1", "Secret"),
        ("v1", "Namespace"),
        ("v1", "Event"),
        ("v1", "PersistentVolumeClaim"),
        ("discovery.k8s.io/v1", "EndpointSlice"),
        ("apps/v1", "Deployment"),
        ("apps/v1", "StatefulSet"),
        ("coordination.k8s.io/v1", "Lease"),
        ("batch/v1", "Job"),
        ("batch/v1", "CronJob"),
        ("networking.k8s.io/v1", "Ingress"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("policy/v1", "PodDisruptionBudget"),
        ("storage.k8s.io/v1", "CSINode"),
        ("storage.k8s.io/v1", "StorageClass"),
        ("scheduling.k8s.io/v1", "PriorityClass"),
        ("node.k8s.io/v1", "RuntimeClass"),
        ("events.k8s.io/v1", "Event"),
        ("resource.k8s.io/v1", "ResourceSlice"),
        ("resource.k8s.io/v1", "ResourceClaim"),
        ("resource.k8s.io/v1", "DeviceClass"),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
        ("apiregistration.k8s.io/v1", "APIService"),
        ("autoscaling/v1", "HorizontalPodAutoscaler"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"),
        ("certificates.k8s.io/v1", "CertificateSigningRequest"),
        ("flowcontrol.apiserver.k8s.io/v1", "FlowSchema"),
        (
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
        ),
        ("meta.k8s.io/v1", "PartialObjectMetadataList"),
        ("meta.k8s.io/v1beta1", "PartialObjectMetadataList"),
    ] {
        let (g, v) = av.rsplit_once('/').unwrap_or(("", av));
        assert!(proto::is_served(g, v, kind), "{av} {kind}");
    }
    assert!(
        !proto::is_served("example.com", "v1", "Widget"),
        "custom resources are JSON only"
    );
    assert!(!proto::is_served("", "v1", "Widget"));
    // Not transcribed from a Go source that has them (docs/protobuf.md, Coverage).
    assert!(!proto::is_served(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy"
    ));
    assert!(!proto::is_served("apps", "v1beta2", "Deployment"));
    assert!(matches!(
        proto::encode_object("example.com/v1", "Widget", b"{}"),
        Err(ProtoError::UnknownKind(_))
    ));
}

/// `ObjectMeta.creationTimestamp` is `omitempty,omitzero` since 1.33 (kubernetes#130989):
/// a zero time (pod templates, or `null` from an older apiserver) is an empty message in
/// protobuf, as before, and left out of the JSON instead of `"creationTimestamp":null`.
/// Other zero times (no `omitzero`) still print `null`.
#[test]
fn zero_creation_timestamp_is_left_out_of_json() {
    let t = ty("v1", "ConfigMap");
    let absent = proto::encode(t, br#"{"metadata":{"name":"a"}}"#).unwrap();
    let null = proto::encode(t, br#"{"metadata":{"name":"a","creationTimestamp":null}}"#).unwrap();
    assert_eq!(absent, null);
    // ObjectMeta: ..., 7: generation 0, 8: Time{} (empty message), as Go writes a value
    // struct that is zero.
    assert!(absent.windows(4).any(|w| w == [0x38, 0x00, 0x42, 0x00]));
    let back = proto::decode(t, &null, Some(("v1", "ConfigMap"))).unwrap();
    assert_eq!(
        show(&back),
        r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}"#
    );
    // Go's zero time written as seconds (-62135596800) is IsZero too.
    let mut secs = vec![0x08];
    let mut v = (-62_135_596_800i64) as u64;
    while v >= 0x80 {
        secs.push(v as u8 | 0x80);
        v >>= 7;
    }
    secs.push(v as u8);
    let meta = [&[0x0a, 0x01, b'a', 0x42, secs.len() as u8][..], &secs].concat();
    let cm = [&[0x0a, meta.len() as u8][..], &meta].concat();
    assert_eq!(
        show(&proto::decode(t, &cm, None).unwrap()),
        r#"{"metadata":{"name":"a"}}"#
    );
    // A condition's zero lastTransitionTime has no omitzero: `null`.
    let pod = ty("v1", "Pod");
    let b = proto::encode(
        pod,
        br#"{"metadata":{"name":"p","creationTimestamp":"2026-01-01T00:00:00Z"},"spec":{"containers":null},"status":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":null}]}}"#,
    )
    .unwrap();
    let json = show(&proto::decode(pod, &b, None).unwrap());
    assert!(
        json.contains(r#""creationTimestamp":"2026-01-01T00:00:00Z""#),
        "{json}"
    );
    assert!(
        json.contains(
            r#"{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":null}"#
        ),
        "{json}"
    );
}

#[test]
fn time_drops_nanoseconds_micro_time_keeps_microseconds() {
    // time_proto.go: ProtoTime writes Seconds only (Nanos stays 0) and Unmarshal ignores
    // nanos; MicroTime keeps its fraction.
    let cond = MessageType::by_name("io.k8s.api.core.v1.PodCondition").unwrap();
    let b = proto::encode(
        cond,
        br#"{"type":"Ready","status":"True","lastTransitionTime":"2026-03-01T10:00:06.5Z"}"#,
    )
    .unwrap();
    let c = core::PodCondition::decode(b.as_slice()).unwrap();
    let t = c.last_transition_time.unwrap();
    assert_eq!((t.seconds, t.nanos), (Some(1_772_359_206), Some(0)));
    assert_eq!(
        show(&proto::decode(cond, &b, None).unwrap()),
        r#"{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-03-01T10:00:06Z"}"#
    );
    let lease = MessageType::by_name("io.k8s.api.coordination.v1.LeaseSpec").unwrap();
    let json = br#"{"holderIdentity":"node-7","leaseDurationSeconds":40,"renewTime":"2026-03-01T10:00:06.123456Z"}"#;
    let b = proto::encode(lease, json).unwrap();
    let l = k8s_pb::api::coordination::v1::LeaseSpec::decode(b.as_slice()).unwrap();
    assert_eq!(l.renew_time.unwrap().nanos, Some(123_456_000));
    assert_eq!(show(&proto::decode(lease, &b, None).unwrap()), show(json));
}

/// The committed table is what scripts/gen-proto-schema makes from k8s-pb, k8s-openapi
/// (both in the cargo registry once this test is built) and go-fields.txt.
#[test]
fn generated_schema_is_up_to_date() {
    let out = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/gen-proto-schema"
        ))
        .arg("--check")
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}{}",
        show(&out.stdout),
        show(&out.stderr)
    );
}

/// `ExtraValue` is a Go `[]string` marshalled as the message `{1: repeated string}`: a
/// bare JSON array, inside a map.
#[test]
fn csr_extra_values_are_wrapper_messages_with_bare_array_json() {
    let json = br#"{"kind":"CertificateSigningRequest","apiVersion":"certificates.k8s.io/v1","metadata":{"name":"csr-x7k2p","uid":"c3d4e5f6-a7b8-4c9d-0e1f-2a3b4c5d6e7f","resourceVersion":"900","creationTimestamp":"2026-03-01T09:00:00Z"},"spec":{"request":"LS0tLS1CRUdJTg==","signerName":"kubernetes.io/kube-apiserver-client-kubelet","expirationSeconds":86400,"usages":["digital signature","client auth"],"username":"system:node:node-7","groups":["system:nodes","system:authenticated"],"extra":{"authentication.kubernetes.io/credential-id":["X509SHA256=ab12"],"empty":[]}},"status":{"conditions":[{"type":"Approved","status":"True","reason":"AutoApproved","message":"Auto approving kubelet client certificate after SubjectAccessReview.","lastUpdateTime":"2026-03-01T09:00:01Z","lastTransitionTime":"2026-03-01T09:00:01Z"}],"certificate":"LS0tLS1CRUdJTiBDRVJU"}}"#;
    let t = ty("certificates.k8s.io/v1", "CertificateSigningRequest");
    let b = proto::encode(t, json).unwrap();
    let csr =
        k8s_pb::api::certificates::v1::CertificateSigningRequest::decode(b.as_slice()).unwrap();
    let spec = csr.spec.as_ref().unwrap();
    assert_eq!(
        spec.extra["authentication.kubernetes.io/credential-id"].items,
        vec!["X509SHA256=ab12"]
    );
    assert_eq!(spec.request.as_deref(), Some(&b"-----BEGIN"[..]));
    // Go writes every map entry's value, an empty ExtraValue as `12 00`; prost leaves
    // default values out of map entries, so its bytes are 2 shorter.
    let entry = [&[0x0a, 0x05][..], b"empty", &[0x12, 0x00]].concat();
    assert!(
        b.windows(entry.len()).any(|w| w == entry),
        "empty ExtraValue written"
    );
    assert_eq!(csr.encode_to_vec().len(), b.len() - 2);
    // An empty ExtraValue decodes to a nil slice, which encoding/json prints as null.
    let back = show(
        &proto::decode(
            t,
            &b,
            Some(("certificates.k8s.io/v1", "CertificateSigningRequest")),
        )
        .unwrap(),
    );
    assert_eq!(back, show(json).replace(r#""empty":[]"#, r#""empty":null"#));
}

/// meta.k8s.io/v1beta1 PartialObjectMetadata (a Go alias of v1's type) encodes and decodes
/// with v1's message, in its own envelope apiVersion.
#[test]
fn v1beta1_partial_object_metadata_round_trips_as_v1s_message() {
    let json = br#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1beta1","metadata":{"name":"p","namespace":"ns","resourceVersion":"7"}}"#;
    let env = proto::encode_object("meta.k8s.io/v1beta1", "PartialObjectMetadata", json).unwrap();
    let u = proto::decode_unknown(&env).unwrap();
    assert_eq!(
        (u.api_version, u.kind),
        ("meta.k8s.io/v1beta1", "PartialObjectMetadata")
    );
    let m = meta::PartialObjectMetadata::decode(u.raw).unwrap();
    let om = m.metadata.unwrap();
    assert_eq!((om.name(), om.namespace()), ("p", "ns"));
    assert_eq!(proto::decode_object(&env).unwrap(), json.to_vec());
}
