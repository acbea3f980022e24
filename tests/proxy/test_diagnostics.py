"""
What twistd says about the objects it does not serve as written (issue "The first hour", point 8):
/debug/routes names the Ingresses skipped for their class, and the log says "skipped" only of an
object left out whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from tests.support import ROOT, Manifests, Twingress, http_status
from tests.waiting import eventually

MIGRATION = ROOT / "examples" / "nginx-migration"
CLAIMED = "IngressClass nginx is claimed by controller k8s.io/ingress-nginx; twingress is twingress.io/ingress-controller (--controller-name)"


def _nginx_class() -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx"}}


def _of_class(ingress: dict, name: str) -> dict:
    ingress["spec"]["ingressClassName"] = name
    return ingress


def test_skipped_ingresses_are_named_by_reason(manifests: Manifests, twingress: Callable[..., Twingress]) -> None:
    """
    docs/migration.md: C{skippedIngresses} has a count and each reason with its Ingresses
    ("namespace/name", sorted), at most 100 named per reason and the rest counted.
    """
    chart = [_of_class(Manifests.ingress(f"app-{n:03}", f"app{n}.test", "web", namespace="shop"), "nginx") for n in range(101)]
    manifests.write("chart.yaml", _nginx_class(), *chart, _of_class(Manifests.ingress("typo", "typo.test", "web"), "twingres"))
    manifests.write("ours.yaml", Manifests.ingress("ours", "ours.test", "web"))
    process = twingress()
    skipped = process.routes()["skippedIngresses"]
    assert skipped["count"] == 102
    by_reason = {entry["reason"]: entry for entry in skipped["reasons"]}
    assert by_reason["ClassOfAnotherController"] == {
        "reason": "ClassOfAnotherController", "message": CLAIMED, "ingresses": 101,
        "names": [f"shop/app-{n:03}" for n in range(100)], "namesLeftOut": 1,
    }
    assert by_reason["ClassNotFound"]["names"] == ["default/typo"] and "namesLeftOut" not in by_reason["ClassNotFound"]
    assert by_reason["ClassNotFound"]["ingresses"] == 1


def _warnings(process: Twingress, *objects: str, timeout: float = 10.0) -> dict[str, str]:
    """The first warning line naming each of C{objects}, once all are logged."""

    def found() -> dict[str, str]:
        lines = [line for line in process.log().splitlines() if "#warn]" in line]
        return {name: next((line for line in lines if f"{name}:" in line), "") for name in objects}

    every: dict[str, str] = eventually(lambda: all((now := found()).values()) and now, f"a warning naming each of {objects}", timeout=timeout)
    return every


def test_the_log_says_skipped_only_of_what_is_left_out(tmp_path: Path) -> None:
    """
    examples/nginx-migration (its ConfigMap and Ingresses as `make run-migration` serves them) with
    one Ingress more that does not parse: the ConfigMap and Ingress/api/admin are served with what
    twingress cannot honour reported ("the rest of it applies", "it is ignored"), and only the new
    unparsable Ingress is "skipped".
    """
    directory = tmp_path / "migration"
    directory.mkdir()
    for source in MIGRATION.glob("*.yaml"):
        (directory / source.name).write_text(source.read_text())
    broken = Manifests(directory)
    broken.write("broken.yaml", Manifests.ingress("broken", "broken.test", "web", path_type="Sideways"))
    process = Twingress(directory, "--nginx-configmap", "ingress-nginx/ingress-nginx-controller")
    try:
        found = _warnings(process, "ConfigMap/ingress-nginx/ingress-nginx-controller", "Ingress/api/admin", "Ingress/default/broken")
        configmap, admin, left_out = found.values()
        assert re.search(r"\] ConfigMap/ingress-nginx/ingress-nginx-controller: UnsupportedConfigKey: .* \(the rest of it applies\)$", configmap), configmap
        assert re.search(r"\] Ingress/api/admin: (UnsupportedAnnotation|InvalidClientAuth): ", admin), admin
        assert "skipped" not in configmap and "skipped" not in admin
        assert "] skipped Ingress/default/broken: " in left_out, left_out
        assert http_status(process.http_port, "api.example.com") != 404  # served (its backends are not running here: 502/503)
        assert http_status(process.http_port, "broken.test") == 404  # left out
        unsupported = [line for line in process.log().splitlines() if "Ingress/api/admin: UnsupportedAnnotation" in line]
        assert unsupported and all(line.endswith("it is ignored") for line in unsupported), unsupported
    finally:
        process.stop()
