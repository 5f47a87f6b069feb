//! Resource metadata from upstream discovery (`/api/v1`, `/apis/{group}/{version}`):
//! kind, scope and verbs of each resource, fetched once per group/version and refreshed
//! after a while, so new CRDs become cacheable without a restart.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use serde::Deserialize;

use crate::model::resource::ResourceInfo;
use crate::upstream::{Upstream, UpstreamError};

/// How long a group/version's discovery answer is trusted before it is fetched again.
const TTL: Duration = Duration::from_secs(300);
/// Discovery documents are small; anything larger is a broken upstream.
const MAX_BYTES: usize = 16 * 1024 * 1024;

/// Why a group/version's resources could not be read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DiscoveryError {
    /// No answer: the upstream failed, or the gateway's own pool refused the request.
    #[error("discovery {path}: {source}")]
    Upstream {
        path: String,
        #[source]
        source: UpstreamError,
    },
    #[error("discovery {path} returned {status}")]
    Status {
        path: String,
        status: http::StatusCode,
    },
    #[error("discovery {path}: {reason}")]
    NotAResourceList { path: String, reason: String },
}

#[derive(Deserialize)]
struct ApiResourceList {
    #[serde(default)]
    resources: Vec<ApiResource>,
}

#[derive(Deserialize)]
struct ApiResource {
    name: String,
    #[serde(default)]
    namespaced: bool,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    verbs: Vec<String>,
}

struct Entry {
    fetched: Instant,
    resources: Arc<Vec<Arc<ResourceInfo>>>,
}

/// Cached upstream discovery.
pub struct Discovery {
    upstream: Upstream,
    entries: DashMap<(String, String), Entry>,
}

impl Discovery {
    pub fn new(upstream: Upstream) -> Self {
        Self {
            upstream,
            entries: DashMap::new(),
        }
    }

    /// Forgets every answer: the upstream is another cluster (or a restored one), whose
    /// resources (CRDs, scopes, kinds) are asked again.
    pub fn forget(&self) {
        self.entries.clear();
    }

    /// The cacheable resource `resource` of `group/version`, if the upstream serves it with
    /// `list` and `watch`. `Ok(None)` means "not cacheable"; `Err` means discovery failed.
    pub async fn resource(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Result<Option<Arc<ResourceInfo>>, DiscoveryError> {
        let key = (group.to_string(), version.to_string());
        let fresh = self
            .entries
            .get(&key)
            .filter(|e| e.fetched.elapsed() < TTL)
            .map(|e| e.resources.clone());
        let resources = match fresh {
            Some(r) => r,
            None => {
                let r = Arc::new(self.fetch(group, version).await?);
                self.entries.insert(
                    key,
                    Entry {
                        fetched: Instant::now(),
                        resources: r.clone(),
                    },
                );
                r
            }
        };
        Ok(resources.iter().find(|r| r.resource == resource).cloned())
    }

    async fn fetch(
        &self,
        group: &str,
        version: &str,
    ) -> Result<Vec<Arc<ResourceInfo>>, DiscoveryError> {
        let path = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let answer = match self
            .upstream
            .get_internal(&path, "application/json", MAX_BYTES)
            .await
        {
            Ok(a) => a,
            Err(source) => return Err(DiscoveryError::Upstream { path, source }),
        };
        if answer.status == http::StatusCode::NOT_FOUND {
            return Ok(Vec::new());
        }
        if !answer.status.is_success() {
            let status = answer.status;
            return Err(DiscoveryError::Status { path, status });
        }
        let list: ApiResourceList = match serde_json::from_slice(&answer.body) {
            Ok(l) => l,
            Err(e) => {
                let reason = e.to_string();
                return Err(DiscoveryError::NotAResourceList { path, reason });
            }
        };
        Ok(parse_resources(group, version, list))
    }
}

fn parse_resources(group: &str, version: &str, list: ApiResourceList) -> Vec<Arc<ResourceInfo>> {
    list.resources
        .into_iter()
        .filter(|r| {
            // Subresources (`pods/log`) are never cached; neither is anything that cannot
            // be both listed and watched.
            !r.name.contains('/')
                && r.verbs.iter().any(|v| v == "list")
                && r.verbs.iter().any(|v| v == "watch")
        })
        .map(|r| {
            Arc::new(ResourceInfo {
                field_labels: field_labels(group, &r.name),
                group: group.to_string(),
                version: version.to_string(),
                resource: r.name,
                kind: r.kind,
                namespaced: r.namespaced,
            })
        })
        .collect()
}

/// The field-selector labels kube-apiserver supports per type beyond `metadata.*`
/// (`model::field_labels`); types it does not know get only `metadata.*`, and requests
/// selecting on other fields are forwarded, so the upstream gives its own answer.
fn field_labels(group: &str, resource: &str) -> Vec<(&'static str, &'static str)> {
    crate::model::field_labels::of(group, resource)
        .iter()
        .map(|f| (f.label, f.path))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_listable_watchable_top_level_resources() {
        let list: ApiResourceList = serde_json::from_str(
            r#"{"kind":"APIResourceList","groupVersion":"v1","resources":[
              {"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["create","get","list","watch"]},
              {"name":"pods/log","singularName":"","namespaced":true,"kind":"Pod","verbs":["get"]},
              {"name":"bindings","namespaced":true,"kind":"Binding","verbs":["create"]},
              {"name":"nodes","namespaced":false,"kind":"Node","verbs":["get","list","watch"]}]}"#,
        )
        .unwrap();
        let rs = parse_resources("", "v1", list);
        let names: Vec<_> = rs.iter().map(|r| r.resource.as_str()).collect();
        assert_eq!(names, ["pods", "nodes"]);
        assert!(rs[0].namespaced && !rs[1].namespaced);
        assert!(rs[0]
            .field_labels
            .iter()
            .any(|(l, _)| *l == "spec.nodeName"));
    }
}
