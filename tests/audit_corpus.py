"""
The audit's corpus: ingress-nginx's own docs/examples manifests (tests/data/ingress-nginx-examples,
SOURCE.md names the commit), examples/nginx-migration, and a controller ConfigMap with every key of
ingress-nginx's ConfigMap page (tests/data/ingress-nginx-docs/configmap.md), each at its documented default.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.support import ROOT

EXAMPLES = ROOT / "tests" / "data" / "ingress-nginx-examples"
MIGRATION = ROOT / "examples" / "nginx-migration"
CONFIGMAP_DOC = ROOT / "tests" / "data" / "ingress-nginx-docs" / "configmap.md"
SERVED_KINDS = ("Ingress", "Service", "ConfigMap", "Secret", "IngressClass")
CONTROLLER_CONFIGMAP = ("ingress-nginx", "ingress-nginx-controller")


def documented_keys() -> list[tuple[str, str]]:
    """
    Each key of configmap.md's table with its default as a ConfigMap would write it: "" for "", empty and
    Go's empty lists (C{[]string{}}), without the quotes or backticks around the others.
    """
    found = []
    for line in CONFIGMAP_DOC.read_text().splitlines():
        row = re.match(r"^\|\s*\[([a-z0-9-]+)\]\(#[^)]*\)\s*\|([^|]*)\|([^|]*)\|", line)
        if row:
            default = row.group(3).strip()
            empty = default in ('""', "empty", "''") or re.fullmatch(r"\[\]\w+\{\}", default)
            found.append((row.group(1), "" if empty else default.strip('"`')))
    return found


def every_key_config_map() -> dict[str, Any]:
    """ingress-nginx-controller with every documented key at its documented default."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONTROLLER_CONFIGMAP[1], "namespace": CONTROLLER_CONFIGMAP[0]},
        "data": dict(documented_keys()),
    }


# The examples' placeholders for the reader's own host names, filled in (the apiserver refuses them as written)
PLACEHOLDERS = {"__INGRESS_HOST__": "auth.example.com", "__INGRESS_SECRET__": "auth-tls", "registry.<your domain>": "registry.example.com"}


def manifests(directory: Path) -> list[dict[str, Any]]:
    """The objects of a directory's YAML files that twingress reads, in file order, placeholders filled in."""
    found = []
    for path in sorted(directory.glob("*.yaml")):
        text = path.read_text()
        for placeholder, value in PLACEHOLDERS.items():
            text = text.replace(placeholder, value)
        found += [doc for doc in yaml.safe_load_all(text) if isinstance(doc, dict) and doc.get("kind") in SERVED_KINDS]
    return found


def corpus() -> list[dict[str, Any]]:
    """
    The docs/examples objects and the migration example, with the every-key ConfigMap as the controller's
    (the examples' own ingress-nginx-controller ConfigMaps, four versions of one name, give way to it);
    of two objects of one kind and name (nginx-test is in two examples) the later one, as the manifests source keeps it.
    """
    objects = [
        o for o in manifests(EXAMPLES) + manifests(MIGRATION)
        if (o["metadata"].get("namespace", "default"), o["metadata"]["name"]) != CONTROLLER_CONFIGMAP or o["kind"] != "ConfigMap"
    ]
    latest = {(o["kind"], o["metadata"].get("namespace", "default"), o["metadata"]["name"]): o for o in objects}  # a later one replaces an earlier one, as in a store
    return [*latest.values(), every_key_config_map()]


def write_corpus(directory: Path) -> Path:
    """The corpus as one manifests file in C{directory}."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "corpus.yaml").write_text(yaml.safe_dump_all(corpus()))
    return directory


def our_annotations(obj: dict[str, Any]) -> list[str]:
    """An object's twingress.io/ and nginx.ingress.kubernetes.io/ annotation keys, sorted."""
    annotations = obj["metadata"].get("annotations") or {}
    return sorted(key for key in annotations if key.startswith(("twingress.io/", "nginx.ingress.kubernetes.io/")))
