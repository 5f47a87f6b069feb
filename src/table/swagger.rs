//! The OpenAPI field descriptions kube-apiserver's built-in printers put in their column
//! definitions: `pkg/printers/internalversion/printers.go` `AddHandlers` writes
//! `Description: apiv1.ServiceSpec{}.SwaggerDoc()["type"]` and the like, and `SwaggerDoc()`
//! returns the field's doc comment as generated into `types_swagger_doc_generated.go` of
//! k8s.io/api (release-1.36). Copied verbatim, one constant per field, named after the
//! Go type and field; `tests/cache_table.rs` checks every printer's columns against
//! kube-apiserver 1.36's (`tests/fixtures/printer-columns-1.36.json`). The printers of
//! Deployments and EndpointSlices take theirs from the older `extensions/v1beta1` and
//! `discovery/v1beta1` types, whose texts differ from `apps/v1`'s and `discovery/v1`'s.

/// k8s.io/api `core/v1` `PodStatus.SwaggerDoc()["podIP"]`.
pub(crate) const POD_STATUS_POD_IP: &str = "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.";

/// k8s.io/api `core/v1` `PodSpec.SwaggerDoc()["nodeName"]`.
pub(crate) const POD_SPEC_NODE_NAME: &str = "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename";

/// k8s.io/api `core/v1` `PodStatus.SwaggerDoc()["nominatedNodeName"]`.
pub(crate) const POD_STATUS_NOMINATED_NODE_NAME: &str = "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.";

/// k8s.io/api `core/v1` `PodSpec.SwaggerDoc()["readinessGates"]`.
pub(crate) const POD_SPEC_READINESS_GATES: &str = "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates";

/// k8s.io/api `core/v1` `NodeSystemInfo.SwaggerDoc()["kubeletVersion"]`.
pub(crate) const NODE_SYSTEM_INFO_KUBELET_VERSION: &str = "Kubelet Version reported by the node.";

/// k8s.io/api `core/v1` `NodeStatus.SwaggerDoc()["addresses"]`.
pub(crate) const NODE_STATUS_ADDRESSES: &str = "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).";

/// k8s.io/api `core/v1` `NodeSystemInfo.SwaggerDoc()["osImage"]`.
pub(crate) const NODE_SYSTEM_INFO_OS_IMAGE: &str =
    "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).";

/// k8s.io/api `core/v1` `NodeSystemInfo.SwaggerDoc()["kernelVersion"]`.
pub(crate) const NODE_SYSTEM_INFO_KERNEL_VERSION: &str =
    "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).";

/// k8s.io/api `core/v1` `NodeSystemInfo.SwaggerDoc()["containerRuntimeVersion"]`.
pub(crate) const NODE_SYSTEM_INFO_CONTAINER_RUNTIME_VERSION: &str = "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).";

/// k8s.io/api `core/v1` `ConfigMap.SwaggerDoc()["data"]`.
pub(crate) const CONFIG_MAP_DATA: &str = "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process.";

/// k8s.io/api `core/v1` `Secret.SwaggerDoc()["type"]`.
pub(crate) const SECRET_TYPE: &str = "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types";

/// k8s.io/api `core/v1` `Secret.SwaggerDoc()["data"]`.
pub(crate) const SECRET_DATA: &str = "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4";

/// k8s.io/api `core/v1` `ServiceSpec.SwaggerDoc()["type"]`.
pub(crate) const SERVICE_SPEC_TYPE: &str = "type determines how the Service is exposed. Defaults to ClusterIP. Valid options are ExternalName, ClusterIP, NodePort, and LoadBalancer. \"ClusterIP\" allocates a cluster-internal IP address for load-balancing to endpoints. Endpoints are determined by the selector or if that is not specified, by manual construction of an Endpoints object or EndpointSlice objects. If clusterIP is \"None\", no virtual IP is allocated and the endpoints are published as a set of endpoints rather than a virtual IP. \"NodePort\" builds on ClusterIP and allocates a port on every node which routes to the same endpoints as the clusterIP. \"LoadBalancer\" builds on NodePort and creates an external load-balancer (if supported in the current cloud) which routes to the same endpoints as the clusterIP. \"ExternalName\" aliases this service to the specified externalName. Several other fields do not apply to ExternalName services. More info: https://kubernetes.io/docs/concepts/services-networking/service/#publishing-services-service-types";

/// k8s.io/api `core/v1` `ServiceSpec.SwaggerDoc()["clusterIP"]`.
pub(crate) const SERVICE_SPEC_CLUSTER_IP: &str = "clusterIP is the IP address of the service and is usually assigned randomly. If an address is specified manually, is in-range (as per system configuration), and is not in use, it will be allocated to the service; otherwise creation of the service will fail. This field may not be changed through updates unless the type field is also being changed to ExternalName (which requires this field to be blank) or the type field is being changed from ExternalName (in which case this field may optionally be specified, as describe above).  Valid values are \"None\", empty string (\"\"), or a valid IP address. Setting this to \"None\" makes a \"headless service\" (no virtual IP), which is useful when direct endpoint connections are preferred and proxying is not required.  Only applies to types ClusterIP, NodePort, and LoadBalancer. If this field is specified when creating a Service of type ExternalName, creation will fail. This field will be wiped when updating a Service to type ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies";

/// k8s.io/api `core/v1` `ServiceSpec.SwaggerDoc()["externalIPs"]`.
pub(crate) const SERVICE_SPEC_EXTERNAL_IPS: &str = "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.  These IPs are not managed by Kubernetes.  The user is responsible for ensuring that traffic arrives at a node with this IP.  A common example is external load-balancers that are not part of the Kubernetes system.";

/// k8s.io/api `core/v1` `ServiceSpec.SwaggerDoc()["ports"]`.
pub(crate) const SERVICE_SPEC_PORTS: &str = "The list of ports that are exposed by this service. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies";

/// k8s.io/api `core/v1` `ServiceSpec.SwaggerDoc()["selector"]`.
pub(crate) const SERVICE_SPEC_SELECTOR: &str = "Route service traffic to pods with label keys and values matching this selector. If empty or not present, the service is assumed to have an external process managing its endpoints, which Kubernetes will not modify. Only applies to types ClusterIP, NodePort, and LoadBalancer. Ignored if type is ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/";

/// k8s.io/api `core/v1` `Endpoints.SwaggerDoc()["subsets"]`.
pub(crate) const ENDPOINTS_SUBSETS: &str = "The set of all endpoints is the union of all subsets. Addresses are placed into subsets according to the IPs they share. A single address with multiple ports, some of which are ready and some of which are not (because they come from different containers) will result in the address being displayed in different subsets for the different ports. No address will appear in both Addresses and NotReadyAddresses in the same subset. Sets of addresses and ports that comprise a service.";

/// k8s.io/api `core/v1` `Event.SwaggerDoc()["lastTimestamp"]`.
pub(crate) const EVENT_LAST_TIMESTAMP: &str =
    "The time at which the most recent occurrence of this event was recorded.";

/// k8s.io/api `core/v1` `Event.SwaggerDoc()["type"]`.
pub(crate) const EVENT_TYPE: &str =
    "Type of this event (Normal, Warning), new types could be added in the future";

/// k8s.io/api `core/v1` `Event.SwaggerDoc()["reason"]`.
pub(crate) const EVENT_REASON: &str = "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.";

/// k8s.io/api `core/v1` `Event.SwaggerDoc()["involvedObject"]`.
pub(crate) const EVENT_INVOLVED_OBJECT: &str = "The object that this event is about.";

/// k8s.io/api `core/v1` `ObjectReference.SwaggerDoc()["fieldPath"]`.
pub(crate) const OBJECT_REFERENCE_FIELD_PATH: &str = "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: \"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.";

/// k8s.io/api `core/v1` `Event.SwaggerDoc()["source"]`.
pub(crate) const EVENT_SOURCE: &str =
    "The component reporting this event. Should be a short machine understandable string.";

/// k8s.io/api `core/v1` `Event.SwaggerDoc()["message"]`.
pub(crate) const EVENT_MESSAGE: &str =
    "A human-readable description of the status of this operation.";

/// k8s.io/api `core/v1` `Event.SwaggerDoc()["firstTimestamp"]`.
pub(crate) const EVENT_FIRST_TIMESTAMP: &str =
    "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)";

/// k8s.io/api `core/v1` `Event.SwaggerDoc()["count"]`.
pub(crate) const EVENT_COUNT: &str = "The number of times this event has occurred.";

/// k8s.io/api `extensions/v1beta1` `DeploymentStatus.SwaggerDoc()["updatedReplicas"]`.
pub(crate) const EXTENSIONS_DEPLOYMENT_STATUS_UPDATED_REPLICAS: &str = "Total number of non-terminating pods targeted by this deployment that have the desired template spec.";

/// k8s.io/api `extensions/v1beta1` `DeploymentStatus.SwaggerDoc()["availableReplicas"]`.
pub(crate) const EXTENSIONS_DEPLOYMENT_STATUS_AVAILABLE_REPLICAS: &str = "Total number of available non-terminating pods (ready for at least minReadySeconds) targeted by this deployment.";

/// k8s.io/api `extensions/v1beta1` `DeploymentSpec.SwaggerDoc()["selector"]`.
pub(crate) const EXTENSIONS_DEPLOYMENT_SPEC_SELECTOR: &str = "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.";

/// k8s.io/api `discovery/v1beta1` `EndpointSlice.SwaggerDoc()["addressType"]`.
pub(crate) const DISCOVERY_V1BETA1_ENDPOINT_SLICE_ADDRESS_TYPE: &str = "addressType specifies the type of address carried by this EndpointSlice. All addresses in this slice must be the same type. This field is immutable after creation. The following address types are currently supported: * IPv4: Represents an IPv4 Address. * IPv6: Represents an IPv6 Address. * FQDN: Represents a Fully Qualified Domain Name.";

/// k8s.io/api `discovery/v1beta1` `EndpointSlice.SwaggerDoc()["ports"]`.
pub(crate) const DISCOVERY_V1BETA1_ENDPOINT_SLICE_PORTS: &str = "ports specifies the list of network ports exposed by each endpoint in this slice. Each port must have a unique name. When ports is empty, it indicates that there are no defined ports. When a port is defined with a nil port value, it indicates \"all ports\". Each slice may include a maximum of 100 ports.";

/// k8s.io/api `discovery/v1beta1` `EndpointSlice.SwaggerDoc()["endpoints"]`.
pub(crate) const DISCOVERY_V1BETA1_ENDPOINT_SLICE_ENDPOINTS: &str = "endpoints is a list of unique endpoints in this slice. Each slice may include a maximum of 1000 endpoints.";
