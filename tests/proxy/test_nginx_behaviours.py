"""
Behaviours ingress-nginx's docs promise, through twistd with real sockets and a real echo backend
(HTTP/1.1, and HTTP/2 over TLS where the request path is shared): X-Request-ID, X-Scheme,
x-forwarded-prefix on its own, satisfy any, custom-headers, the ConfigMap's custom-http-errors and
header values with nginx variables.  Each test names its ingress-nginx source.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
from passlib.hash import ldap_sha1

from tests.proxy.certs import CertificateAuthority
from tests.proxy.h2client import H2Client
from tests.proxy.test_external_auth import Service
from tests.support import EchoBackend, Manifests, Twingress, free_port
from tests.waiting import at_least

CONFIG = "default/ingress-nginx-controller"
HEX32 = re.compile(r"[0-9a-f]{32}")


def _config_map(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, "data": data}


def _secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": name, "namespace": "default"}, "stringData": data}


class Proxy:
    def __init__(self, twingress: Twingress, https_port: int, access_log: Path, service: Service, tls_service: Service) -> None:
        self.twingress, self.https_port, self.access_log, self.service = twingress, https_port, access_log, service
        self.tls_service = tls_service

    def get(
        self, host: str, path: str = "/", headers: Optional[dict[str, str]] = None, source: str = "127.0.0.1"
    ) -> tuple[int, dict[str, str], dict[str, Any], bytes]:
        """Status, response fields (lower-case names), the echo's view of the request (fields lower-case), raw body."""
        connection = http.client.HTTPConnection("127.0.0.1", self.twingress.http_port, timeout=10, source_address=(source, 0))
        connection.request("GET", path, headers={"Host": host, **(headers or {})})
        response = connection.getresponse()
        body = response.read()
        connection.close()
        fields = {name.lower(): value for name, value in response.getheaders()}
        return response.status, fields, _seen(body, fields), body

    def h2_get(self, host: str, path: str = "/", headers: tuple[tuple[str, str], ...] = ()) -> tuple[int, dict[bytes, bytes], dict[str, Any]]:
        client = H2Client(self.https_port)
        try:
            response = client.get(path, host, headers=headers)
        finally:
            client.close()
        status = int(response.headers[b":status"])
        fields = {k.decode(): v.decode() for k, v in response.headers.items()}
        return status, response.headers, _seen(bytes(response.body), fields)


def _seen(body: bytes, fields: dict[str, str]) -> dict[str, Any]:
    if not fields.get("content-type", "").startswith("application/json"):
        return {}
    seen: dict[str, Any] = json.loads(body)
    seen["headers"] = {name.lower(): values for name, values in seen["headers"].items()}
    return seen


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """One twistd with the ingress-nginx ConfigMap and an Ingress per behaviour."""
    echo = EchoBackend("pod-behaviours")
    service = Service()  # an auth service, and a mirror that keeps what it is sent
    manifests = Manifests(tmp_path_factory.mktemp("behaviours"))
    leaf = CertificateAuthority("mirror-ca").issue(["mirror.internal"])
    cert, key = manifests.path.parent / "mirror.crt", manifests.path.parent / "mirror.key"
    cert.write_bytes(leaf.fullchain_pem())
    key.write_bytes(leaf.key_pem())
    tls_service = Service((cert, key))
    access_log = manifests.path.parent / "access.log"
    htpasswd = f"ann:{ldap_sha1.hash('secret')}\n"
    basic = {"auth-type": "basic", "auth-secret": "basic-auth"}
    manifests.write(
        "all.yaml",
        *manifests.service("echo", [echo.address]),
        Manifests.ingress("plain", "plain.test", "echo"),
        Manifests.nginx_ingress("prefix", "prefix.test", "echo", {"x-forwarded-prefix": "/test/value"}),
        Manifests.nginx_ingress("noprefix", "noprefix.test", "echo", {"x-forwarded-prefix": "", "rewrite-target": "/foo"}),
        _secret("basic-auth", {"auth": htpasswd}),
        Manifests.nginx_ingress("any", "any.test", "echo", {**basic, "whitelist-source-range": "127.0.0.1/32", "satisfy": "any"}),
        Manifests.nginx_ingress("all", "all.test", "echo", {**basic, "whitelist-source-range": "127.0.0.1/32"}),
        Manifests.nginx_ingress(
            "anyext", "anyext.test", "echo",
            {**basic, "auth-url": service.url("/deny"), "auth-signin": "http://$host/auth/start", "satisfy": "any"},
        ),
        _config_map("custom-headers", {"My-Custom-Header": "42", "My-Custom-Header-Dollar": "$remote_addr"}),
        _config_map("other-headers", {"X-Not-Allowed": "1"}),
        Manifests.nginx_ingress("custom", "custom.test", "echo", {"custom-headers": "default/custom-headers"}),
        Manifests.nginx_ingress("nocustom", "nocustom.test", "echo", {"custom-headers": "default/nowhere"}),
        Manifests.nginx_ingress("disallowed", "disallowed.test", "echo", {"custom-headers": "other-headers"}),
        Manifests.nginx_ingress("nointercept", "nointercept.test", "echo", {"disable-proxy-intercept-errors": "true"}),
        Manifests.nginx_ingress("mirror", "mirror.test", "echo", {"mirror-target": f"http://127.0.0.1:{service.port}$request_uri"}),
        Manifests.nginx_ingress(
            "mirrorfixed", "mirrorfixed.test", "echo",
            {"mirror-target": f"http://localhost:{service.port}/mirror", "mirror-host": "test.env.com", "mirror-request-body": "off"},
        ),
        Manifests.nginx_ingress("mirrortls", "mirrortls.test", "echo", {"mirror-target": f"https://127.0.0.1:{tls_service.port}/copy$request_uri"}),
        Manifests.nginx_ingress("mirrorbad", "mirrorbad.test", "echo", {"mirror-target": "http://mirror.internal$upstream_addr"}),
    )
    manifests.write(
        "config.yaml",
        _config_map(
            "ingress-nginx-controller",
            {
                "custom-http-errors": "404,418",
                "global-allowed-response-headers": "My-Custom-Header,My-Custom-Header-Dollar",
                "add-headers": "default/response-fields",
                "proxy-set-headers": "default/request-fields",
                "ssl-redirect": "false",
                "hsts": "false",
            },
        ),
        _config_map("response-fields", {"X-Request-Start": "t=${msec}", "X-Served-Host": "$host", "X-Id": "$request_id", "X-Upstream": "$upstream_addr"}),
        _config_map("request-fields", {"X-Client": "$remote_addr", "X-Seen-Scheme": "$scheme", "X-Literal": "plain"}),
    )
    https_port = free_port()
    twingress = Twingress(
        manifests.path, "--nginx-configmap", CONFIG, "--https", f"tcp:{https_port}:interface=127.0.0.1", "--access-log", str(access_log)
    )
    yield Proxy(twingress, https_port, access_log, service, tls_service)
    twingress.stop()
    service.stop()
    tls_service.stop()
    echo.stop()


def _log_lines(proxy: Proxy, count: int) -> list[str]:
    """The access log's lines once it has C{count} (it is written within half a second)."""
    return at_least(lambda: proxy.access_log.read_text().splitlines() if proxy.access_log.exists() else [], count, "access-log lines", timeout=5, interval=0.1)


def test_request_id_generated_passed_upstream_and_logged(proxy: Proxy) -> None:
    """
    configmap.md "generate-request-id" (default true) and nginx.tmpl's C{map $http_x_request_id
    $req_id} with C{proxy_set_header X-Request-ID $req_id}: a request without one gets 32 hex
    digits, a client's own goes on unchanged; nginx.tmpl adds none to responses; C{$req_id} ends
    ingress-nginx's default log format (config.go C{logFormatUpstream}).
    """
    before = len(_log_lines(proxy, 0))
    status, fields, first, _ = proxy.get("plain.test", "/one")
    _, _, second, _ = proxy.get("plain.test", "/two")
    _, _, given, _ = proxy.get("plain.test", "/three", {"X-Request-ID": "client-chosen-id"})
    assert status == 200
    made = first["headers"]["x-request-id"]
    assert len(made) == 1 and HEX32.fullmatch(made[0])
    assert second["headers"]["x-request-id"] != made and HEX32.fullmatch(second["headers"]["x-request-id"][0])
    assert given["headers"]["x-request-id"] == ["client-chosen-id"]
    assert "x-request-id" not in fields
    lines = _log_lines(proxy, before + 3)[before:]
    assert [line.rsplit(" request_id=", 1)[1] for line in lines[:3]] == [made[0], second["headers"]["x-request-id"][0], "client-chosen-id"]


def test_request_id_over_http2(proxy: Proxy) -> None:
    """The same over HTTP/2: routing (and the X-Request-ID) are shared by both framings."""
    status, fields, seen = proxy.h2_get("plain.test")
    assert status == 200 and HEX32.fullmatch(seen["headers"]["x-request-id"][0])
    assert b"x-request-id" not in fields
    _, _, given = proxy.h2_get("plain.test", headers=(("x-request-id", "h2-client-id"),))
    assert given["headers"]["x-request-id"] == ["h2-client-id"]


def test_request_id_off(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    """generate-request-id: "false": nginx's C{map} then has no default, so only a client's id goes upstream."""
    manifests.write("all.yaml", *manifests.service("web", [echo_pair[0].address]), Manifests.ingress("plain", "plain.test", "web"))
    manifests.write("config.yaml", _config_map("ingress-nginx-controller", {"generate-request-id": "false"}))
    proxy = twingress("--nginx-configmap", CONFIG)
    for sent, expected in (({}, None), ({"X-Request-ID": "abc"}, ["abc"])):
        connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
        connection.request("GET", "/", headers={"Host": "plain.test", **sent})
        seen = _seen(connection.getresponse().read(), {"content-type": "application/json"})
        assert seen["headers"].get("x-request-id") == expected


def test_x_scheme_and_x_forwarded_scheme(proxy: Proxy) -> None:
    """
    nginx.tmpl: C{proxy_set_header X-Scheme $pass_access_scheme} and C{X-Forwarded-Scheme} the
    same: the client's scheme, never a value the client sent.
    """
    _, _, seen, _ = proxy.get("plain.test", headers={"X-Scheme": "https", "X-Forwarded-Scheme": "https"})
    assert seen["headers"]["x-scheme"] == ["http"] and seen["headers"]["x-forwarded-scheme"] == ["http"]
    _, _, seen_h2 = proxy.h2_get("plain.test", headers=(("x-scheme", "http"),))
    assert seen_h2["headers"]["x-scheme"] == ["https"] and seen_h2["headers"]["x-forwarded-scheme"] == ["https"]


def test_x_forwarded_prefix_without_a_rewrite(proxy: Proxy) -> None:
    """
    e2e annotations/xforwardedprefix.go: the backend sees x-forwarded-prefix=/test/value (here without
    any rewrite-target, annotations.md "X-Forwarded-Prefix Header"); an empty value adds none.
    """
    _, _, seen, _ = proxy.get("prefix.test", "/a", {"X-Forwarded-Prefix": "/from-client"})
    assert seen["headers"]["x-forwarded-prefix"] == ["/test/value"] and seen["path"] == "/a"
    _, _, seen_h2 = proxy.h2_get("prefix.test")
    assert seen_h2["headers"]["x-forwarded-prefix"] == ["/test/value"]
    status, _, plain, _ = proxy.get("noprefix.test")
    assert status == 200 and "x-forwarded-prefix" not in plain["headers"]


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_satisfy_any_lets_an_allowed_client_in_without_credentials(proxy: Proxy) -> None:
    """
    annotations.md "Satisfy" (nginx's C{satisfy any}): an allow-listed client passes without
    credentials, any other must authenticate; without it (C{all}) both are needed.
    """
    assert proxy.get("any.test")[0] == 200  # 127.0.0.1 is in whitelist-source-range
    status, fields, _, _ = proxy.get("any.test", source="127.0.0.2")
    assert status == 401 and fields["www-authenticate"].startswith("Basic")
    assert proxy.get("any.test", headers=_basic("ann", "wrong"), source="127.0.0.2")[0] == 401
    assert proxy.get("any.test", headers=_basic("ann", "secret"), source="127.0.0.2")[0] == 200
    assert proxy.get("all.test")[0] == 401  # satisfy all: the allowed address still needs the password
    assert proxy.get("all.test", headers=_basic("ann", "secret"))[0] == 200
    assert proxy.get("all.test", headers=_basic("ann", "secret"), source="127.0.0.2")[0] == 403


def test_satisfy_any_between_basic_and_external_auth(proxy: Proxy) -> None:
    """
    e2e annotations/satisfy.go "should allow multiple auth with satisfy any": good Basic credentials
    pass though the auth service says no; without them the auth service's no sends to auth-signin.
    """
    asked = len(proxy.service.asked())
    assert proxy.get("anyext.test", headers=_basic("ann", "secret"))[0] == 200
    assert len(proxy.service.asked()) == asked  # the password sufficed: the service was not asked
    status, fields, _, _ = proxy.get("anyext.test", "/?a=b&c=d")
    assert status == 302
    assert fields["location"] == "http://anyext.test/auth/start?rd=http://anyext.test%2F%3Fa%3Db%26c%3Dd"
    status_h2, _, _ = proxy.h2_get("any.test")
    assert status_h2 == 200


def test_custom_headers_annotation(proxy: Proxy) -> None:
    """
    e2e annotations/customheaders.go: the ConfigMap's fields on the response, a C{$} kept as written
    ("My-Custom-Header-Dollar" is "$remote_addr"); 503 for a ConfigMap that does not exist, and
    (internal/ingress/annotations/customheaders) for a name not in global-allowed-response-headers.
    """
    status, fields, _, _ = proxy.get("custom.test")
    assert status == 200 and fields["my-custom-header"] == "42" and fields["my-custom-header-dollar"] == "$remote_addr"
    _, h2_fields, _ = proxy.h2_get("custom.test")
    assert h2_fields[b"my-custom-header"] == b"42"
    assert proxy.get("nocustom.test")[0] == 503
    assert proxy.get("disallowed.test")[0] == 503
    problems = {(p["object"], p["reason"]): p["message"] for p in proxy.twingress.routes()["problems"]}
    assert "global-allowed-response-headers" in problems[("Ingress/default/disallowed", "InvalidCustomHeaders")]
    assert "not found" in problems[("Ingress/default/nocustom", "InvalidCustomHeaders")]


def test_global_custom_http_errors(proxy: Proxy) -> None:
    """
    configmap.md "custom-http-errors": the listed codes of every route are intercepted (twingress's
    own page for the status: it has no global default backend); disable-proxy-intercept-errors
    leaves a route's upstream answers alone; other codes pass.
    """
    status, _, _, body = proxy.get("plain.test", "/?status=404")
    assert status == 404 and b"pod-behaviours" not in body
    status, _, seen, _ = proxy.get("nointercept.test", "/?status=404")
    assert status == 404 and seen["name"] == "pod-behaviours"
    status, _, seen, _ = proxy.get("plain.test", "/?status=409")
    assert status == 409 and seen["name"] == "pod-behaviours"


def test_header_values_with_nginx_variables(proxy: Proxy) -> None:
    """
    docs/examples/customization/custom-headers (custom-headers.yaml: C{X-Request-Start: t=${msec}}),
    with add-headers (response) and proxy-set-headers (request): the variables twingress computes are
    filled in per request; a field naming another ($upstream_addr) is not set, and reported.
    """
    before = time.time()
    _, fields, seen, _ = proxy.get("plain.test", "/vars")
    after = time.time()
    start = fields["x-request-start"]
    assert start.startswith("t=") and before - 0.001 <= float(start[2:]) <= after + 0.001 and re.fullmatch(r"t=\d+\.\d{3}", start)
    assert fields["x-served-host"] == "plain.test"
    assert fields["x-id"] == seen["headers"]["x-request-id"][0]
    assert "x-upstream" not in fields
    assert seen["headers"]["x-client"] == ["127.0.0.1"] and seen["headers"]["x-seen-scheme"] == ["http"]
    assert seen["headers"]["x-literal"] == ["plain"]
    problems = [p["message"] for p in proxy.twingress.routes()["problems"] if p["reason"] == "UnsupportedConfigKey"]
    assert any("X-Upstream" in message and "$upstream_addr" in message for message in problems)
    _, h2_fields, h2_seen = proxy.h2_get("plain.test")
    assert h2_fields[b"x-served-host"] == b"plain.test" and h2_seen["headers"]["x-seen-scheme"] == ["https"]


def _copies(service: Service, count: int) -> list[dict[str, Any]]:
    """What the mirror was sent, once it has C{count} copies (a copy never holds the answer up, so it may come later)."""
    return at_least(lambda: [asked for asked in service.asked() if not asked["path"].startswith(("/deny", "/allow"))], count, "copies at the mirror", timeout=5)


def _field(asked: dict[str, Any], name: str) -> list[str]:
    return [value for key, value in asked["headers"] if key.lower() == name]


def test_mirror_target_with_request_uri(proxy: Proxy) -> None:
    """
    annotations.md "Mirror": C{mirror-target: https://test.env.com$request_uri} copies each request to
    that URL, its path the client's; the answer the client gets is the backend's, not the mirror's.
    """
    before = len(_copies(proxy.service, 0))
    status, _, seen, _ = proxy.get("mirror.test", "/mirrored?x=1")
    assert status == 200 and seen["name"] == "pod-behaviours"
    copy = _copies(proxy.service, before + 1)[before]
    assert (copy["method"], copy["path"]) == ("GET", "/mirrored?x=1")
    assert _field(copy, "host") == [f"127.0.0.1:{proxy.service.port}"]
    assert _field(copy, "x-request-id") == seen["headers"]["x-request-id"]  # the same request, as nginx's mirror subrequest
    status_h2, _, _ = proxy.h2_get("mirror.test", "/over-h2")
    assert status_h2 == 200
    assert _copies(proxy.service, before + 2)[before + 1]["path"] == "/over-h2"


def test_mirror_host_and_request_body_off(proxy: Proxy) -> None:
    """annotations.md "Mirror": a fixed path, the Host from mirror-host, and mirror-request-body "off" sends no body."""
    before = len(_copies(proxy.service, 0))
    connection = http.client.HTTPConnection("127.0.0.1", proxy.twingress.http_port, timeout=10)
    connection.request("POST", "/posted", body=b"x" * 5000, headers={"Host": "mirrorfixed.test"})
    response = connection.getresponse()
    seen = json.loads(response.read())
    assert response.status == 200 and seen["body_bytes"] == 5000  # the backend has the whole body
    copy = _copies(proxy.service, before + 1)[before]
    assert (copy["method"], copy["path"], copy["body"]) == ("POST", "/mirror", 0)
    assert _field(copy, "host") == ["test.env.com"] and _field(copy, "content-length") == []


def test_mirror_target_over_https(proxy: Proxy) -> None:
    """An https mirror-target is reached over TLS (not verified: nginx's proxy_ssl_verify is off by default)."""
    status, _, _, _ = proxy.get("mirrortls.test", "/secure?a=b")
    assert status == 200
    copies = _copies(proxy.tls_service, 1)
    assert [copy["path"] for copy in copies] == ["/copy/secure?a=b"]


def test_mirror_target_with_a_variable_twingress_cannot_compute(proxy: Proxy) -> None:
    """A mirror-target naming a variable twingress does not compute is refused, said, and never sent as text."""
    assert proxy.get("mirrorbad.test")[0] == 404  # the Ingress's paths are not served
    problems = {(p["object"], p["reason"]): p["message"] for p in proxy.twingress.routes()["problems"]}
    assert "$upstream_addr" in problems[("Ingress/default/mirrorbad", "InvalidAnnotation")]
