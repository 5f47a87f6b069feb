//! Scenarios as plans: groups of identical watchers, list workers, and the pool's shape.

use std::sync::Arc;

use super::args::{Common, Scenario};
use super::lister::ListSpec;
use super::watcher::WatchSpec;

/// What one run does.
#[derive(Debug, Clone)]
pub struct Plan {
    pub name: &'static str,
    pub common: Common,
    /// (what, how many).
    pub groups: Vec<(Arc<WatchSpec>, usize)>,
    /// Kubelet groups: one watcher per node, fieldSelector=spec.nodeName=<node>.
    pub kubelets: usize,
    pub kubelet_protocol_path: String,
    pub lists: Option<ListPlan>,
    pub nodes: usize,
    pub node_prefix: String,
}

#[derive(Debug, Clone)]
pub struct ListPlan {
    pub spec: Arc<ListSpec>,
    pub concurrency: usize,
    /// Lists per second (0: closed loop).
    pub rate: f64,
}

fn selector_query(label: &Option<String>, field: &Option<String>) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    if let Some(s) = label {
        q.append_pair("labelSelector", s);
    }
    if let Some(s) = field {
        q.append_pair("fieldSelector", s);
    }
    q.finish()
}

impl Plan {
    fn empty(name: &'static str, c: &Common) -> Self {
        Plan {
            name,
            groups: vec![],
            kubelets: 0,
            kubelet_protocol_path: String::new(),
            lists: None,
            nodes: 10,
            node_prefix: "load-node".into(),
            common: c.clone(),
        }
    }

    pub fn from_scenario(s: &Scenario) -> Self {
        let ns_path = |c: &Common| format!("/api/v1/namespaces/{}/pods", c.namespace);
        match s {
            Scenario::WatchFanout(a) => {
                let c = a.common.clone();
                let spec = WatchSpec {
                    path: if a.all_namespaces {
                        "/api/v1/pods".into()
                    } else {
                        ns_path(&c)
                    },
                    label_selector: a.label_selector.clone(),
                    field_selector: a.field_selector.clone(),
                    list_first: false,
                    watch_list: false,
                    rv0: None,
                    protocol: c.protocol,
                    reconnect_every: a.reconnect_every,
                    lifetime: None,
                    encoding: c.encoding,
                };
                Plan {
                    name: "watch-fanout",
                    groups: vec![(Arc::new(spec), a.watchers)],
                    kubelets: 0,
                    kubelet_protocol_path: String::new(),
                    lists: None,
                    nodes: a.nodes,
                    node_prefix: "load-node".into(),
                    common: c,
                }
            }
            Scenario::Kubelets(a) => Plan {
                name: "kubelets",
                groups: vec![],
                kubelets: a.nodes,
                kubelet_protocol_path: "/api/v1/pods".into(),
                lists: None,
                nodes: a.nodes,
                node_prefix: a.node_prefix.clone(),
                common: a.common.clone(),
            },
            Scenario::Informers(a) => {
                let c = a.common.clone();
                let spec = WatchSpec {
                    path: if a.all_namespaces {
                        "/api/v1/pods".into()
                    } else {
                        ns_path(&c)
                    },
                    label_selector: a.label_selector.clone(),
                    field_selector: None,
                    list_first: !a.watch_list,
                    watch_list: a.watch_list,
                    rv0: None,
                    protocol: c.protocol,
                    reconnect_every: None,
                    lifetime: None,
                    encoding: c.encoding,
                };
                Plan {
                    name: "informers",
                    groups: vec![(Arc::new(spec), a.clients)],
                    kubelets: 0,
                    kubelet_protocol_path: String::new(),
                    lists: None,
                    nodes: 10,
                    node_prefix: "load-node".into(),
                    common: c,
                }
            }
            Scenario::Lists(a) => Plan {
                name: "lists",
                groups: vec![],
                kubelets: 0,
                kubelet_protocol_path: String::new(),
                lists: Some(ListPlan {
                    spec: Arc::new(ListSpec {
                        path: a.path.clone(),
                        query: selector_query(&a.label_selector, &a.field_selector),
                        limit: a.limit,
                        resource_version: a.resource_version.clone(),
                        encoding: a.common.encoding,
                    }),
                    concurrency: a.concurrency.max(1),
                    rate: a.list_rate,
                }),
                nodes: 10,
                node_prefix: "load-node".into(),
                common: a.common.clone(),
            },
            // They run themselves (src/load/herds); a plan only names them.
            Scenario::ColdHerd(a) => Plan::empty("cold-herd", &a.common),
            Scenario::QuietLarge(a) => Plan::empty("quiet-large", &a.common),
            Scenario::Restart(a) => Plan::empty("restart", &a.common),
            Scenario::Soak(a) => {
                // The healthy watchers; the soak adds the stalled and storming ones.
                let c = a.common.clone();
                let spec = WatchSpec {
                    path: ns_path(&c),
                    label_selector: None,
                    field_selector: None,
                    list_first: false,
                    protocol: c.protocol,
                    reconnect_every: None,
                    lifetime: None,
                    watch_list: false,
                    rv0: None,
                    encoding: c.encoding,
                };
                Plan {
                    name: "soak",
                    groups: vec![(Arc::new(spec), a.watchers)],
                    kubelets: 0,
                    kubelet_protocol_path: String::new(),
                    lists: None,
                    nodes: 10,
                    node_prefix: "load-node".into(),
                    common: c,
                }
            }
            Scenario::Mixed(a) => {
                let c = a.common.clone();
                let mut groups = Vec::new();
                if a.watchers > 0 {
                    groups.push((
                        Arc::new(WatchSpec {
                            path: ns_path(&c),
                            label_selector: None,
                            field_selector: None,
                            list_first: false,
                            watch_list: false,
                            rv0: None,
                            protocol: c.protocol,
                            reconnect_every: None,
                            lifetime: None,
                            encoding: c.encoding,
                        }),
                        a.watchers,
                    ));
                }
                if a.informers > 0 {
                    groups.push((
                        Arc::new(WatchSpec {
                            path: ns_path(&c),
                            label_selector: None,
                            field_selector: None,
                            list_first: true,
                            watch_list: false,
                            rv0: None,
                            protocol: c.protocol,
                            reconnect_every: None,
                            lifetime: None,
                            encoding: c.encoding,
                        }),
                        a.informers,
                    ));
                }
                Plan {
                    name: "mixed",
                    groups,
                    kubelets: a.kubelets,
                    kubelet_protocol_path: "/api/v1/pods".into(),
                    lists: (a.list_concurrency > 0).then(|| ListPlan {
                        spec: Arc::new(ListSpec {
                            path: a.list_path.clone(),
                            query: String::new(),
                            limit: 0,
                            resource_version: "0".into(),
                            encoding: c.encoding,
                        }),
                        concurrency: a.list_concurrency,
                        rate: 0.0,
                    }),
                    nodes: a.kubelets.max(1),
                    node_prefix: "load-node".into(),
                    common: c,
                }
            }
        }
    }

    /// Every watcher's group: the explicit groups, then one group per kubelet.
    pub fn watcher_groups(&self) -> Vec<(Arc<WatchSpec>, usize)> {
        let mut out = self.groups.clone();
        for i in 0..self.kubelets {
            out.push((
                Arc::new(WatchSpec {
                    path: self.kubelet_protocol_path.clone(),
                    label_selector: None,
                    field_selector: Some(format!("spec.nodeName={}-{i}", self.node_prefix)),
                    list_first: false,
                    watch_list: false,
                    rv0: None,
                    protocol: self.common.protocol,
                    reconnect_every: None,
                    lifetime: None,
                    encoding: self.common.encoding,
                }),
                1,
            ));
        }
        out
    }

    pub fn watchers(&self) -> usize {
        self.groups.iter().map(|g| g.1).sum::<usize>() + self.kubelets
    }
}
