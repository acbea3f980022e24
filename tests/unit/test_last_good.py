"""
Tests for L{ingress.model.parse.parse_objects}: an invalid new version of an
object keeps its last good version in use (what the apiserver does with an
invalid update), with the problem reported; a new invalid object is only a problem.
"""

from __future__ import annotations

from typing import Any

from ingress.model import Ingress, Service
from ingress.model.parse import collect, parse_objects


def _ingress(path_type: str, path: str = "/") -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"rules": [{"host": "a.test", "http": {"paths": [
            {"path": path, "pathType": path_type, "backend": {"service": {"name": "s", "port": {"number": 80}}}}
        ]}}]},
    }


def _service(port: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "default"}, "spec": {"ports": [{"port": port}]}}


def test_an_invalid_edit_keeps_the_last_good_version_and_says_so() -> None:
    _, good = parse_objects([_ingress("Prefix", "/v1")], {})
    outcomes, good = parse_objects([_ingress("Bogus", "/v2")], good)
    state = collect(outcomes)
    [kept] = state.ingresses
    assert isinstance(kept, Ingress) and kept.rules[0].paths[0].path == "/v1"
    [problem] = state.problems
    assert problem.ref.name == "web" and "last good version stays in use" in problem.message
    # and it stays kept across more invalid versions, until a valid one replaces it
    outcomes, good = parse_objects([_ingress("Bogus", "/v3")], good)
    assert collect(outcomes).ingresses[0].rules[0].paths[0].path == "/v1"
    outcomes, good = parse_objects([_ingress("Exact", "/v4")], good)
    state = collect(outcomes)
    assert state.ingresses[0].rules[0].paths[0].path == "/v4" and state.problems == ()


def test_a_new_invalid_object_is_only_a_problem() -> None:
    outcomes, good = parse_objects([_ingress("Bogus")], {})
    state = collect(outcomes)
    assert state.ingresses == () and len(state.problems) == 1 and "last good" not in state.problems[0].message
    assert good == {}


def test_a_deleted_object_is_forgotten() -> None:
    _, good = parse_objects([_service(80)], {})
    _, good = parse_objects([], good)
    outcomes, _ = parse_objects([_service("eighty")], good)  # re-created invalid: nothing to keep
    assert collect(outcomes).services == {}


def test_services_keep_their_last_good_version_too() -> None:
    _, good = parse_objects([_service(80)], {})
    outcomes, _ = parse_objects([_service("eighty")], good)
    state = collect(outcomes)
    service = state.services[("default", "s")]
    assert isinstance(service, Service) and service.ports[0].port == 80
    assert len(state.problems) == 1
