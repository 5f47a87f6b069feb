"""List all pods with resourceVersion="0" through the official Python client.

Usage: list_rv0.py KUBECONFIG [consistent]

With `consistent`, the list has no resourceVersion (a consistent read).

Prints {"resourceVersion": RV, "names": ["ns/name", ...]} on stdout.
"""

import json
import sys

from kubernetes import client, config


def main():
    config.load_kube_config(config_file=sys.argv[1])
    if len(sys.argv) > 2 and sys.argv[2] == "consistent":
        pods = client.CoreV1Api().list_pod_for_all_namespaces()
    else:
        pods = client.CoreV1Api().list_pod_for_all_namespaces(resource_version="0")
    names = [f"{p.metadata.namespace}/{p.metadata.name}" for p in pods.items]
    print(json.dumps({"resourceVersion": pods.metadata.resource_version, "names": names}))


if __name__ == "__main__":
    main()
