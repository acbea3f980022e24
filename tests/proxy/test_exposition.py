"""
The whole /metrics of a real twistd, in every mode, read by the parsers that will read it.

Three readers: prometheus_client's text parser, expfmt's TextParser (client_golang, promtool) and
Prometheus's scraper (textparse), the last two through testenv/promql.sh's tool
(tests/proxy/promql.py).  Every family must parse with its samples under its declared TYPE: no
empty family beside an untyped one made of its samples (what a counter's TYPE line named
C{<name>_total} over samples named C{<name>} gave).

ingress-nginx's names are kept as it writes them, whatever Prometheus's naming lint says (counters
without C{_total}); the families and types below are its collectors' (kubernetes/ingress-nginx,
internal/ingress/metric/collectors/): socket.go's C{requests} counter and histograms
(socket_test.go: C{# TYPE nginx_ingress_controller_requests counter} over samples of that name),
controller.go's gauges and its C{success} and C{errors} counters (controller_test.go:
C{# TYPE nginx_ingress_controller_success counter}), nginx_status.go's
C{nginx_process_connections} gauge and C{nginx_process_requests_total} counter
(nginx_status_test.go), process.go's C{nginx_process_*} (C{cpu_seconds_total} a CounterValue).
"""

from __future__ import annotations

import platform
import re
import time
from collections.abc import Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ingress import __version__
from tests.proxy.promql import parse
from tests.support import EchoBackend, Manifests, Twingress, http_status, refusing_address

NGINX = "nginx_ingress_controller_"
NGINX_FAMILIES = {
    NGINX + "requests": "counter",
    NGINX + "request_duration_seconds": "histogram",
    NGINX + "response_duration_seconds": "histogram",
    NGINX + "header_duration_seconds": "histogram",
    NGINX + "request_size": "histogram",
    NGINX + "response_size": "histogram",
    NGINX + "bytes_sent": "histogram",
    NGINX + "config_hash": "gauge",
    NGINX + "config_last_reload_successful": "gauge",
    NGINX + "config_last_reload_successful_timestamp_seconds": "gauge",
    NGINX + "success": "counter",
    NGINX + "errors": "counter",
    NGINX + "nginx_process_connections": "gauge",
    NGINX + "nginx_process_requests_total": "counter",
    NGINX + "nginx_process_num_procs": "gauge",
    NGINX + "nginx_process_cpu_seconds_total": "counter",
    NGINX + "nginx_process_resident_memory_bytes": "gauge",
    NGINX + "nginx_process_virtual_memory_bytes": "gauge",
}
# prometheus_client's ProcessCollector, as client_golang's process collector names them
PROCESS_FAMILIES = {
    "process_start_time_seconds": "gauge",
    "process_cpu_seconds_total": "counter",
    "process_resident_memory_bytes": "gauge",
    "process_virtual_memory_bytes": "gauge",
    "process_open_fds": "gauge",
    "process_max_fds": "gauge",
}
SUFFIXES = {"counter": ("",), "gauge": ("",), "untyped": ("",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}
MODES = {
    "plain": (),
    "workers": ("--workers", "2"),
    "nginx": ("--nginx-metrics", "true"),
    "nginx-workers": ("--nginx-metrics", "true", "--workers", "2"),
}


@pytest.fixture
def echo() -> Iterator[EchoBackend]:
    backend = EchoBackend("pod-x", "127.0.0.1")
    yield backend
    backend.stop()


def blocks(text: str) -> dict[str, tuple[str, list[str]]]:
    """
    Each TYPE line's name -> (type, the sample names under it), read off the text itself; a sample
    outside the names its TYPE allows fails here (it would be a family of its own to every parser).
    """
    found: dict[str, tuple[str, list[str]]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, current, kind = line.split(" ")
            assert current not in found, f"a second TYPE line for {current}"
            found[current] = (kind, [])
        elif line and not line.startswith("#"):
            name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)  # type: ignore[union-attr]
            kind, names = found[current]
            assert name in [current + suffix for suffix in SUFFIXES[kind]], f"{name} under # TYPE {current} {kind}"
            names.append(name)
    return found


def check_parsers(body: bytes, binary: str) -> dict:
    """The three parsers agree with the text and with each other; the scraper's reading, for more checks."""
    text = body.decode()
    declared = blocks(text)
    lines = sum(len(names) for _, names in declared.values())
    client = list(text_string_to_metric_families(text))
    assert [f.name for f in client if f.type == "unknown"] == []
    assert sum(len(f.samples) for f in client) == lines
    assert len(client) == len(declared)
    empty = sorted(f.name for f in client if not f.samples)  # labelled families no label set was counted in yet
    assert all(name.startswith("twingress_") for name in empty), empty
    go = parse(binary, body)
    assert go["families"] == {name: {"type": kind, "metrics": go["families"][name]["metrics"]} for name, (kind, names) in declared.items() if names}
    assert go["types"] == {name: kind for name, (kind, _) in declared.items()}
    assert len(go["series"]) == lines
    return go


@pytest.mark.parametrize("mode", list(MODES))
def test_every_family_parses_with_its_samples(
    mode: str, manifests: Manifests, echo: EchoBackend, twingress: Callable[..., Twingress], promql_eval: str
) -> None:
    """
    After 200s, a 404 and a 502, /metrics reads the same to the three parsers: each family with its
    samples, each sample under its family's TYPE.  Every mode has C{process_*} (per process: the
    primary's without a label, each worker's with C{worker}) and C{twingress_build_info}; with
    C{--nginx-metrics true} every ingress-nginx family is there under its own name and type.
    """
    manifests.route("web", "x.test", [echo.address])
    manifests.route("dead", "dead.test", [refusing_address()])
    started = time.time()
    process = twingress(*MODES[mode])
    assert [http_status(process.http_port, "x.test", "/a") for _ in range(3)] == [200] * 3
    assert http_status(process.http_port, "nothing.test") == 404
    assert http_status(process.http_port, "dead.test") == 502
    status, body = process.admin("/metrics")
    assert status == 200
    go = check_parsers(body, promql_eval)
    series: dict[str, list[dict]] = {}
    for sample in go["series"]:
        series.setdefault(sample["labels"]["__name__"], []).append(sample)
    workers = ["0", "1"] if "--workers" in MODES[mode] else []
    for name, kind in PROCESS_FAMILIES.items():
        assert go["families"][name]["type"] == kind
        assert sorted(s["labels"].get("worker", "") for s in series[name]) == ["", *workers], name
    for sample in series["process_start_time_seconds"]:
        assert started - 1 <= sample["v"] <= time.time()
    (info,) = series["twingress_build_info"]
    assert info["v"] == 1
    assert info["labels"] == {
        "__name__": "twingress_build_info", "version": __version__, "python": platform.python_version(), "implementation": platform.python_implementation(),
    }
    nginx = {name: family["type"] for name, family in go["families"].items() if name.startswith(NGINX)}
    if "--nginx-metrics" not in MODES[mode]:
        assert nginx == {}
        return
    assert nginx == NGINX_FAMILIES
    assert sum(s["v"] for s in series[NGINX + "requests"]) == 5  # the sample name is ingress-nginx's: no _total
    assert sum(s["v"] for s in series[NGINX + "nginx_process_requests_total"]) == 5  # and no _total_total
    assert [s["v"] for s in series[NGINX + "success"]] == [1.0]
