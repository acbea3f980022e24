"""
What a request means must not depend on how it is spelled (issue "Trust at the edge").

Real sockets against twistd: one world where C{/admin} goes to backend A and
C{/} to backend B, so a spelling that reaches B where it means C{/admin} is a
bypass.  Paths are matched in nginx's normalised form (decode once, resolve dot
segments, merge slashes: nginx docs, "location" directive: "matching is performed
against a normalized URI"), the upstream gets the target as sent (nginx's
C{proxy_pass} without a URI), absolute-form targets route and forward by their own
authority (RFC 9112 3.2.2), and the PROXY protocol's client address is the client.
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
from collections.abc import Iterator

import pytest

from tests.proxy.clients import RawClient, ScriptedBackend, read_request_head
from tests.support import EchoBackend, Manifests, Twingress, free_port
from tests.waiting import eventually

HOST = "m.test"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    admin, root = EchoBackend("pod-admin", "127.0.0.1"), EchoBackend("pod-root", "127.0.0.2")
    stalled: list[bytes] = []
    sink = ScriptedBackend(lambda sock, backend: _read_until_closed(sock, stalled))
    path = tmp_path_factory.mktemp("meaning")
    manifests = Manifests(path)
    manifests.write(
        "all.yaml",
        *manifests.service("admin", [admin.address]),
        *manifests.service("root", [root.address]),
        *manifests.service("sink", [sink.address]),
        Manifests.ingress("admin", HOST, "admin", path="/admin"),
        Manifests.ingress("root", HOST, "root", path="/"),
        Manifests.ingress("sink", "sink.test", "sink", path="/"),
    )
    https_port, proxied_port, proxied_tls_port = free_port(), free_port(), free_port()
    access_log = path.parent / "access.log"
    proxy = Twingress(
        path,
        "--https", f"tcp:{https_port}:interface=127.0.0.1",
        "--client-body-timeout", "1",
        "--access-log", str(access_log),
    )
    proxied = Twingress(
        path,
        "--http", f"haproxy:tcp:{proxied_port}:interface=127.0.0.1",
        "--https", f"haproxy:tcp:{proxied_tls_port}:interface=127.0.0.1",
        "--access-log", str(access_log.with_name("proxied-access.log")),
    )
    yield {
        "proxy": proxy, "https_port": https_port, "proxied_port": proxied_port, "proxied_tls_port": proxied_tls_port,
        "proxied_log": access_log.with_name("proxied-access.log"), "stalled": stalled,
    }
    for process in (proxy, proxied):
        process.stop()
    for backend in (admin, root, sink):
        backend.stop()


def _read_until_closed(sock: socket.socket, record: list[bytes]) -> None:
    """A backend that takes a request and waits for its body; it records that the connection ended."""
    read_request_head(sock)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass  # aborted: as closed as it gets
    record.append(b"closed")


def _get(port: int, target: str, host: str = HOST) -> tuple[int, dict]:
    with RawClient(port) as client:
        response = client.exchange("GET", target, host=host)
        return response.status, (response.json() if response.status == 200 else {})


# -- paths: normalised for matching ---------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "/admin",
        "/x/../admin",  # dot segments (RFC 3986 5.2.4)
        "/./admin",
        "/%61dmin",  # an encoded unreserved character
        "/%61%64%6D%69%6E",  # every one, mixed case
        "//admin",  # merged slashes
        "///admin//users",
        "/x/%2e%2e/admin",  # an encoded dot segment is a dot segment
        "/x/%2E%2E/admin",
        "/x/..%2Fadmin",  # %2F decodes to "/" for matching, as nginx does
        "/%2Fadmin",
        "/admin/./",
        "/admin/users/..",
    ],
)
def test_every_spelling_of_admin_reaches_admin(world: dict, target: str) -> None:
    status, echoed = _get(world["proxy"].http_port, target)
    assert (status, echoed.get("name")) == (200, "pod-admin"), target


@pytest.mark.parametrize("target", ["/", "/adminx", "/x/admin", "/%2561dmin", "/ad%20min"])
def test_other_paths_stay_on_root(world: dict, target: str) -> None:
    # "%2561dmin" is decoded once (nginx too): the literal text "%61dmin", not "admin".
    status, echoed = _get(world["proxy"].http_port, target)
    assert (status, echoed.get("name")) == (200, "pod-root"), target


def test_the_upstream_receives_the_target_as_sent(world: dict) -> None:
    """nginx's proxy_pass without a URI: the upstream sees its own spelling (GitLab needs %2F kept)."""
    status, echoed = _get(world["proxy"].http_port, "/x/../admin/a%2Fb?q=%2e")
    assert (status, echoed["name"], echoed["uri"]) == (200, "pod-admin", "/x/../admin/a%2Fb?q=%2e")


@pytest.mark.parametrize(
    "target",
    ["/..", "/../admin", "/a/../../admin", "/%2e%2e/admin", "/%2E%2e", "/x/..%2F..%2Fadmin"],
)
def test_a_path_above_the_root_is_refused(world: dict, target: str) -> None:
    with RawClient(world["proxy"].http_port) as client:
        response = client.exchange("GET", target, host=HOST)
        assert response.status == 400, target
        assert client.closed_by_peer()


@pytest.mark.parametrize("target", ["/%zz", "/%4", "/admin%", "/%00admin", "/a%2"])
def test_a_badly_encoded_path_is_refused(world: dict, target: str) -> None:
    with RawClient(world["proxy"].http_port) as client:
        assert client.exchange("GET", target, host=HOST).status == 400, target
        assert client.closed_by_peer()


@pytest.mark.parametrize(("target", "uri"), [("/admin#frag", "/admin"), ("/admin?x=1#f?g", "/admin?x=1")])
def test_a_fragment_never_reaches_the_upstream(world: dict, target: str, uri: str) -> None:
    status, echoed = _get(world["proxy"].http_port, target)
    assert (status, echoed["name"], echoed["uri"]) == (200, "pod-admin", uri)


# -- absolute-form targets --------------------------------------------------------------------


@pytest.mark.parametrize("authority", [HOST, f"{HOST}:8080", "M.TEST"])
def test_an_absolute_target_routes_and_forwards_by_its_authority(world: dict, authority: str) -> None:
    status, echoed = _get(world["proxy"].http_port, f"http://{authority}/admin?q=1", host="other.test")
    assert (status, echoed["name"]) == (200, "pod-admin")
    assert echoed["host"] == authority  # the Host field sent upstream is the target's authority
    assert echoed["uri"] == "/admin?q=1"  # in origin-form


def test_an_absolute_target_for_another_host_is_not_routed_by_the_host_field(world: dict) -> None:
    assert _get(world["proxy"].http_port, "http://other.test/admin", host=HOST)[0] == 404


def test_an_absolute_target_without_a_path_is_the_root(world: dict) -> None:
    status, echoed = _get(world["proxy"].http_port, f"http://{HOST}?a=b", host="x.test")
    assert (status, echoed["name"], echoed["uri"]) == (200, "pod-root", "/?a=b")


@pytest.mark.parametrize("target", ["http:///admin", f"http://user@{HOST}/admin", "admin", "ftp://m.test/x", "*"])
def test_targets_of_no_valid_form_are_refused(world: dict, target: str) -> None:
    with RawClient(world["proxy"].http_port) as client:
        assert client.exchange("GET", target, host=HOST).status == 400, target


# -- PROXY protocol listeners -------------------------------------------------------------------


def _v1(client_ip: str, client_port: int = 40000) -> bytes:
    return b"PROXY TCP4 %s 127.0.0.1 %d 80\r\n" % (client_ip.encode(), client_port)


def _v2(client_ip: str, client_port: int = 40000) -> bytes:
    """A v2 header built from the spec (haproxy's proxy-protocol.txt 2.2), not by the code under test."""
    addresses = socket.inet_aton(client_ip) + socket.inet_aton("127.0.0.1") + struct.pack("!HH", client_port, 80)
    return b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack("!H", len(addresses)) + addresses


@pytest.mark.parametrize(("version", "client_ip"), [(_v1, "203.0.113.7"), (_v2, "198.51.100.9")])
def test_the_proxy_protocol_address_is_the_client_for_every_request(world: dict, version, client_ip: str) -> None:
    with RawClient(world["proxied_port"]) as client:
        client.send(version(client_ip))
        for _ in range(2):  # every request of the connection, not only the first
            response = client.exchange("GET", "/admin", host=HOST)
            headers = response.json()["headers"]
            assert headers["X-Forwarded-For"] == [client_ip]
            assert headers["X-Real-Ip"] == [client_ip]
    eventually(lambda: world["proxied_log"].read_text().count(f"{client_ip} - - [") >= 2, "two access-log lines")


@pytest.mark.parametrize(("version", "client_ip"), [(_v1, "203.0.113.8"), (_v2, "198.51.100.10")])
def test_the_proxy_protocol_address_is_the_client_on_the_tls_listener(world: dict, version, client_ip: str) -> None:
    raw = socket.create_connection(("127.0.0.1", world["proxied_tls_port"]), timeout=5)
    raw.sendall(version(client_ip))
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with context.wrap_socket(raw, server_hostname=HOST) as tls:
        tls.sendall(b"GET /admin HTTP/1.1\r\nHost: m.test\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert json.loads(body)["headers"]["X-Forwarded-For"] == [client_ip]


def test_a_connection_without_a_proxy_header_is_closed(world: dict) -> None:
    with RawClient(world["proxied_port"]) as client:
        client.send(b"GET /admin HTTP/1.1\r\nHost: m.test\r\n\r\n")
        assert client.read_to_close() == b""


# -- a client that stalls its body ----------------------------------------------------------------


def test_a_stalled_request_body_gets_408_and_the_upstream_connection_is_dropped(world: dict) -> None:
    with RawClient(world["proxy"].http_port) as client:
        client.send(b"POST /upload HTTP/1.1\r\nHost: sink.test\r\nContent-Length: 10\r\n\r\nabc")
        response = client.read_response()
        assert response.status == 408  # the client's fault (client body timeout), not a 504
        assert client.closed_by_peer()
    eventually(lambda: world["stalled"] == [b"closed"], "the upstream connection closed, not pooled")
    metrics = world["proxy"].admin("/metrics")[1].decode()
    assert 'twingress_upstream_failures_total{reason="timeout"}' not in metrics


# -- plain HTTP on the TLS port ---------------------------------------------------------------------


def test_plain_http_to_the_tls_port_gets_a_400_in_clear_text(world: dict) -> None:
    with RawClient(world["https_port"]) as client:
        client.send(b"GET / HTTP/1.1\r\nHost: m.test\r\n\r\n")
        response = client.read_response()
        assert response.status == 400
        assert b"plain HTTP request was sent to the HTTPS port" in response.body
        assert client.closed_by_peer()


# -- the upstream's Server header ---------------------------------------------------------------------


def test_the_upstreams_server_header_is_replaced_by_ours(world: dict) -> None:
    """nginx's default (proxy_hide_header Server): the echo backend (Twisted Web) names itself; clients see us."""
    with RawClient(world["proxy"].http_port) as client:
        response = client.exchange("GET", "/", host=HOST)
        assert response.headers("Server") == ["twingress"]

