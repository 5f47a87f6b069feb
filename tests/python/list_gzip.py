"""List all configmaps with resourceVersion="0" through the official Python client,
once asking for gzip and once with the client's defaults.

Usage: list_gzip.py KUBECONFIG

Prints {"gzip": {"contentEncoding", "resourceVersion", "names"}, "default": {...}}.
The client does not ask for gzip by default (http.client sends
`Accept-Encoding: identity`); with the header, urllib3 inflates the answer.
"""

import json
import sys

from kubernetes import client, config


def names(items):
    return [f"{i.metadata.namespace}/{i.metadata.name}" for i in items]


def main():
    config.load_kube_config(config_file=sys.argv[1])
    api = client.CoreV1Api()
    gz = {"Accept-Encoding": "gzip"}
    typed = api.list_config_map_for_all_namespaces(resource_version="0", _headers=gz)
    raw = api.list_config_map_for_all_namespaces(
        resource_version="0", _headers=gz, _preload_content=False
    )
    default = api.list_config_map_for_all_namespaces(resource_version="0")
    print(
        json.dumps(
            {
                "gzip": {
                    "contentEncoding": raw.headers.get("Content-Encoding"),
                    "resourceVersion": typed.metadata.resource_version,
                    "names": names(typed.items),
                },
                "default": {
                    "resourceVersion": default.metadata.resource_version,
                    "names": names(default.items),
                },
            }
        )
    )


if __name__ == "__main__":
    main()
