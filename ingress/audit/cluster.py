# -*- test-case-name: tests.kube.test_audit -*-
"""
The cluster read once, for the audit: every kind the proxy watches, listed page by page with the same
resources, selectors and parsing as its informers (L{ingress.sources.kube.source.RESOURCES},
L{ingress.sources.kube.reflector.parse_item}), into one L{ClusterState}; or a manifests directory,
read as the files source reads it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ingress.model import ClusterState, ObjectRef, Problem
from ingress.model.parse import KINDS, collect, parse_objects
from ingress.sources.files import SUFFIXES, load_documents
from ingress.sources.kube.client import APIError, KubeClient
from ingress.sources.kube.reflector import LIST_PAGE, Resource, parse_item
from ingress.sources.kube.source import OPTIONAL_KINDS, RESOURCES, config_map_resource


class SourceError(Exception):
    """The source could not be read (the apiserver unreachable, a kind refused that the table needs): one line."""


def read_manifests(directory: str) -> ClusterState:
    """Every manifest file of C{directory}, parsed as L{ingress.sources.files} does; a file that fails is a problem."""
    objects: list[Any] = []
    problems: list[Problem] = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(SUFFIXES) or name.startswith("."):
            continue
        try:
            objects.extend(load_documents(os.path.join(directory, name)))
        except (OSError, ValueError) as error:
            problems.append(Problem(ObjectRef("File", "", name), "InvalidManifest", str(error), left_out=True))
    state = collect(parse_objects(objects, {})[0])
    return ClusterState(**{**_fields(state), "problems": tuple(problems) + state.problems})


def read_cluster(
    client: KubeClient, namespace: str = "", config_maps: Iterable[tuple[str, str]] = (), config_map_namespaces: Iterable[str] = ()
) -> tuple[ClusterState, list[str]]:
    """
    One list of every watched kind (as L{ingress.sources.kube.source.KubeSource} watches them), and the
    optional kinds that were refused (404: not installed, 403: not allowed), each as a line for the report.
    Any other failure raises L{SourceError}.
    """
    spaces = tuple(dict.fromkeys(config_map_namespaces))
    watched = [(resource, namespace) for resource in RESOURCES]
    watched += [(config_map_resource(name), space) for space, name in dict.fromkeys(config_maps) if space not in spaces]
    watched += [(Resource("ConfigMap", "v1", "configmaps"), space) for space in spaces]
    outcomes: list[Any] = []
    refused: list[str] = []
    for resource, where in watched:
        try:
            outcomes.extend(_list(client, resource, where))
        except APIError as error:
            if resource.kind in OPTIONAL_KINDS and error.status in (403, 404):
                refused.append(f"{resource.kind} ({resource.path(where)}): {error.status} {error}")
                continue
            raise SourceError(f"listing {resource.path(where)}: {error.status} {error}") from None
        except OSError as error:
            raise SourceError(f"{client.server}: {error}") from None
        except Exception as error:  # urllib3's MaxRetryError and friends: the apiserver is not reachable
            raise SourceError(f"{client.server}: cannot list {resource.path(where)}: {_one_line(error)}") from None
    return collect(outcomes), refused


def _list(client: KubeClient, resource: Resource, namespace: str) -> list[Any]:
    """Every page of one list, each item parsed as an informer parses it (with the L{Kind} it is for)."""
    query: dict[str, Any] = {"limit": LIST_PAGE, **resource.selectors()}
    handler = KINDS[(resource.api_version, resource.kind)]
    found: list[Any] = []
    while True:
        page = client.request("GET", resource.path(namespace), query, timeout=(5.0, 60.0))
        for obj in page.get("items") or ():
            obj.setdefault("apiVersion", resource.api_version)
            obj.setdefault("kind", resource.kind)
            value = parse_item(obj)
            if value is not None:
                found.append((handler, value))
        meta = page.get("metadata") or {}
        if not meta.get("continue"):
            return found
        query["continue"] = meta["continue"]


def _fields(state: ClusterState) -> dict[str, Any]:
    return {name: getattr(state, name) for name in state.__dataclass_fields__ if name not in ("problems", "changes")}


def _one_line(error: Exception) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= 300 else text[:297] + "..."
