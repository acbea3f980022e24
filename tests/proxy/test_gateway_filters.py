"""
Gateway API extended HTTPRoute features through twistd in manifests mode, real sockets: the CORS
filter, a backendRef's own RequestHeaderModifier, and the rule's retry.

Each test names what it follows: the upstream conformance test (sigs.k8s.io/gateway-api/conformance
v1.6.3, tests/*.go), the API's field documentation (apis/v1/httproute_types.go) or the GEP.
"""

from __future__ import annotations

import collections
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.proxy.clients import ScriptedBackend, read_request_head
from tests.proxy.gateway_support import apply, gateway, route
from tests.support import EchoBackend, Manifests, Twingress


@dataclass
class Flaky:
    """A backend that answers C{code} to the first C{fail} requests of each C{uuid}, then 200 (echo-basic's retry simulation)."""

    seen: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, sock: socket.socket, backend: ScriptedBackend) -> None:
        head = read_request_head(sock)
        query = parse_qs(urlsplit(head.split(b" ", 2)[1].decode()).query)
        with self.lock:
            arrivals = self.seen[query["uuid"][0]]
            arrivals.append(time.monotonic())
            count = len(arrivals)
        status = int(query["code"][0]) if count <= int(query["fail"][0]) else 200
        sock.sendall(b"HTTP/1.1 %d Flaky\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" % status)


@dataclass
class FilterProxy:
    process: Twingress
    flaky: Flaky


def _rule(path: str, *refs: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"matches": [{"path": {"type": "PathPrefix", "value": path}}], "backendRefs": list(refs), **extra}


def _ref(service: str, **extra: Any) -> dict[str, Any]:
    return {"name": service, "port": 80, **extra}


def _set_header(name: str, value: str, **more: str) -> dict[str, Any]:
    """One RequestHeaderModifier (the CRD allows one per filter list) setting C{name} and C{more} (underscores as dashes)."""
    fields = [{"name": name, "value": value}] + [{"name": key.replace("_", "-"), "value": given} for key, given in more.items()]
    return {"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": fields}}


def _cors(**given: Any) -> dict[str, Any]:
    return {"type": "CORS", "cors": given}


@pytest.fixture(scope="module")
def filter_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FilterProxy]:
    echoes = {name: EchoBackend(f"pod-{name}") for name in ("v1", "v2")}
    flaky = Flaky()
    flaky_backend = ScriptedBackend(flaky.handle)
    manifests = Manifests(tmp_path_factory.mktemp("gateway-filters"))
    manifests.write("services.yaml", *(obj for name, echo in echoes.items() for obj in manifests.service(name, [echo.address])),
                    *manifests.service("flaky", [flaky_backend.address]))
    process = Twingress(manifests.path)
    parents = [{"name": "gw", "sectionName": "http"}]
    cors_rules = [
        _rule("/cors-1", _ref("v1"), filters=[_cors(allowOrigins=["https://www.foo.com", "https://*.bar.com"], allowMethods=["GET", "OPTIONS"],
                                                    allowHeaders=["x-header-1", "x-header-2"], exposeHeaders=["x-header-3"], allowCredentials=True, maxAge=3600)]),
        _rule("/cors-2", _ref("v1"), filters=[_cors(allowOrigins=["https://www.foo.com"], allowMethods=["*"])]),
        _rule("/cors-star", _ref("v1"), filters=[_cors(allowOrigins=["*"], allowMethods=["*"], allowHeaders=["*"], allowCredentials=True)]),
    ]
    backend_rules = [
        _rule("/split", _ref("v1", weight=10, filters=[_set_header("Backend", "pod-v1")]),
              _ref("v2", weight=10, filters=[_set_header("Backend", "pod-v2", X_Rule="backend")]), filters=[_set_header("X-Rule", "rule")]),
        _rule("/single", _ref("v1", filters=[_set_header("Backend", "pod-v1")])),
        _rule("/plain", _ref("v2")),
    ]
    retry_rules = [
        _rule("/code-500-attempts-3", _ref("flaky"), retry={"codes": [500], "attempts": 3}),
        _rule("/code-all-attempts-2", _ref("flaky"), retry={"codes": [500, 502, 503, 504], "attempts": 2}),
        _rule("/unset-attempts", _ref("flaky"), retry={"codes": [500]}),
        _rule("/no-retries", _ref("flaky"), retry={"codes": [500], "attempts": 0}),
        _rule("/backoff", _ref("flaky"), retry={"codes": [503], "attempts": 1, "backoff": "300ms"}),
        _rule("/without", _ref("flaky")),
    ]
    apply(
        manifests, process,
        gateway("gw", [{"name": "http", "port": process.http_port, "protocol": "HTTP"}]),
        route("cors", parents, cors_rules, hostnames=["cors.test"]),
        route("backends", parents, backend_rules, hostnames=["backends.test"]),
        route("retries", parents, retry_rules, hostnames=["retry.test"]),
    )
    yield FilterProxy(process, flaky)
    process.stop()
    for echo in echoes.values():
        echo.stop()
    flaky_backend.stop()


def _request(proxy: FilterProxy, host: str, target: str, method: str = "GET", headers: Optional[dict[str, str]] = None) -> tuple[http.client.HTTPResponse, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.process.http_port, timeout=10)
    connection.request(method, target, headers={"Host": host, **(headers or {})})
    response = connection.getresponse()
    return response, response.read()


# -- CORS (conformance tests/httproute-cors.go; GEP-1767; apis/v1 HTTPCORSFilter)


def test_cors_preflight_from_allowed_origins_is_answered_here(filter_proxy: FilterProxy) -> None:
    """HTTPRouteCORS: an exact origin and a wildcard one (any number of labels), with every field of the filter."""
    for origin in ("https://www.foo.com", "https://www.bar.com", "https://xpto.www.bar.com"):
        response, body = _request(filter_proxy, "cors.test", "/cors-1", "OPTIONS", {"Origin": origin, "Access-Control-Request-Method": "GET",
                                                                                     "Access-Control-Request-Headers": "x-header-1, x-header-2"})
        assert (response.status, body) == (204, b"")
        assert response.getheader("Access-Control-Allow-Origin") == origin
        assert response.getheader("Access-Control-Allow-Methods") == "GET, OPTIONS"
        assert response.getheader("Access-Control-Allow-Headers") == "x-header-1, x-header-2"
        assert response.getheader("Access-Control-Expose-Headers") == "x-header-3"
        assert response.getheader("Access-Control-Max-Age") == "3600"
        assert response.getheader("Access-Control-Allow-Credentials") == "true"


def test_cors_other_origins_get_no_cors_fields(filter_proxy: FilterProxy) -> None:
    """
    HTTPRouteCORS: a preflight from an origin not allowed is answered here (204) without the fields,
    the suite wants no echo of it (ingress-nginx passes it to the backend); a request passes without them.
    """
    response, body = _request(filter_proxy, "cors.test", "/cors-1", "OPTIONS", {"Origin": "https://foobar.com", "Access-Control-Request-Method": "GET"})
    assert (response.status, body) == (204, b"") and response.getheader("Access-Control-Allow-Origin") is None
    response, body = _request(filter_proxy, "cors.test", "/cors-1", headers={"Origin": "https://foobar.com"})
    assert response.status == 200 and json.loads(body)["name"] == "pod-v1"
    assert response.getheader("Access-Control-Allow-Origin") is None


def test_cors_simple_request_gets_the_origin_and_reaches_the_backend(filter_proxy: FilterProxy) -> None:
    response, body = _request(filter_proxy, "cors.test", "/cors-1", headers={"Origin": "https://www.bar.com"})
    assert response.status == 200 and json.loads(body)["name"] == "pod-v1"
    assert response.getheader("Access-Control-Allow-Origin") == "https://www.bar.com"


def test_cors_where_the_gep_differs_from_ingress_nginx(filter_proxy: FilterProxy) -> None:
    """
    GEP-1767, not ingress-nginx's cors annotations: a "*" origin with allowCredentials echoes the
    request's origin (ingress-nginx sends "*"); "*" methods and headers echo the preflight's
    Access-Control-Request-Method and -Headers; no maxAge means 5 seconds (ingress-nginx: 1728000);
    no allowCredentials means no Access-Control-Allow-Credentials field (ingress-nginx: true); an
    origin without a port matches the scheme's default port spelt out; an OPTIONS without
    Access-Control-Request-Method is not a preflight and reaches the backend.
    """
    asked = {"Origin": "https://other.foo.com", "Access-Control-Request-Method": "PUT", "Access-Control-Request-Headers": "x-header-1, x-header-2"}
    response, _ = _request(filter_proxy, "cors.test", "/cors-star", "OPTIONS", asked)
    assert response.status == 204
    assert response.getheader("Access-Control-Allow-Origin") == "https://other.foo.com"
    assert response.getheader("Access-Control-Allow-Methods") == "PUT"
    assert response.getheader("Access-Control-Allow-Headers") == "x-header-1, x-header-2"
    assert response.getheader("Access-Control-Allow-Credentials") == "true"
    response, _ = _request(filter_proxy, "cors.test", "/cors-2", "OPTIONS", {"Origin": "https://www.foo.com:443", "Access-Control-Request-Method": "POST"})
    assert response.status == 204 and response.getheader("Access-Control-Allow-Origin") == "https://www.foo.com:443"
    assert response.getheader("Access-Control-Allow-Methods") == "POST"
    assert response.getheader("Access-Control-Max-Age") == "5"
    assert response.getheader("Access-Control-Allow-Credentials") is None
    response, body = _request(filter_proxy, "cors.test", "/cors-2", "OPTIONS", {"Origin": "https://www.foo.com"})
    assert response.status == 200 and json.loads(body)["method"] == "OPTIONS"


# -- a backendRef's filters (conformance tests/httproute-request-header-modifier-backend-weights.go,
#    HTTPRouteBackendRequestHeaderModifier; apis/v1 HTTPBackendRef.Filters)


def test_each_backends_own_header_goes_to_that_backend_only(filter_proxy: FilterProxy) -> None:
    """Every request of a 50/50 split carries the Backend field of the backendRef it went to, set after the rule's own."""
    connection = http.client.HTTPConnection("127.0.0.1", filter_proxy.process.http_port, timeout=10)
    seen: collections.Counter[str] = collections.Counter()
    for _ in range(60):
        connection.request("GET", "/split", headers={"Host": "backends.test"})
        echoed = json.loads(connection.getresponse().read())
        headers = {name.lower(): values for name, values in echoed["headers"].items()}
        assert headers["backend"] == [echoed["name"]]
        assert headers["x-rule"] == (["backend"] if echoed["name"] == "pod-v2" else ["rule"])
        seen[echoed["name"]] += 1
    assert set(seen) == {"pod-v1", "pod-v2"}


def test_a_single_backends_filter_and_a_backend_without_one(filter_proxy: FilterProxy) -> None:
    """HTTPRouteBackendRequestHeaderModifier: one backendRef with a filter; another rule's requests do not get it."""
    _, body = _request(filter_proxy, "backends.test", "/single")
    assert json.loads(body)["headers"].get("Backend") == ["pod-v1"]
    _, body = _request(filter_proxy, "backends.test", "/plain", headers={"Backend": "client"})
    assert json.loads(body)["headers"].get("Backend") == ["client"]


# -- retry (GEP-1731; conformance tests/httproute-retry.go, HTTPRouteRetry)


def _retried(proxy: FilterProxy, path: str, code: int, fail: int, uuid: str) -> tuple[int, int]:
    """The status the client got and how many requests the backend saw, for a backend that fails C{fail} times."""
    response, _ = _request(proxy, "retry.test", f"{path}?uuid={uuid}&code={code}&fail={fail}")
    return response.status, len(proxy.flaky.seen[uuid])


@pytest.mark.parametrize(
    ("path", "code", "fail", "expected"),
    [
        ("/code-500-attempts-3", 500, 2, (200, 3)),  # succeeds after 2 retries
        ("/code-500-attempts-3", 500, 4, (500, 4)),  # attempts counts retries: 1 + 3 tries, then the last answer
        ("/code-500-attempts-3", 503, 2, (503, 1)),  # a code not listed is not retried
        ("/code-all-attempts-2", 502, 1, (200, 2)),
        ("/code-all-attempts-2", 504, 3, (504, 3)),
        ("/unset-attempts", 500, 5, (500, 2)),  # attempts unset: twingress retries once
        ("/no-retries", 500, 1, (500, 1)),
        ("/without", 500, 1, (500, 1)),  # no retry field: a status is the answer (the one endpoint is not tried again)
    ],
)
def test_retry_codes_and_attempts_on_the_one_endpoint(filter_proxy: FilterProxy, path: str, code: int, fail: int, expected: tuple[int, int]) -> None:
    """The suite's backend has one endpoint, so a Gateway retry goes back to it (nginx's proxy-next-upstream never would)."""
    assert _retried(filter_proxy, path, code, fail, f"{path}-{code}-{fail}") == expected


def test_retry_waits_at_least_the_backoff(filter_proxy: FilterProxy) -> None:
    """GEP-1731 backoff: "not retried before the configured minimum duration" (300ms here); a lower bound only."""
    assert _retried(filter_proxy, "/backoff", 503, 1, "backoff") == (200, 2)
    first, second = filter_proxy.flaky.seen["backoff"]
    assert second - first >= 0.3
