"""
The last differences from ingress-nginx (issue 65), through twistd in manifests mode with real sockets,
an echo backend, and openssl s_client for ALPN.  Each test cites kubernetes/ingress-nginx at commit
dbb11b92ddb77bee9c35e462479129354c84f939 ("@ING"); the table side is tests/unit/test_nginx_differences.py.
"""

from __future__ import annotations

import subprocess

from tests.proxy.certs import CertificateAuthority, tls_secret
from tests.support import EchoBackend, Manifests, free_port, raw_exchange

NGINX_CLASS = {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx"}}


def _get(port: int, host: str, target: str) -> tuple[int, dict[str, str]]:
    answer = raw_exchange(port, f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    fields = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in head[1:])}
    return int(head[0].split()[1]), fields


def test_trailing_slash_redirect_for_ingress_nginx_class_only(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    """
    @ING internal/ingress/controller/controller.go (getConfiguration): nginx answers "/p" with 301 to "/p/" for
    a location "/p/" (location.go updateServerLocations makes a Prefix or Exact "/p/" one); the query is kept.
    twingress's own class keeps the Kubernetes Prefix rule: "/p/" serves "/p".
    """
    taken = Manifests.ingress("taken", "slash.test", "web", path="/p/")
    taken["spec"]["ingressClassName"] = "nginx"
    exact = Manifests.ingress("exact", "slash.test", "web", path="/e/", path_type="Exact")
    exact["spec"]["ingressClassName"] = "nginx"
    own = Manifests.ingress("own", "own.test", "web", path="/p/")
    manifests.write("all.yaml", *manifests.service("web", [echo_pair[0].address]), NGINX_CLASS, taken, exact, own)
    nginx = twingress("--ingress-class", "nginx", "--controller-name", "k8s.io/ingress-nginx")
    status, fields = _get(nginx.http_port, "slash.test", "/p?a=1")
    assert (status, fields.get("location")) == (301, "http://slash.test/p/?a=1")
    assert _get(nginx.http_port, "slash.test", "/e")[0] == 301 and _get(nginx.http_port, "slash.test", "/e/")[0] == 200
    assert _get(nginx.http_port, "slash.test", "/p/")[0] == 200
    ours = twingress()
    assert _get(ours.http_port, "own.test", "/p")[0] == 200


def test_the_acme_challenge_is_routed_not_redirected(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    """
    @ING config.go NoTLSRedirectLocations (default "/.well-known/acme-challenge"); template.go sets
    $force_no_ssl_redirect by isLocationInLocationList (the location path's prefix); lua_ingress.lua's
    redirect_to_https returns false for it before ssl-redirect and force-ssl-redirect.  A custom list replaces
    the default (test/e2e/settings/no_tls_redirect_locations.go).  cert-manager's HTTP-01 solver Ingress is the case.
    """
    leaf = CertificateAuthority("acme-ca").issue(["acme.test"])
    site = Manifests.ingress("site", "acme.test", "web", tls=[{"hosts": ["acme.test"], "secretName": "acme-tls"}])
    solver = Manifests.ingress("solver", "acme.test", "web", path="/.well-known/acme-challenge/token", path_type="Exact")
    manifests.write("all.yaml", *manifests.service("web", [echo_pair[0].address]), tls_secret("acme-tls", leaf), site, solver)
    manifests.write("config.yaml", Manifests.controller_config_map({}))
    proxy = twingress("--nginx-configmap", Manifests.NGINX_CONFIGMAP)
    assert _get(proxy.http_port, "acme.test", "/.well-known/acme-challenge/token")[0] == 200
    assert _get(proxy.http_port, "acme.test", "/")[0] == 308
    generation = proxy.generation()
    manifests.write("config.yaml", Manifests.controller_config_map({"no-tls-redirect-locations": "/public,/health"}))
    proxy.wait_generation_above(generation)
    assert _get(proxy.http_port, "acme.test", "/.well-known/acme-challenge/token")[0] == 308


def _alpn(https_port: int, host: str) -> str:
    result = subprocess.run(
        ["openssl", "s_client", "-alpn", "h2,http/1.1", "-connect", f"127.0.0.1:{https_port}", "-servername", host],
        input=b"", capture_output=True, timeout=10,
    )
    for line in result.stdout.decode("latin-1").splitlines():
        if line.startswith("ALPN protocol:"):
            return line.split(":", 1)[1].strip()
    return ""


def test_use_http2_false_takes_h2_out_of_alpn_live(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    """
    @ING config.go UseHTTP2 ("Enables or disables the HTTP/2 support in secure connections", default true),
    nginx.tmpl's "http2 on" only with it.  enable-auth-access-log (config.go EnableAuthAccessLog) in the same
    ConfigMap only changes logging: the route is served, the key reported, never closed.
    """
    leaf = CertificateAuthority("h2-ca").issue(["h2.test"])
    site = Manifests.ingress("site", "h2.test", "web", tls=[{"hosts": ["h2.test"], "secretName": "h2-tls"}])
    manifests.write("all.yaml", *manifests.service("web", [echo_pair[0].address]), tls_secret("h2-tls", leaf), site, Manifests.ingress("plain", "plain.test", "web"))
    manifests.write("config.yaml", Manifests.controller_config_map({"use-http2": "false", "enable-auth-access-log": "true"}))
    https_port = free_port()
    proxy = twingress("--nginx-configmap", Manifests.NGINX_CONFIGMAP, "--https", f"tcp:{https_port}:interface=127.0.0.1")
    assert _alpn(https_port, "h2.test") == "http/1.1"
    assert _get(proxy.http_port, "plain.test", "/")[0] == 200
    problems = [p["message"] for p in proxy.routes()["problems"] if p["reason"] == "UnsupportedConfigKey"]
    assert any(message.startswith("enable-auth-access-log") for message in problems)
    generation = proxy.generation()
    manifests.write("config.yaml", Manifests.controller_config_map({}))
    proxy.wait_generation_above(generation)
    assert _alpn(https_port, "h2.test") == "h2"


def test_configmap_proxy_next_upstream_is_every_routes_default(manifests: Manifests, twingress) -> None:
    """
    @ING internal/ingress/defaults/main.go ProxyNextUpstream (json "proxy-next-upstream") is the default the
    proxy annotation parser (internal/ingress/annotations/proxy/main.go) falls back to: an Ingress without the
    annotation passes a 503 on to the next endpoint, one whose annotation leaves http_503 out does not.
    """
    pods = [EchoBackend("bad-pod"), EchoBackend("good-pod")]
    try:
        own = Manifests.nginx_ingress("own", "own.test", "web", {"proxy-next-upstream": "error timeout"})
        manifests.write("all.yaml", *manifests.service("web", [pod.address for pod in pods]), Manifests.ingress("plain", "plain.test", "web"), own)
        manifests.write("config.yaml", Manifests.controller_config_map({"proxy-next-upstream": "error timeout http_503", "ssl-redirect": "false"}))
        proxy = twingress("--nginx-configmap", Manifests.NGINX_CONFIGMAP)
        plain = {_get(proxy.http_port, "plain.test", "/?on=bad-pod&status=503")[0] for _ in range(6)}
        annotated = {_get(proxy.http_port, "own.test", "/?on=bad-pod&status=503")[0] for _ in range(6)}
        assert plain == {200} and annotated == {200, 503}
    finally:
        for pod in pods:
            pod.stop()
