//! Authentication, impersonation and authorization in the simulator, from a small static
//! policy file (`watchgate sim --policy FILE`), and the two review APIs a delegating
//! server needs: TokenReview and SubjectAccessReview. Writes are recorded with the
//! identity they were made as (`/debug/sim/audit`), so tests can check that a gateway
//! forwards them as its client.
//!
//! The policy is a stand-in for RBAC, not a port of it: users with bearer tokens, each
//! with rules of verbs × resources (× namespaces, × names). Its answers use the same
//! 401/403 Statuses kube-apiserver gives (`crate::auth::answers`). Without a policy the
//! simulator authenticates nothing, as before.
//!
//! ```yaml
//! anonymous: false            # requests without a token: 401 (true: system:anonymous)
//! users:
//!   - name: watchgate
//!     token: gateway-token
//!     groups: [system:serviceaccounts]
//!     impersonate: true       # may send Impersonate-* headers
//!     rules: [{verbs: ["*"], resources: ["*"]}]
//!   - name: alice
//!     token: alice-token
//!     rules:
//!       - verbs: [get, list, watch]
//!         resources: [pods, configmaps, deployments.apps]
//!       - verbs: [create, update, patch, delete]
//!         resources: [configmaps]
//!         namespaces: [default]
//! ```
//!
//! Non-resource paths (discovery, /version, /openapi, health) are open to every
//! authenticated user, as `system:discovery` and `system:basic-user` make them; anonymous
//! users get the health checks and /version (`system:public-info-viewer`).

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use http::{header, HeaderMap, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::auth::answers;
use crate::auth::attributes::Attributes;
use crate::auth::authn::take_token;
use crate::auth::user::{
    path_unescape, UserInfo, ANONYMOUS, AUTHENTICATED, IMPERSONATE_EXTRA_PREFIX, IMPERSONATE_GROUP,
    IMPERSONATE_UID, IMPERSONATE_USER, UNAUTHENTICATED,
};
use crate::body::Body;
use crate::request::{ApiPath, ApiRequest, Verb};

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub anonymous: bool,
    #[serde(default)]
    pub users: Vec<PolicyUser>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PolicyUser {
    pub name: String,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub impersonate: bool,
    #[serde(default)]
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub verbs: Vec<String>,
    /// `pods`, `deployments.apps`, `pods/log`, or `*`.
    pub resources: Vec<String>,
    /// Empty: every namespace and the cluster scope.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Empty: every name.
    #[serde(default)]
    pub names: Vec<String>,
}

impl Policy {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading the policy {}: {e}", path.display()))?;
        Self::parse(&text)
    }

    pub fn parse(text: &str) -> anyhow::Result<Self> {
        serde_saphyr::from_str(text).map_err(|e| anyhow::anyhow!("invalid policy: {e}"))
    }

    fn by_token(&self, token: &str) -> Option<&PolicyUser> {
        self.users
            .iter()
            .find(|u| u.token.as_deref() == Some(token))
    }

    fn by_name(&self, name: &str) -> Option<&PolicyUser> {
        self.users.iter().find(|u| u.name == name)
    }

    /// Whether `user` may do `attrs` (a user not in the policy may do nothing).
    pub fn allows(&self, user: &str, attrs: &Attributes) -> bool {
        let Some(u) = self.by_name(user) else {
            return false;
        };
        let mut resource = if attrs.group.is_empty() {
            attrs.resource.clone()
        } else {
            format!("{}.{}", attrs.resource, attrs.group)
        };
        if !attrs.subresource.is_empty() {
            resource = format!("{resource}/{}", attrs.subresource);
        }
        u.rules.iter().any(|r| {
            let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
            any(&r.verbs, &attrs.verb)
                && any(&r.resources, &resource)
                && (r.namespaces.is_empty() || any(&r.namespaces, &attrs.namespace))
                && (r.names.is_empty() || any(&r.names, &attrs.name))
        })
    }

    fn info(u: &PolicyUser) -> UserInfo {
        let mut groups = u.groups.clone();
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.into());
        }
        UserInfo {
            name: u.name.clone(),
            uid: u.uid.clone(),
            groups,
            extra: BTreeMap::new(),
        }
    }
}

/// The identity a request was served as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user: UserInfo,
    /// The authenticated user who impersonated `user`, if any.
    pub impersonator: Option<String>,
}

/// One recorded write.
#[derive(Debug, Clone)]
pub struct AuditRecord {
    pub verb: &'static str,
    pub path: String,
    pub code: u16,
    pub user: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
    pub impersonator: Option<String>,
}

impl AuditRecord {
    pub fn to_json(&self) -> Value {
        json!({"verb": self.verb, "path": self.path, "code": self.code, "user": self.user,
               "groups": self.groups, "extra": self.extra, "impersonator": self.impersonator})
    }
}

/// The last writes, with their identities (bounded: the oldest go first).
#[derive(Debug, Default)]
pub struct Audit {
    records: Mutex<VecDeque<AuditRecord>>,
    token_reviews: AtomicU64,
    access_reviews: AtomicU64,
}

const AUDIT_MAX: usize = 10_000;

impl Audit {
    pub fn record(&self, r: AuditRecord) {
        let mut q = self.records.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == AUDIT_MAX {
            q.pop_front();
        }
        q.push_back(r);
    }

    /// TokenReviews and SubjectAccessReviews answered so far.
    pub fn reviews(&self) -> (u64, u64) {
        (
            self.token_reviews.load(Ordering::Relaxed),
            self.access_reviews.load(Ordering::Relaxed),
        )
    }

    pub fn records(&self) -> Vec<AuditRecord> {
        let q = self.records.lock().unwrap_or_else(|p| p.into_inner());
        q.iter().cloned().collect()
    }

    pub fn to_json(&self) -> Value {
        let (tokens, access) = self.reviews();
        json!({
            "tokenReviews": tokens,
            "subjectAccessReviews": access,
            "writes": self.records().iter().map(AuditRecord::to_json).collect::<Vec<_>>(),
        })
    }
}

/// Authenticates, applies impersonation and authorizes a request; the answer refusing it
/// otherwise.
pub fn check(
    policy: &Policy,
    headers: &HeaderMap,
    api: &ApiRequest,
) -> Result<Identity, Response<Body>> {
    let mut headers = headers.clone();
    let requestor = match take_token(&mut headers) {
        Some(token) => match policy.by_token(&token) {
            Some(u) => Policy::info(u),
            None => return Err(answers::unauthorized(error_form(&headers))),
        },
        None if policy.anonymous => UserInfo {
            name: ANONYMOUS.into(),
            groups: vec![UNAUTHENTICATED.into()],
            ..Default::default()
        },
        None => return Err(answers::unauthorized(error_form(&headers))),
    };
    let identity = impersonation(policy, &headers, requestor)?;
    let name = identity.user.name.as_str();
    match &api.path {
        ApiPath::NonResource(path) => {
            let public = matches!(
                path.trim_end_matches('/'),
                "/healthz" | "/livez" | "/readyz" | "/version"
            );
            if name == ANONYMOUS && !public {
                let status = crate::status::Status::new(
                    403,
                    "Forbidden",
                    format!(
                        "forbidden: User \"{name}\" cannot {} path {}",
                        api.method.as_str().to_lowercase(),
                        crate::selector::validation::go_quote(path)
                    ),
                );
                let mut status = status;
                status.with_details = true;
                return Err(status.into_response());
            }
        }
        ApiPath::Resource(_) => {
            let opts = matches!(api.verb, Verb::Get | Verb::List | Verb::Watch)
                .then(|| api.list_options().ok())
                .flatten();
            if let Some(attrs) = Attributes::of_request(api, opts.as_ref()) {
                if !policy.allows(name, &attrs) {
                    return Err(answers::forbidden(name, &attrs, "", error_form(&headers)));
                }
            }
        }
    }
    Ok(identity)
}

fn impersonation(
    policy: &Policy,
    headers: &HeaderMap,
    requestor: UserInfo,
) -> Result<Identity, Response<Body>> {
    let Some(user) = headers.get(IMPERSONATE_USER).and_then(|v| v.to_str().ok()) else {
        return Ok(Identity {
            user: requestor,
            impersonator: None,
        });
    };
    let may = policy
        .by_name(&requestor.name)
        .is_some_and(|u| u.impersonate);
    if !may {
        let attrs = Attributes {
            verb: "impersonate".into(),
            resource: "users".into(),
            name: user.into(),
            ..Default::default()
        };
        return Err(answers::forbidden(
            &requestor.name,
            &attrs,
            "",
            error_form(headers),
        ));
    }
    let mut groups: Vec<String> = headers
        .get_all(IMPERSONATE_GROUP)
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    if user != ANONYMOUS && !groups.iter().any(|g| g == AUTHENTICATED) {
        groups.push(AUTHENTICATED.into());
    }
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in headers {
        if let (Some(key), Ok(v)) = (
            k.as_str().strip_prefix(IMPERSONATE_EXTRA_PREFIX),
            v.to_str(),
        ) {
            extra.entry(path_unescape(key)).or_default().push(v.into());
        }
    }
    Ok(Identity {
        user: UserInfo {
            name: user.to_string(),
            uid: headers
                .get(IMPERSONATE_UID)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string(),
            groups,
            extra,
        },
        impersonator: Some(requestor.name),
    })
}

/// `POST /apis/authentication.k8s.io/v1/tokenreviews`.
pub fn token_review(policy: &Policy, audit: &Audit, body: &[u8]) -> Response<Body> {
    audit.token_reviews.fetch_add(1, Ordering::Relaxed);
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        return crate::status::Status::bad_request("invalid TokenReview").into_response();
    };
    let token = req["spec"]["token"].as_str().unwrap_or_default();
    let status = match policy.by_token(token) {
        Some(u) => {
            let info = Policy::info(u);
            let mut user = json!({"username": info.name, "groups": info.groups});
            if !info.uid.is_empty() {
                user["uid"] = json!(info.uid);
            }
            json!({"authenticated": true, "user": user})
        }
        None => json!({"user": {}, "error": "invalid bearer token"}),
    };
    created(json!({
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": req["spec"],
        "status": status,
    }))
}

/// `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`: the policy's verdict for
/// `spec.user` (RBAC's answer when no rule matches is "no opinion": not allowed, no
/// reason).
pub fn access_review(policy: &Policy, audit: &Audit, body: &[u8]) -> Response<Body> {
    audit.access_reviews.fetch_add(1, Ordering::Relaxed);
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        return crate::status::Status::bad_request("invalid SubjectAccessReview").into_response();
    };
    let spec = &req["spec"];
    let ra = &spec["resourceAttributes"];
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let attrs = Attributes {
        verb: s(&ra["verb"]),
        group: s(&ra["group"]),
        version: s(&ra["version"]),
        resource: s(&ra["resource"]),
        subresource: s(&ra["subresource"]),
        namespace: s(&ra["namespace"]),
        name: s(&ra["name"]),
        ..Default::default()
    };
    let allowed = policy.allows(spec["user"].as_str().unwrap_or_default(), &attrs);
    created(json!({
        "kind": "SubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": {"allowed": allowed},
    }))
}

fn created(v: Value) -> Response<Body> {
    let mut bytes = serde_json::to_vec(&v).unwrap_or_default();
    bytes.push(b'\n');
    let mut resp = Response::new(crate::body::full(bytes));
    *resp.status_mut() = http::StatusCode::CREATED;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// The policy of `watchgate demo --secure` and of the tests: a gateway identity that may
/// review and impersonate, an admin, a reader of everything but Secrets, and a reader of
/// one namespace's pods.
pub const DEMO_POLICY: &str = r#"
anonymous: false
users:
  - name: system:serviceaccount:watchgate:watchgate
    token: watchgate-token
    groups: [system:serviceaccounts, system:serviceaccounts:watchgate]
    impersonate: true
    rules:
      - verbs: ["*"]
        resources: ["*"]
  - name: admin
    token: admin-token
    groups: [system:masters]
    rules:
      - verbs: ["*"]
        resources: ["*"]
  - name: alice
    token: alice-token
    uid: alice-uid
    groups: [developers]
    rules:
      - verbs: [get, list, watch]
        resources: [pods, pods/log, configmaps, services, events, nodes, namespaces, deployments.apps, widgets.example.com]
      - verbs: [create, update, patch, delete]
        resources: [configmaps]
  - name: bob
    token: bob-token
    rules:
      - verbs: [get, list, watch]
        resources: [pods]
        namespaces: [team-b]
"#;

/// The demo policy, parsed.
pub fn demo_policy() -> Arc<Policy> {
    Arc::new(Policy::parse(DEMO_POLICY).expect("the demo policy parses"))
}

/// The form kube-apiserver writes an error Status in for a request with these headers
/// (`responsewriters.ErrorNegotiated`): the simulator negotiates each request itself.
fn error_form(headers: &http::HeaderMap) -> Option<crate::negotiate::Negotiated> {
    crate::negotiate::negotiate_error(
        headers
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_policy_allows_what_it_says() {
        let p = demo_policy();
        let a = |verb: &str, group: &str, resource: &str, ns: &str| Attributes {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            namespace: ns.into(),
            ..Default::default()
        };
        assert!(p.allows("alice", &a("list", "", "pods", "")));
        assert!(p.allows("alice", &a("watch", "apps", "deployments", "x")));
        assert!(!p.allows("alice", &a("list", "", "secrets", "default")));
        assert!(p.allows("bob", &a("list", "", "pods", "team-b")));
        assert!(!p.allows("bob", &a("list", "", "pods", "")));
        assert!(!p.allows("nobody", &a("get", "", "pods", "a")));
    }
}
