"""
The admin listener of a running C{twistd -n ingress} (/healthz, /readyz,
/debug/routes, /metrics) and the command line itself.
"""

from __future__ import annotations

import http.client
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ingress.tap import Options
from tests.support import ROOT, TWISTD, EchoBackend, Manifests, Twingress, http_status
from tests.waiting import eventually

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(process: Twingress) -> Samples:
    status, body = process.admin("/metrics")
    assert status == 200
    out: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(all_samples: Samples, name: str, **labels: str) -> float:
    return all_samples.get((name, frozenset(labels.items())), 0.0)


# -- health, readiness, routes


def route_to_both(manifests: Manifests, name: str, host: str, pair: tuple[EchoBackend, EchoBackend]) -> None:
    """
    C{host} to both echo backends.  They listen on different ports, so each
    gets its own EndpointSlice (an EndpointSlice has one port for all its
    endpoints); the named port "http" joins them.
    """
    service, first_slice = manifests.service(name, [pair[0].address])
    _, second_slice = manifests.service(name, [pair[1].address])
    second_slice["metadata"]["name"] = f"{name}-2"
    manifests.write(f"{name}.yaml", service, first_slice, second_slice, Manifests.ingress(name, host, name))


@pytest.fixture
def proxy(manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend]) -> Iterator[Twingress]:
    """twingress routing host "echo.test" to both echo backends (each at its own port)."""
    route_to_both(manifests, "echo", "echo.test", echo_pair)
    process = Twingress(manifests.path)
    yield process
    process.stop()


def test_healthz(proxy: Twingress) -> None:
    status, body = proxy.admin("/healthz")
    assert (status, body) == (200, b"ok\n")


def test_readyz_once_the_table_is_live(proxy: Twingress) -> None:
    with urlopen_admin(proxy, "/readyz") as response:
        assert response.status == 200
        assert response.getheader("Content-Type") == "application/json"
        body = json.loads(response.read())
    assert body["ready"] is True
    assert body["table"] == "live"
    assert body["generation"] == proxy.generation() >= 1


def urlopen_admin(process: Twingress, path: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", process.admin_port, timeout=5)
    conn.request("GET", path)
    return conn.getresponse()


def test_debug_routes_lists_hosts_paths_and_endpoints(proxy: Twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    with urlopen_admin(proxy, "/debug/routes") as response:
        assert response.status == 200
        assert response.getheader("Content-Type") == "application/json"
        routes = json.loads(response.read())
    endpoints = sorted(f"{b.host}:{b.port}" for b in echo_pair)
    assert routes["hosts"] == {
        "echo.test": {
            "exact": {},
            "prefix": {"/": {"route": "default/echo", "upstream": "default/echo:80", "endpoints": endpoints}},
        }
    }
    assert routes["wildcards"] == {} and routes["anyHost"] is None and routes["defaultBackend"] is None
    assert routes["problems"] == []
    assert isinstance(routes["generation"], int) and routes["generation"] >= 1


def test_debug_routes_shows_every_kind_of_rule(manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    pod_a, pod_b = echo_pair
    web = manifests.service("web", [pod_a.address])
    api = manifests.service("api", [pod_b.address])
    ingress = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "site", "namespace": "default"},
        "spec": {
            "ingressClassName": "twingress",
            "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}},
            "rules": [
                {
                    "host": "shop.test",
                    "http": {
                        "paths": [
                            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}},
                            {"path": "/api/", "pathType": "Prefix", "backend": {"service": {"name": "api", "port": {"name": "http"}}}},
                            {"path": "/login", "pathType": "Exact", "backend": {"service": {"name": "api", "port": {"number": 80}}}},
                        ]
                    },
                },
                {"host": "*.wild.test", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "api", "port": {"number": 80}}}}]}},
                {"http": {"paths": [{"path": "/any", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}},
            ],
        },
    }
    manifests.write("site.yaml", *web, *api, ingress)
    process = Twingress(manifests.path)
    try:
        routes = process.routes()
        a, b = [f"{pod_a.host}:{pod_a.port}"], [f"{pod_b.host}:{pod_b.port}"]
        shop = routes["hosts"]["shop.test"]
        assert shop["prefix"]["/"] == {"route": "default/site", "upstream": "default/web:80", "endpoints": a}
        assert shop["prefix"]["/api"]["endpoints"] == b
        assert shop["exact"]["/login"] == {"route": "default/site", "upstream": "default/api:80", "endpoints": b}
        assert routes["wildcards"]["*.wild.test"]["prefix"]["/"]["endpoints"] == b
        assert routes["anyHost"]["prefix"]["/any"]["endpoints"] == a
        assert routes["defaultBackend"] == {"route": "default/site", "upstream": "default/web:80"}
        assert routes["problems"] == []
        # and the table shown is the table used
        assert http_status(process.http_port, "shop.test", "/login") == 200
        assert http_status(process.http_port, "x.wild.test", "/") == 200
        assert http_status(process.http_port, "unknown.test", "/") == 200  # the default backend
        assert value(samples(process), "twingress_table_routes") == 6  # shop.test: 2 prefix + 1 exact; wildcard; any host; default
    finally:
        process.stop()


# -- metrics


def test_metrics_count_requests_by_route_and_status(proxy: Twingress) -> None:
    before = samples(proxy)
    for _ in range(7):
        assert http_status(proxy.http_port, "echo.test", "/") == 200
    for _ in range(2):
        assert http_status(proxy.http_port, "echo.test", "/?status=503") == 503
    for _ in range(3):
        assert http_status(proxy.http_port, "nowhere.test", "/") == 404
    after = samples(proxy)

    def increase(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert increase("twingress_http_requests_total", route="default/echo", status="200", protocol="http/1.1") == 7
    assert increase("twingress_http_requests_total", route="default/echo", status="503", protocol="http/1.1") == 2
    assert increase("twingress_http_requests_total", route="-", status="404", protocol="http/1.1") == 3
    # every upstream answer is timed (the 404s never went upstream)
    assert increase("twingress_upstream_response_seconds_count", route="default/echo") == 9
    assert increase("twingress_upstream_response_seconds_sum", route="default/echo") > 0
    assert value(after, "twingress_upstream_response_seconds_bucket", route="default/echo", le="+Inf") == value(
        after, "twingress_upstream_response_seconds_count", route="default/echo"
    )
    buckets = sorted(
        (float(dict(labels)["le"]), v)
        for (name, labels), v in after.items()
        if name == "twingress_upstream_response_seconds_bucket" and dict(labels).get("route") == "default/echo"
    )
    assert len(buckets) > 5 and [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative


def test_metrics_open_connections_gauge(proxy: Twingress) -> None:
    def open_now() -> float:
        return value(samples(proxy), "twingress_open_connections", listener="http")

    eventually(lambda: open_now() == 0, "no client connections open")
    clients = []
    try:
        for _ in range(5):
            conn = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
            conn.request("GET", "/", headers={"Host": "echo.test"})
            response = conn.getresponse()
            response.read()
            assert response.status == 200 and not response.will_close  # kept open
            clients.append(conn)
        assert open_now() == 5
    finally:
        for conn in clients:
            conn.close()
    eventually(lambda: open_now() == 0, "the gauge back at 0 after the clients closed")


def test_metrics_table_build_and_generation(proxy: Twingress, manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    first = samples(proxy)
    generation = proxy.generation()
    assert value(first, "twingress_table_generation") == generation
    assert value(first, "twingress_table_build_seconds_count") >= 1
    assert value(first, "twingress_table_build_seconds_bucket", le="+Inf") == value(first, "twingress_table_build_seconds_count")
    assert value(first, "twingress_table_routes") == 1

    manifests.route("more", "more.test", [echo_pair[0].address])
    newer = proxy.wait_generation_above(generation)
    second = samples(proxy)
    assert value(second, "twingress_table_generation") == newer
    assert value(second, "twingress_table_build_seconds_count") == value(first, "twingress_table_build_seconds_count") + (newer - generation)
    assert value(second, "twingress_table_build_seconds_sum") > value(first, "twingress_table_build_seconds_sum")
    assert value(second, "twingress_table_routes") == 2


def test_metrics_exposition_names(proxy: Twingress) -> None:
    http_status(proxy.http_port, "echo.test")
    with urlopen_admin(proxy, "/metrics") as response:
        assert response.status == 200
        assert response.getheader("Content-Type", "").startswith("text/plain")
        text = response.read().decode()
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    expected = {
        "twingress_http_requests": "counter",
        "twingress_upstream_response_seconds": "histogram",
        "twingress_open_connections": "gauge",
        "twingress_upstream_failures": "counter",
        "twingress_table_build_seconds": "histogram",
        "twingress_table_generation": "gauge",
        "twingress_table_routes": "gauge",
        "twingress_object_problems": "gauge",
        "twingress_source_errors": "counter",
        "twingress_http_malformed_requests": "counter",
    }
    assert {name: families.get(name) for name in expected} == expected
    # the process's own (tests/proxy/test_exposition.py checks them); nothing else is not twingress's
    assert sorted(name for name in families if not name.startswith("twingress_")) == sorted(
        ["process_virtual_memory_bytes", "process_resident_memory_bytes", "process_start_time_seconds", "process_cpu_seconds", "process_open_fds", "process_max_fds"]
    )


# -- problems and classes


def test_ingress_with_missing_service_is_a_problem(proxy: Twingress, manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    generation = proxy.generation()
    manifests.write("ghost.yaml", Manifests.ingress("ghost", "ghost.test", "no-such-service"))
    proxy.wait_generation_above(generation)

    routes = proxy.routes()
    assert [(p["object"], p["reason"]) for p in routes["problems"]] == [("Ingress/default/ghost", "ServiceNotFound")]
    assert "no-such-service" in routes["problems"][0]["message"]
    assert value(samples(proxy), "twingress_object_problems", reason="ServiceNotFound") == 1
    # the route exists but has nowhere to go; the good route is unaffected
    assert routes["hosts"]["ghost.test"]["prefix"]["/"]["endpoints"] == []
    assert http_status(proxy.http_port, "ghost.test") == 503
    assert http_status(proxy.http_port, "echo.test") == 200
    assert "ServiceNotFound" in proxy.log()

    # the Service appears: the problem goes, the gauge drops to 0
    generation = proxy.generation()
    manifests.write("ghost-service.yaml", *manifests.service("no-such-service", [echo_pair[1].address]))
    proxy.wait_generation_above(generation)
    assert proxy.routes()["problems"] == []
    assert value(samples(proxy), "twingress_object_problems", reason="ServiceNotFound") == 0
    assert http_status(proxy.http_port, "ghost.test") == 200


@pytest.mark.parametrize(
    "spec_class, annotations",
    [("nginx", None), (None, {"kubernetes.io/ingress.class": "nginx"}), (None, None)],
    ids=["other-class-name", "other-legacy-annotation", "no-class-and-no-default"],
)
def test_ingress_of_another_class_is_not_routed(
    proxy: Twingress, manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend], spec_class: Optional[str], annotations: Optional[dict[str, str]]
) -> None:
    ingress = Manifests.ingress("foreign", "foreign.test", "foreign")
    del ingress["spec"]["ingressClassName"]
    if spec_class is not None:
        ingress["spec"]["ingressClassName"] = spec_class
    if annotations is not None:
        ingress["metadata"]["annotations"] = annotations
    # a marker Ingress of ours in the same change, to know the change is live
    generation = proxy.generation()
    manifests.write(
        "foreign.yaml",
        *manifests.service("foreign", [echo_pair[0].address]),
        ingress,
        Manifests.ingress("marker", "marker.test", "foreign"),
    )
    proxy.wait_generation_above(generation)
    routes = proxy.routes()
    assert "marker.test" in routes["hosts"]
    assert "foreign.test" not in routes["hosts"]
    assert http_status(proxy.http_port, "marker.test") == 200
    assert http_status(proxy.http_port, "foreign.test") == 404
    assert routes["problems"] == []


# -- the command line


def twistd(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """C{twistd --pidfile= --logfile=- -n ingress ARGS}, to its end."""
    command = TWISTD + ["--pidfile=", "--logfile=-", "-n", "ingress", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_without_manifests_exits_non_zero_with_a_clear_message() -> None:
    result = twistd("--http", "", "--admin", "")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "--manifests" in output and "no configuration source" in output, output
    assert output.count("\n") == 1 and "Usage:" not in output, output  # one line: no help text, no traceback


@pytest.mark.parametrize(
    "args, mentions",
    [
        (["--manifests", "/nonexistent/twingress-manifests"], "is not a directory"),
        (["--header-timeout", "0"], "--header-timeout"),
        (["--max-body-size", "ten"], "not a size"),
        (["--poll-interval", "-1"], "poll-interval"),
    ],
    ids=["manifests-not-a-directory", "zero-timeout", "bad-size", "negative-poll"],
)
def test_bad_options_exit_non_zero_with_a_message(tmp_path: Path, args: list[str], mentions: str) -> None:
    if "--manifests" not in args:
        args = ["--manifests", str(tmp_path), *args]
    result = twistd(*args, "--http", "", "--admin", "")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert mentions in output, output
    assert output.count("\n") == 1 and output.startswith("twistd ingress: "), output  # one line, no help text


def test_help_lists_every_option() -> None:
    result = twistd("--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    declared = {p[0] for p in Options.optParameters} | {f[0] for f in getattr(Options, "optFlags", [])}
    expected = {
        "http", "admin", "manifests", "poll-interval", "ingress-class", "controller-name",
        "max-request-line", "max-header-size", "max-header-fields", "max-body-size",
        "header-timeout", "keepalive-timeout", "connect-timeout", "upstream-timeout",
        "upstream-idle-timeout", "upstream-fail-timeout",
    }
    assert expected <= declared
    for name in declared | {"version", "help"}:
        assert f"--{name}" in text, f"--{name} missing from --help"
    assert "twingress" in text
