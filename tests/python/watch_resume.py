"""Resume a pod watch from a given resourceVersion with the official Python client.

Usage: watch_resume.py KUBECONFIG NAMESPACE RESOURCE_VERSION COUNT

Runs `watch.Watch().stream(v1.list_namespaced_pod, NAMESPACE, resource_version=RV)` and
prints one JSON object per event on stdout, in the order received:
  {"event": TYPE, "name": NAME, "rv": RV, "phase": PHASE}
It exits 0 after COUNT events, or 1 if the stream ends (timeout) first. The Rust test
(tests/watch_clients.rs) asserts that the events are exactly the changes after RV.
If the client raises ApiException (a 410 for an RV older than the history), it prints
  {"error": STATUS, "reason": REASON}
and exits 2.
"""

import json
import sys

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException


def main():
    kubeconfig, namespace, rv, count = sys.argv[1:5]
    count = int(count)
    config.load_kube_config(config_file=kubeconfig)
    v1 = client.CoreV1Api()

    seen = 0
    w = watch.Watch()
    try:
        for ev in w.stream(
            v1.list_namespaced_pod,
            namespace,
            resource_version=rv,
            timeout_seconds=60,
        ):
            print_event(ev)
            seen += 1
            if seen == count:
                w.stop()
                return 0
    except ApiException as e:
        print(json.dumps({"error": e.status, "reason": e.reason}), flush=True)
        return 2
    print(f"watch ended after {seen} of {count} events", file=sys.stderr)
    return 1


def print_event(ev):
    obj = ev["object"]
    print(
        json.dumps(
            {
                "event": ev["type"],
                "name": obj.metadata.name,
                "rv": obj.metadata.resource_version,
                "phase": obj.status.phase if obj.status else None,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
