"""Tests for L{ingress.routing.annotations}: unknown keys and unreadable values are reported, never ignored silently."""

from __future__ import annotations

import pytest

from ingress.model import CONTROLLER_NAME
from ingress.model.parse import state_from_objects
from ingress.routing import build
from ingress.routing.annotations import INVALID, UNKNOWN
from ingress.routing.build_options import BuildOptions

CLASS = {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "twingress"}, "spec": {"controller": CONTROLLER_NAME}}


def _table(annotations: dict[str, str]):
    ingress = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "web", "namespace": "default", "annotations": annotations},
        "spec": {"ingressClassName": "twingress", "rules": [{"host": "a.test", "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "s", "port": {"number": 80}}}}
        ]}}]},
    }
    return build(state_from_objects([CLASS, ingress]), BuildOptions(class_name="twingress", controller_name=CONTROLLER_NAME), generation=1)


def _reported(annotations: dict[str, str]) -> list[tuple[str, str]]:
    return [(p.reason, p.message) for p in _table(annotations).report.problems if p.reason in (UNKNOWN, INVALID)]


@pytest.mark.parametrize("key", ["twingress.io/ssl-redirekt", "twingress.io/hsts", "twingress.io/"])
def test_an_unknown_key_under_our_prefix_is_reported(key: str) -> None:
    [(reason, message)] = _reported({key: "true"})
    assert reason == UNKNOWN
    assert key in message and "twingress.io/ssl-redirect" in message  # names the known keys


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("twingress.io/hsts-max-age", "forever"),
        ("twingress.io/hsts-max-age", "-1"),
        ("twingress.io/ssl-redirect", "yes"),
        ("twingress.io/ssl-passthrough", "on"),
    ],
)
def test_an_unreadable_value_is_reported(key: str, value: str) -> None:
    [(reason, message)] = _reported({key: value})
    assert reason == INVALID
    assert key in message and repr(value) in message


@pytest.mark.parametrize(
    "annotations",
    [
        {"twingress.io/hsts-max-age": "600", "twingress.io/ssl-redirect": "false", "twingress.io/ssl-passthrough": "TRUE"},
        {"nginx.ingress.kubernetes.io/rewrite-target": "/", "example.com/owner": "team-a"},  # a valid nginx key, and a foreign one
        {},
    ],
)
def test_valid_and_foreign_annotations_are_not_problems(annotations: dict[str, str]) -> None:
    assert _reported(annotations) == []


def test_the_route_is_still_served_with_a_problem() -> None:
    table = _table({"twingress.io/ssl-redirekt": "false"})
    assert table.table.match("a.test", "/") is not None

