"""Strict schema check of Kubernetes manifests (multi-document YAML on stdin).

Kinds of the Kubernetes API are checked against the Python `kubernetes` client's models,
which are generated from the apiserver's OpenAPI document: every field name must exist in
the kind's schema (so a misspelt `readinesProbe` fails) and scalars must have the
schema's type. The Prometheus Operator kinds (PodMonitor, PrometheusRule) are checked
against tests/fixtures/monitoring-coreos-v1.json, the part of their CRD schemas that the
manifests may use, with the CRDs' field names.

Prints one line per document (`ok <kind>/<name>`) and one per error (`error <path>: why`);
exits 1 when any error was found.
"""

import json
import sys

import yaml
from kubernetes import client

CRD_SCHEMAS = json.load(open(sys.argv[1])) if len(sys.argv) > 1 else {}
errors = []


def err(path, msg):
    errors.append(f"error {path}: {msg}")


def scalar_ok(value, typ):
    if typ == "str":
        return isinstance(value, str)
    if typ == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if typ == "bool":
        return isinstance(value, bool)
    if typ == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typ == "object":  # IntOrString, Quantity and free-form fields
        return True
    if typ in ("datetime", "date"):
        return isinstance(value, str)
    return None


def check_model(value, typ, path):
    """Checks `value` against a client model type string ('V1Pod', 'list[str]', ...)."""
    if value is None:
        return
    ok = scalar_ok(value, typ)
    if ok is not None:
        if not ok:
            err(path, f"expected {typ}, got {type(value).__name__} {value!r}")
        return
    # The client spells containers `list[T]`/`dict(str, T)` or `List[T]`/`Dict[str, T]`.
    if typ.lower().startswith("list["):
        if not isinstance(value, list):
            err(path, f"expected a list, got {value!r}")
            return
        for i, item in enumerate(value):
            check_model(item, typ[5:-1], f"{path}[{i}]")
        return
    if typ.lower().startswith(("dict(", "dict[")):
        if not isinstance(value, dict):
            err(path, f"expected a map, got {value!r}")
            return
        inner = typ[5:-1].split(",", 1)[1].strip()
        for k, v in value.items():
            check_model(v, inner, f"{path}.{k}")
        return
    model = getattr(client, typ, None)
    if model is None:
        err(path, f"no schema for type {typ}")
        return
    if not isinstance(value, dict):
        err(path, f"expected an object ({typ}), got {value!r}")
        return
    by_json = {j: attr for attr, j in model.attribute_map.items()}
    for key, v in value.items():
        attr = by_json.get(key)
        if attr is None:
            err(f"{path}.{key}", f'unknown field "{key}" in {typ}')
            continue
        check_model(v, model.openapi_types[attr], f"{path}.{key}")


def check_crd(value, schema, path):
    """Checks `value` against an openAPIV3Schema-like subset."""
    if value is None:
        return
    if "$k8s" in schema:
        check_model(value, schema["$k8s"], path)
        return
    t = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            err(path, f"expected int or string, got {value!r}")
        return
    if t == "object":
        if not isinstance(value, dict):
            err(path, f"expected an object, got {value!r}")
            return
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for k, v in value.items():
            if props is not None and k in props:
                check_crd(v, props[k], f"{path}.{k}")
            elif extra is not None:
                check_crd(v, extra, f"{path}.{k}")
            else:
                err(f"{path}.{k}", f'unknown field "{k}"')
        for r in schema.get("required", []):
            if r not in value:
                err(path, f'missing required field "{r}"')
    elif t == "array":
        if not isinstance(value, list):
            err(path, f"expected an array, got {value!r}")
            return
        for i, item in enumerate(value):
            check_crd(item, schema["items"], f"{path}[{i}]")
    elif t == "string":
        if not isinstance(value, str):
            err(path, f"expected a string, got {value!r}")
    elif t == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            err(path, f"expected an integer, got {value!r}")
    elif t == "boolean":
        if not isinstance(value, bool):
            err(path, f"expected a boolean, got {value!r}")


def check_doc(doc, i):
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    name = (doc.get("metadata") or {}).get("name")
    where = f"{kind}/{name}"
    if not api_version or not kind or not name:
        err(f"doc[{i}]", "apiVersion, kind and metadata.name are required")
        return
    before = len(errors)
    crd = CRD_SCHEMAS.get(f"{api_version}/{kind}")
    if crd is not None:
        check_crd(doc, crd, where)
    else:
        version = api_version.split("/")[-1]
        typ = version[0].upper() + version[1:] + kind
        if getattr(client, typ, None) is None:
            err(where, f"no schema known for {api_version} {kind}")
            return
        check_model(doc, typ, where)
    if len(errors) == before:
        print(f"ok {where}")


for i, doc in enumerate(yaml.safe_load_all(sys.stdin)):
    if doc is not None:
        check_doc(doc, i)
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
