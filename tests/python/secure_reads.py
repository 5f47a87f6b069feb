"""Reads through a secured gateway with the official Python client and a token from the
kubeconfig: pods with resourceVersion="0" (allowed), secrets with resourceVersion="0"
(refused, also when cached).

Usage: secure_reads.py KUBECONFIG

Prints {"pods": [names], "secrets": {"status", "reason", "message"}}.
"""

import json
import sys

from kubernetes import client, config
from kubernetes.client.rest import ApiException


def main():
    config.load_kube_config(config_file=sys.argv[1])
    api = client.CoreV1Api()
    pods = api.list_pod_for_all_namespaces(resource_version="0")
    out = {"pods": sorted(p.metadata.name for p in pods.items)}
    try:
        api.list_secret_for_all_namespaces(resource_version="0")
        out["secrets"] = "allowed"
    except ApiException as e:
        body = json.loads(e.body)
        out["secrets"] = {
            "status": e.status,
            "reason": body["reason"],
            "message": body["message"],
        }
    print(json.dumps(out))


main()
