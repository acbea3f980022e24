"""
Gateway API HTTPRoutes through twistd in manifests mode: real sockets, real clients (http.client, curl).

Each test names the Gateway API conformance test (sigs.k8s.io/gateway-api/conformance v1.7.0,
tests/*.go ShortName) or the field documentation (apis/v1/httproute_types.go) whose behaviour
it checks.  The listeners' ports are twingress's own: the Gateway is written once twingress
listens, with the ports it was given, and the test waits for the table that serves it.
"""

from __future__ import annotations

import collections
import http.client
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

from tests.proxy.certs import CertificateAuthority, tls_secret
from tests.proxy.clients import ScriptedBackend, read_request_head
from tests.support import EchoBackend, Manifests, Twingress, free_port, wait_for_port

GW = "gateway.networking.k8s.io/v1"


@dataclass
class GatewayProxy:
    process: Twingress
    https_port: int
    cafile: Path
    echoes: dict[str, EchoBackend]
    stalling: ScriptedBackend


def _route(name: str, rules: list[dict[str, Any]], hostnames: Optional[list[str]] = None, parents: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"parentRefs": parents or [{"name": "gw", "sectionName": "http"}], "rules": rules}
    if hostnames:
        spec["hostnames"] = hostnames
    return {"apiVersion": GW, "kind": "HTTPRoute", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def _to(*services: str, weights: tuple[int, ...] = (), **rule: Any) -> dict[str, Any]:
    refs = [{"name": s, "port": 80, **({"weight": weights[i]} if weights else {})} for i, s in enumerate(services)]
    return {"backendRefs": refs, **rule}


def _path(kind: str, value: str) -> list[dict[str, Any]]:
    return [{"path": {"type": kind, "value": value}}]


def _stall_after_some_body(sock: socket.socket, backend: ScriptedBackend) -> None:
    """A response head and 100 of its 1,000 bytes, then nothing for 15 s."""
    backend.record(read_request_head(sock))
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"y" * 100)
    time.sleep(15)  # not a wait: the stalling backend is silent past the route's timeout


@pytest.fixture(scope="module")
def gateway_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProxy]:
    echoes = {name: EchoBackend(f"pod-{name}") for name in ("v1", "v2", "v3")}
    manifests = Manifests(tmp_path_factory.mktemp("gateway"))
    stalling = ScriptedBackend(_stall_after_some_body)
    manifests.write("services.yaml", *(obj for name, echo in echoes.items() for obj in manifests.service(name, [echo.address])),
                    *manifests.service("stalling", [stalling.address]))
    root = CertificateAuthority("gateway test root")
    cafile = root.write(tmp_path_factory.mktemp("gateway-pki") / "root.pem")
    https_port = free_port()
    process = Twingress(manifests.path, "--https", f"tcp:{https_port}:interface=127.0.0.1")
    wait_for_port("127.0.0.1", https_port, process.process)
    generation = process.generation()
    gateway = {
        "apiVersion": GW, "kind": "Gateway", "metadata": {"name": "gw", "namespace": "default"},
        "spec": {"gatewayClassName": "twingress", "listeners": [
            {"name": "http", "port": process.http_port, "protocol": "HTTP"},
            {"name": "https", "port": https_port, "protocol": "HTTPS", "hostname": "secure.gw.test", "tls": {"certificateRefs": [{"name": "secure-tls"}]}},
            {"name": "elsewhere", "port": process.admin_port, "protocol": "HTTP"},
        ]},
    }
    header_modifier = {"set": [{"name": "X-Header-Set", "value": "set-overwrites-values"}], "add": [{"name": "X-Header-Add", "value": "header-add"}],
                       "remove": ["X-Header-Remove"]}
    manifests.write(
        "gateway.yaml",
        {"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": "twingress"}, "spec": {"controllerName": "twingress.io/gateway-controller"}},
        gateway,
        tls_secret("secure-tls", root.issue(["secure.gw.test"], "ec")),
        _route("matching", [
            _to("v1", matches=[{"path": {"type": "PathPrefix", "value": "/"}}]),
            _to("v2", matches=[{"path": {"type": "PathPrefix", "value": "/v2"}}, {"headers": [{"name": "version", "value": "two"}]}]),
            _to("v3", matches=[{"path": {"type": "Exact", "value": "/exact"}, "method": "POST"}]),
        ], hostnames=["match.gw.test"]),
        _route("headers", [_to("v1", filters=[
            {"type": "RequestHeaderModifier", "requestHeaderModifier": header_modifier},
            {"type": "ResponseHeaderModifier", "responseHeaderModifier": {"set": [{"name": "X-Answer", "value": "gateway"}], "remove": ["X-Backend"]}},
        ])], hostnames=["headers.gw.test"]),
        _route("redirect", [{"filters": [{"type": "RequestRedirect", "requestRedirect": {"hostname": "example.org", "statusCode": 301}}]}], hostnames=["redirect.gw.test"]),
        _route("rewrite", [_to("v1", matches=[{"path": {"type": "PathPrefix", "value": "/old"}}], filters=[
            {"type": "URLRewrite", "urlRewrite": {"hostname": "internal.example", "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/new"}}},
        ])], hostnames=["rewrite.gw.test"]),
        _route("weights", [_to("v1", "v2", "v3", weights=(70, 30, 0))], hostnames=["weights.gw.test"]),
        _route("broken", [_to("missing", matches=[{"path": {"type": "PathPrefix", "value": "/missing"}}]), {"matches": [{"path": {"type": "PathPrefix", "value": "/none"}}]}],
               hostnames=["broken.gw.test"]),
        _route("wild", [_to("v2")], hostnames=["*.wild.gw.test"]),
        _route("secure", [_to("v3"), _to("v3", matches=_path("PathPrefix", "/slow"), timeouts={"request": "500ms"})],
               parents=[{"name": "gw", "sectionName": "https"}]),
        _route("regex", [
            _to("v1", matches=_path("PathPrefix", "/")),
            _to("v2", matches=_path("RegularExpression", "/items/[0-9]+")),
            _to("v3", matches=_path("PathPrefix", "/items")),
            _to("v3", matches=_path("RegularExpression", "/broken/(")),
        ], hostnames=["regex.gw.test"]),
        _route("timeouts", [
            _to("v1", matches=_path("PathPrefix", "/request-timeout"), timeouts={"request": "500ms"}),
            _to("v1", matches=_path("PathPrefix", "/disable-request-timeout"), timeouts={"request": "0s"}),
            _to("v1", matches=_path("PathPrefix", "/backend-timeout"), timeouts={"backendRequest": "500ms"}),
            _to("v1", matches=_path("PathPrefix", "/disable-backend-timeout"), timeouts={"backendRequest": "0s"}),
            _to("stalling", matches=_path("PathPrefix", "/stalling"), timeouts={"request": "500ms"}),
        ], hostnames=["timeouts.gw.test"]),
    )
    process.wait_generation_above(generation)
    yield GatewayProxy(process, https_port, cafile, echoes, stalling)
    process.stop()
    for echo in echoes.values():
        echo.stop()
    stalling.stop()


def _request(proxy: GatewayProxy, host: str, target: str = "/", method: str = "GET", headers: Optional[dict[str, str]] = None) -> tuple[http.client.HTTPResponse, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.process.http_port, timeout=10)
    connection.request(method, target, headers={"Host": host, **(headers or {})})
    response = connection.getresponse()
    return response, response.read()


def _pod(proxy: GatewayProxy, host: str, target: str = "/", **kwargs: Any) -> str:
    """Which echo pod answered (or the status, when not 200)."""
    response, body = _request(proxy, host, target, **kwargs)
    if response.status != 200:
        return str(response.status)
    return str(json.loads(body)["name"])


def test_matches_in_the_spec_s_precedence(gateway_proxy: GatewayProxy) -> None:
    """HTTPRouteMatching (prefix and header matches ORed across rules) and HTTPRouteExactPathMatching, with a method."""
    assert _pod(gateway_proxy, "match.gw.test", "/anything") == "pod-v1"
    assert _pod(gateway_proxy, "match.gw.test", "/v2/example") == "pod-v2"
    assert _pod(gateway_proxy, "match.gw.test", "/v2example") == "pod-v1"
    assert _pod(gateway_proxy, "match.gw.test", "/", headers={"Version": "two"}) == "pod-v2"
    assert _pod(gateway_proxy, "match.gw.test", "/exact", method="POST") == "pod-v3"
    assert _pod(gateway_proxy, "match.gw.test", "/exact") == "pod-v1"
    assert _pod(gateway_proxy, "MATCH.gw.test:1234", "/v2") == "pod-v2"  # the Host's port is ignored
    assert _pod(gateway_proxy, "unknown.gw.test") == "404"


def test_request_and_response_header_modifiers(gateway_proxy: GatewayProxy) -> None:
    """HTTPRouteRequestHeaderModifier and HTTPRouteResponseHeaderModification."""
    response, body = _request(gateway_proxy, "headers.gw.test", headers={"X-Header-Set": "client", "x-header-add": "original-val-add", "x-header-remove": "gone"})
    assert response.status == 200
    seen = {name.lower(): values for name, values in json.loads(body)["headers"].items()}
    assert seen["x-header-set"] == ["set-overwrites-values"]
    assert seen["x-header-add"] == ["original-val-add", "header-add"]
    assert "x-header-remove" not in seen
    assert response.getheader("X-Answer") == "gateway" and response.getheader("X-Backend") is None


def test_redirect_hostname_and_status(gateway_proxy: GatewayProxy) -> None:
    """HTTPRouteRedirectHostAndStatus: the hostname replaced, the path and query kept, the status given."""
    response, _ = _request(gateway_proxy, "redirect.gw.test", "/some/path?q=1")
    assert response.status == 301
    assert response.getheader("Location") == f"http://example.org:{gateway_proxy.process.http_port}/some/path?q=1"


def test_url_rewrite_of_host_and_prefix(gateway_proxy: GatewayProxy) -> None:
    """HTTPRouteHostRewrite and HTTPRoutePathRewrite (ReplacePrefixMatch)."""
    response, body = _request(gateway_proxy, "rewrite.gw.test", "/old/page?x=1")
    assert response.status == 200
    seen = json.loads(body)
    assert seen["uri"] == "/new/page?x=1" and seen["host"] == "internal.example"


def test_weights_split_the_requests(gateway_proxy: GatewayProxy) -> None:
    """HTTPRouteWeight: 70/30/0 within 5% of 1,000 requests (the suite allows 5% of 500); weight 0 gets nothing."""
    connection = http.client.HTTPConnection("127.0.0.1", gateway_proxy.process.http_port, timeout=10)
    counts: collections.Counter[str] = collections.Counter()
    for _ in range(1000):
        connection.request("GET", "/", headers={"Host": "weights.gw.test"})
        response = connection.getresponse()
        counts[json.loads(response.read())["name"]] += 1
    assert abs(counts["pod-v1"] - 700) <= 50 and abs(counts["pod-v2"] - 300) <= 50
    assert counts["pod-v3"] == 0


def test_unusable_backends_answer_500(gateway_proxy: GatewayProxy) -> None:
    """HTTPRouteInvalidNonExistentBackendRef and HTTPRouteNoBackendRefs: 500, and the status says why."""
    assert _pod(gateway_proxy, "broken.gw.test", "/missing") == "500"
    assert _pod(gateway_proxy, "broken.gw.test", "/none") == "500"
    routes = gateway_proxy.process.routes()["gatewayAPI"]["httpRoutes"]
    (parent,) = routes["default/broken"]
    conditions = {c["type"]: (c["status"], c["reason"]) for c in parent["conditions"]}
    assert conditions == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("False", "BackendNotFound")}


def test_wildcard_hostnames_cover_any_number_of_labels(gateway_proxy: GatewayProxy) -> None:
    """HTTPRouteSpec.Hostnames: "*.wild.gw.test" matches a.wild.gw.test and a.b.wild.gw.test, not wild.gw.test."""
    assert _pod(gateway_proxy, "a.wild.gw.test") == "pod-v2"
    assert _pod(gateway_proxy, "a.b.wild.gw.test") == "pod-v2"
    assert _pod(gateway_proxy, "wild.gw.test") == "404"


def test_https_listener_serves_its_routes_with_its_certificate(gateway_proxy: GatewayProxy) -> None:
    """HTTPRouteHTTPSListener: the listener's certificate by SNI, its routes over HTTPS only."""
    port = gateway_proxy.https_port
    done = subprocess.run(
        ["curl", "-sS", "--max-time", "15", "--resolve", f"secure.gw.test:{port}:127.0.0.1", "--cacert", str(gateway_proxy.cafile), f"https://secure.gw.test:{port}/"],
        capture_output=True, timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["name"] == "pod-v3"
    assert _pod(gateway_proxy, "secure.gw.test") == "404"  # not attached to the HTTP listener


def test_status_in_debug_routes(gateway_proxy: GatewayProxy) -> None:
    """The listeners' conditions and attachedRoutes as the Lease holder would write them; a listener on twingress's admin port is refused."""
    status = gateway_proxy.process.routes()["gatewayAPI"]
    assert status["gatewayClasses"]["twingress"][0]["status"] == "True"
    listeners = {entry["name"]: entry for entry in status["gateways"]["default/gw"]["listeners"]}
    assert listeners["http"]["attachedRoutes"] == 9 and listeners["https"]["attachedRoutes"] == 1
    refused = {c["type"]: (c["status"], c["reason"]) for c in listeners["elsewhere"]["conditions"]}
    assert refused["Accepted"] == ("False", "PortUnavailable")
    gateway = {c["type"]: (c["status"], c["reason"]) for c in status["gateways"]["default/gw"]["conditions"]}
    assert gateway["Accepted"] == ("True", "ListenersNotValid")



def test_regular_expression_paths_in_their_precedence(gateway_proxy: GatewayProxy) -> None:
    """
    apis/v1/httproute_types.go PathMatchRegularExpression (implementation-specific): a full match of the
    path, before every prefix and after Exact paths; an invalid pattern is reported, its match not served.
    """
    assert _pod(gateway_proxy, "regex.gw.test", "/items/42") == "pod-v2"  # the pattern before the longer prefix
    assert _pod(gateway_proxy, "regex.gw.test", "/items/42?page=2") == "pod-v2"
    assert _pod(gateway_proxy, "regex.gw.test", "/items/42/reviews") == "pod-v3"  # not a full match: the prefix
    assert _pod(gateway_proxy, "regex.gw.test", "/items/abc") == "pod-v3"
    assert _pod(gateway_proxy, "regex.gw.test", "/%69tems/7") == "pod-v2"  # matched against the normalised path
    assert _pod(gateway_proxy, "regex.gw.test", "/broken/(") == "pod-v1"
    problems = [p for p in gateway_proxy.process.routes()["problems"] if p["object"].endswith("default/regex")]
    assert [p["reason"] for p in problems] == ["UnsupportedValue"] and "/broken/(" in problems[0]["message"]


def test_request_and_backend_request_timeouts(gateway_proxy: GatewayProxy) -> None:
    """
    HTTPRouteTimeoutRequest and HTTPRouteTimeoutBackendRequest (timeouts 500ms; "0s" disables): a backend
    answering after 1 s gets the client a 504, a fast one passes, and the connection serves on.
    """
    connection = http.client.HTTPConnection("127.0.0.1", gateway_proxy.process.http_port, timeout=10)

    def status(target: str) -> int:
        connection.request("GET", target, headers={"Host": "timeouts.gw.test"})
        response = connection.getresponse()
        response.read()
        return response.status

    for prefix in ("/request-timeout", "/backend-timeout"):
        assert status(prefix) == 200
        assert status(f"{prefix}?delay=1") == 504
        assert status(prefix) == 200  # the same connection serves on
    assert status("/disable-request-timeout?delay=1") == 200
    assert status("/disable-backend-timeout?delay=1") == 200
    assert status("/request-timeout?delay=0.1") == 200


def test_a_response_under_way_at_the_deadline_is_cut(gateway_proxy: GatewayProxy) -> None:
    """The backend began its response and stalls past the request timeout: the client sees it cut (reset), never complete."""
    connection = http.client.HTTPConnection("127.0.0.1", gateway_proxy.process.http_port, timeout=10)
    connection.request("GET", "/stalling", headers={"Host": "timeouts.gw.test"})
    response = connection.getresponse()
    assert response.status == 200 and response.getheader("Content-Length") == "1000"
    started = time.monotonic()
    with pytest.raises((http.client.IncompleteRead, ConnectionResetError)):
        response.read()
    assert time.monotonic() - started < 10  # cut by the 500 ms deadline, not by the backend's end 15 s later (a wide margin for a loaded CI)
    assert _pod(gateway_proxy, "timeouts.gw.test", "/request-timeout") == "pod-v1"


def test_a_request_timeout_over_http2(gateway_proxy: GatewayProxy) -> None:
    """The same deadline on an HTTP/2 stream: 504 on that stream, and the connection's next streams are served."""
    port = gateway_proxy.https_port
    base = f"https://secure.gw.test:{port}"
    done = subprocess.run(
        ["curl", "-sS", "--http2", "--max-time", "15", "--resolve", f"secure.gw.test:{port}:127.0.0.1", "--cacert", str(gateway_proxy.cafile),
         "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", "-w", "%{http_version} %{http_code} %{num_connects}\\n",
         f"{base}/slow?delay=1", f"{base}/slow", f"{base}/"],
        capture_output=True, timeout=30, text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["2 504 1", "2 200 0", "2 200 0"]
