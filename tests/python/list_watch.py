"""List, then watch, with the official Python kubernetes client.

Usage: list_watch.py KUBECONFIG NAMESPACE TARGET

Prints one JSON object per line on stdout, for the Rust test to assert on:
  {"list": {"resourceVersion": RV, "names": [...]}}      the initial list
  {"event": TYPE, "name": NAME, "rv": RV, "data": {...}}  each watch event, in order
It watches from the list's resourceVersion (so no write made after the list can be missed,
however late the watch connects) and exits 0 once TARGET is DELETED, or 1 if the stream
ends (timeout) first.
"""

import json
import sys

from kubernetes import client, config, watch


def main():
    kubeconfig, namespace, target = sys.argv[1:4]
    config.load_kube_config(config_file=kubeconfig)
    v1 = client.CoreV1Api()

    listed = v1.list_namespaced_config_map(namespace)
    rv = listed.metadata.resource_version
    names = [cm.metadata.name for cm in listed.items]
    print(json.dumps({"list": {"resourceVersion": rv, "names": names}}), flush=True)

    w = watch.Watch()
    for ev in w.stream(
        v1.list_namespaced_config_map,
        namespace,
        resource_version=rv,
        timeout_seconds=60,
    ):
        obj = ev["object"]
        print(
            json.dumps(
                {
                    "event": ev["type"],
                    "name": obj.metadata.name,
                    "rv": obj.metadata.resource_version,
                    "data": obj.data or {},
                }
            ),
            flush=True,
        )
        if ev["type"] == "DELETED" and obj.metadata.name == target:
            w.stop()
            return 0
    print(f"watch ended before {target} was deleted", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
