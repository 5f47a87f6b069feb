//! What a request asks to do, as kube-apiserver's authorizers see it
//! (`authorizer.AttributesRecord`, filled from `RequestInfo` by requestinfo.go), and the
//! SubjectAccessReview that asks the upstream about it (the webhook authorizer's
//! `resourceAttributesFrom`, with the field and label selector requirements that
//! `AuthorizeWithSelectors` adds).

use serde_json::{json, Map, Value};

use crate::request::{ApiPath, ApiRequest, ListOptions, Parsed, Verb};
use crate::selector::label::Op;

/// One selector requirement as `authorization.k8s.io/v1` carries it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SelectorRequirement {
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: &'static str,
    pub values: Vec<String>,
}

/// The resource attributes of a request. Compared and hashed by content: they are half of
/// an authorization decision's cache key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Attributes {
    pub verb: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub field_selector: Vec<SelectorRequirement>,
    pub label_selector: Vec<SelectorRequirement>,
}

impl Attributes {
    /// The attributes of a resource read (get, list, watch), derived from the typed request
    /// exactly as requestinfo.go derives them. `None` for anything else.
    pub fn of_read(req: &Parsed) -> Option<Self> {
        if !matches!(req.api.verb, Verb::Get | Verb::List | Verb::Watch) {
            return None;
        }
        Self::of_request(&req.api, req.valid_options())
    }

    /// The attributes of any resource request (`None` for non-resource paths and methods
    /// the API has no verb for), given its decoded options if it is a read.
    pub fn of_request(api: &ApiRequest, opts: Option<&ListOptions>) -> Option<Self> {
        let ApiPath::Resource(rp) = &api.path else {
            return None;
        };
        let verb = api.verb;
        if verb == Verb::Other {
            return None;
        }
        let mut name = rp.name.clone().unwrap_or_default();
        // requestinfo.go: a list or watch whose field selector requires one metadata.name
        // is about that name (a valid path segment only).
        if name.is_empty() && matches!(verb, Verb::List | Verb::Watch) && !rp.legacy_watch {
            if let Some(n) = opts.and_then(|o| o.field_selector.requires_exact("metadata.name")) {
                if valid_path_segment(n) {
                    name = n.to_string();
                }
            }
        }
        // `/api/v1/namespaces/{name}`: requestinfo.go puts the name in the namespace too.
        let namespace = match (&rp.namespace, &rp.name) {
            (Some(ns), _) => ns.clone(),
            (None, Some(n)) if rp.resource == "namespaces" => n.clone(),
            _ => String::new(),
        };
        let (field_selector, label_selector) = match opts {
            Some(o) => (
                o.field_selector
                    .terms
                    .iter()
                    .map(|t| SelectorRequirement {
                        key: t.field.clone(),
                        operator: if t.equals { "In" } else { "NotIn" },
                        values: vec![t.value.clone()],
                    })
                    .collect(),
                o.label_selector
                    .requirements()
                    .iter()
                    .filter_map(|r| {
                        let operator = match r.op {
                            Op::In | Op::Equals | Op::DoubleEquals => "In",
                            Op::NotIn | Op::NotEquals => "NotIn",
                            Op::Exists => "Exists",
                            Op::DoesNotExist => "DoesNotExist",
                            // Only narrowing requirements are sent; Gt/Lt have no
                            // authorization form and are left out, as the webhook does.
                            Op::GreaterThan | Op::LessThan => return None,
                        };
                        Some(SelectorRequirement {
                            key: r.key.clone(),
                            operator,
                            values: r.values.clone(),
                        })
                    })
                    .collect(),
            ),
            None => (Vec::new(), Vec::new()),
        };
        Some(Self {
            verb: verb.as_str().to_string(),
            group: rp.group.clone(),
            version: rp.version.clone(),
            resource: rp.resource.clone(),
            subresource: rp.subresource.clone().unwrap_or_default(),
            namespace,
            name,
            field_selector,
            label_selector,
        })
    }

    /// `spec.resourceAttributes` of a SubjectAccessReview (empty fields omitted, as Go's
    /// `omitempty` does).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        let mut put = |k: &str, v: &str| {
            if !v.is_empty() {
                m.insert(k.into(), json!(v));
            }
        };
        put("namespace", &self.namespace);
        put("verb", &self.verb);
        put("group", &self.group);
        put("version", &self.version);
        put("resource", &self.resource);
        put("subresource", &self.subresource);
        put("name", &self.name);
        let reqs = |rs: &[SelectorRequirement]| -> Value {
            let list: Vec<Value> = rs
                .iter()
                .map(|r| {
                    let mut o = Map::new();
                    o.insert("key".into(), json!(r.key));
                    o.insert("operator".into(), json!(r.operator));
                    if !r.values.is_empty() {
                        o.insert("values".into(), json!(r.values));
                    }
                    Value::Object(o)
                })
                .collect();
            json!({ "requirements": list })
        };
        if !self.field_selector.is_empty() {
            m.insert("fieldSelector".into(), reqs(&self.field_selector));
        }
        if !self.label_selector.is_empty() {
            m.insert("labelSelector".into(), reqs(&self.label_selector));
        }
        Value::Object(m)
    }
}

/// `path.IsValidPathSegmentName`: not `.` or `..`, no `/` or `%`.
fn valid_path_segment(s: &str) -> bool {
    s != "." && s != ".." && !s.contains('/') && !s.contains('%')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(uri: &str) -> Attributes {
        let parsed = Parsed::new(
            &http::Method::GET,
            &uri.parse().unwrap(),
            &http::HeaderMap::new(),
        );
        Attributes::of_read(&parsed).unwrap()
    }

    #[test]
    fn reads_are_described_as_requestinfo_describes_them() {
        let a = attrs("/api/v1/namespaces/ns1/pods/p1?resourceVersion=0");
        assert_eq!(
            (
                a.verb.as_str(),
                a.namespace.as_str(),
                a.resource.as_str(),
                a.name.as_str()
            ),
            ("get", "ns1", "pods", "p1")
        );
        let a = attrs("/apis/apps/v1/deployments?watch=1&resourceVersion=0");
        assert_eq!(
            (
                a.verb.as_str(),
                a.group.as_str(),
                a.version.as_str(),
                a.namespace.as_str()
            ),
            ("watch", "apps", "v1", "")
        );
        // kubectl get pod x -w: a watch of one name through the field selector.
        let a = attrs("/api/v1/namespaces/a/pods?fieldSelector=metadata.name%3Dx&watch=true");
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("watch", "x"));
        assert_eq!(
            a.to_json(),
            json!({"namespace": "a", "verb": "watch", "version": "v1", "resource": "pods",
                   "name": "x", "fieldSelector": {"requirements": [
                       {"key": "metadata.name", "operator": "In", "values": ["x"]}]}})
        );
        // A namespace object names its own namespace.
        let a = attrs("/api/v1/namespaces/kube-system?resourceVersion=0");
        assert_eq!(
            (a.namespace.as_str(), a.resource.as_str(), a.name.as_str()),
            ("kube-system", "namespaces", "kube-system")
        );
        // The legacy watch path.
        let a = attrs("/api/v1/watch/namespaces/a/pods/x");
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("watch", "x"));
        // Label requirements, Gt/Lt left out.
        let a = attrs("/api/v1/pods?labelSelector=a%3Db,c,!d,e%20notin%20(x),f%3E1");
        let ops: Vec<(&str, &str)> = a
            .label_selector
            .iter()
            .map(|r| (r.key.as_str(), r.operator))
            .collect();
        assert_eq!(
            ops,
            [
                ("a", "In"),
                ("c", "Exists"),
                ("d", "DoesNotExist"),
                ("e", "NotIn")
            ]
        );
    }

    #[test]
    fn writes_have_no_read_attributes() {
        let parsed = Parsed::new(
            &http::Method::POST,
            &"/api/v1/namespaces/a/pods".parse().unwrap(),
            &http::HeaderMap::new(),
        );
        assert!(Attributes::of_read(&parsed).is_none());
    }
}
