"""
Configuration that fails safe and says so (issue "Trust at the edge"), through twistd on a
manifests directory: an invalid edit keeps the last good version serving; unknown or unreadable
annotations are reported; /debug/routes shows what really happens (a certificate that does not
cover its host, a stream port that did not bind); each warning is logged once per change.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.proxy.certs import CertificateAuthority, tls_secret
from tests.proxy.clients import RawClient
from tests.proxy.streams_support import stream_ingress
from tests.support import EchoBackend, Manifests, Twingress, free_port
from tests.waiting import eventually


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoBackend]:
    backend = EchoBackend("pod-c")
    yield backend
    backend.stop()


def _status(proxy: Twingress, host: str, target: str = "/") -> int:
    with RawClient(proxy.http_port) as client:
        return client.exchange("GET", target, host=host).status


def _problems(proxy: Twingress) -> list[tuple[str, str]]:
    return [(p["object"], p["reason"]) for p in proxy.routes()["problems"]]


def test_an_invalid_edit_keeps_the_last_good_version_serving(manifests: Manifests, twingress, echo: EchoBackend) -> None:
    manifests.write("svc.yaml", *manifests.service("web", [echo.address]))
    manifests.write("web.yaml", Manifests.ingress("web", "keep.test", "web", path="/v1"))
    proxy = twingress()
    assert _status(proxy, "keep.test", "/v1") == 200
    broken = Manifests.ingress("web", "keep.test", "web", path="/v2", path_type="Sideways")  # the apiserver would refuse it
    generation = proxy.generation()
    manifests.write("web.yaml", broken, Manifests.ingress("new-bad", "new.test", "web", path_type="Sideways"))
    proxy.wait_generation_above(generation)
    assert _status(proxy, "keep.test", "/v1") == 200  # the last good version still serves
    assert _status(proxy, "keep.test", "/v2") == 404
    problems = {p["object"]: p["message"] for p in proxy.routes()["problems"]}
    assert "last good version stays in use" in problems["Ingress/default/web"]
    assert "last good version" not in problems["Ingress/default/new-bad"]  # new and invalid: only skipped
    assert _status(proxy, "new.test") == 404


def test_unknown_annotations_and_unreadable_values_are_reported_once(manifests: Manifests, twingress, echo: EchoBackend) -> None:
    manifests.write("svc.yaml", *manifests.service("web", [echo.address]))
    typo = Manifests.ingress("typo", "typo.test", "web")
    typo["metadata"]["annotations"] = {"twingress.io/ssl-redirekt": "false"}
    unreadable = Manifests.ingress("unreadable", "unreadable.test", "web")
    unreadable["metadata"]["annotations"] = {"twingress.io/hsts-max-age": "forever"}
    manifests.write("typo.yaml", typo, unreadable)
    proxy = twingress()
    assert _status(proxy, "typo.test") == 200  # an unknown key: served as without it
    assert _status(proxy, "unreadable.test") == 404  # an unreadable value: never a silent default, its paths are left out
    assert sorted(_problems(proxy)) == [("Ingress/default/typo", "UnknownAnnotation"), ("Ingress/default/unreadable", "InvalidAnnotation")]
    metrics = proxy.admin("/metrics")[1].decode()
    assert 'twingress_object_problems{reason="UnknownAnnotation"} 1.0' in metrics
    assert 'twingress_object_problems{reason="InvalidAnnotation"} 1.0' in metrics
    for index in range(3):  # unrelated changes rebuild the table: no new warning lines
        generation = proxy.generation()
        manifests.write(f"other-{index}.yaml", Manifests.ingress(f"other-{index}", f"o{index}.test", "web"))
        proxy.wait_generation_above(generation)
    assert proxy.log().count("ssl-redirekt") == 1


def test_a_certificate_that_does_not_cover_its_host_is_not_shown_as_its_certificate(manifests: Manifests, twingress, echo: EchoBackend) -> None:
    ca = CertificateAuthority("config-test-ca")
    manifests.write("svc.yaml", *manifests.service("web", [echo.address]))
    manifests.write(
        "tls.yaml",
        tls_secret("good-tls", ca.issue(["good.test"])),
        tls_secret("wrong-tls", ca.issue(["elsewhere.test"])),
        Manifests.ingress("good", "good.test", "web", tls=[{"hosts": ["good.test"], "secretName": "good-tls"}]),
        Manifests.ingress("wrong", "wrong.test", "web", tls=[{"hosts": ["wrong.test"], "secretName": "wrong-tls"}]),
    )
    proxy = twingress("--https", f"tcp:{free_port()}:interface=127.0.0.1")
    eventually(lambda: "good.test" in proxy.routes()["certificates"], "the certificates")
    routes = proxy.routes()
    assert routes["certificates"] == {"good.test": "default/good-tls"}  # not wrong.test: it gets the default
    assert ("Secret/default/wrong-tls", "CertificateNotCovering") in _problems(proxy)
    for index in range(2):
        generation = proxy.generation()
        manifests.write(f"other-{index}.yaml", Manifests.ingress(f"other-{index}", f"o{index}.test", "web"))
        proxy.wait_generation_above(generation)
    assert proxy.log().count("does not cover wrong.test") == 1


def test_a_stream_port_that_did_not_bind_is_not_shown_as_listening(manifests: Manifests, twingress) -> None:
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        free = free_port()
        manifests.write("db.yaml", *manifests.service("db", [("10.1.0.1", 5432)]))
        manifests.write("streams.yaml", stream_ingress("taken", taken), stream_ingress("free", free))
        proxy = twingress()
        routes = proxy.routes()
        assert routes["streams"][f"TCP/{free}"]["listening"] is True
        assert routes["streams"][f"TCP/{taken}"]["listening"] is False
        assert ("StreamIngress/default/taken", "PortUnavailable") in _problems(proxy)
        accepted = [c for c in routes["streamConditions"]["default/taken"] if c["type"] == "Accepted"]
        assert [(c["status"], c["reason"]) for c in accepted] == [("False", "PortUnavailable")]
