"""
What the primary writes to a worker's stdin (ingress.process.workersettings.WorkerConfig): every field
round-trips, and a missing, unknown or mistyped field is an error that names it - on the worker's
command line too (one line on stderr, a non-zero exit).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from ingress.process.workersettings import WorkerConfig, WorkerConfigError, WorkerListener
from ingress.proxy.request.settings import HTTP2Settings, ProxySettings
from ingress.routing.compression import Gzip
from tests.support import ROOT

# Every field away from its default (a field left at its default would round-trip even if nobody wrote it).
SETTINGS = ProxySettings(
    max_request_line=1001, max_head_bytes=1002, max_header_fields=1003, max_body_bytes=1004, header_timeout=1.5,
    client_body_timeout=2.5, keepalive_timeout=3.5, keepalive_requests=1005, connect_timeout=4.5, upstream_timeout=5.5,
    upstream_idle_timeout=6.5, max_idle_per_endpoint=1006, fail_timeout=7.5, server_name=b"edge-\xe9", https_redirect_port=8443,
    gzip=Gzip(level=5, min_length=10, types=frozenset({b"text/html", b"text/css"}), any_type=True),
)
HTTP2 = HTTP2Settings(enabled=False, cleartext=True, max_concurrent_streams=7, initial_window=1 << 20, header_table_size=0)
CONFIG = WorkerConfig(
    settings=SETTINGS,
    listeners=(WorkerListener("http", 2, False, (4, 5)), WorkerListener("https", 10, True, (6,))),
    tls_min_version="1.3",
    tls_ciphers="ECDHE-RSA-AES128-GCM-SHA256",
    http2=HTTP2,
    access_log="/var/log/access.log",
    access_log_format="json",
    nginx_metrics=True,
    ingress_class="edge",
    log_format="json",
    drain_timeout=12.5,
    stream_interface="::",
    gateway_interface="127.0.0.1",
    stream_drain_timeout=3.25,
    metrics_created=True,
)


def _non_default(value: Any) -> None:
    """Each field of C{value} (and of the dataclasses in it) differs from its class's default."""
    for each in dataclasses.fields(value):
        field_value = getattr(value, each.name)
        if each.default is not dataclasses.MISSING:
            assert field_value != each.default, f"{type(value).__name__}.{each.name} is at its default: set it above"
        if dataclasses.is_dataclass(field_value):
            _non_default(field_value)


def test_every_field_round_trips() -> None:
    _non_default(CONFIG)
    _non_default(CONFIG.listeners[0])
    decoded = WorkerConfig.from_json(CONFIG.to_json())
    assert decoded == CONFIG
    for each in dataclasses.fields(WorkerConfig):  # the same values, and of the same types (a float stays a float)
        assert type(getattr(decoded, each.name)) is type(getattr(CONFIG, each.name)), each.name


def test_written_and_read_are_the_dataclass_fields() -> None:
    """What to_json writes is exactly the fields; from_json reads each one of them (it misses every one removed)."""
    written = json.loads(CONFIG.to_json())
    assert set(written) == {each.name for each in dataclasses.fields(WorkerConfig)}
    assert set(written["settings"]) == {each.name for each in dataclasses.fields(ProxySettings)}
    assert set(written["http2"]) == {each.name for each in dataclasses.fields(HTTP2Settings)}
    for name in written:
        missing = {key: value for key, value in written.items() if key != name}
        with pytest.raises(WorkerConfigError, match=f"worker config: field '{name}' is missing"):
            WorkerConfig.from_json(json.dumps(missing))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"drain_timeout": "30"}, r"worker config\.drain_timeout: expected a number, got '30'"),
        ({"nginx_metrics": "true"}, r"worker config\.nginx_metrics: expected true or false, got 'true'"),
        ({"settings": {**json.loads(CONFIG.to_json())["settings"], "max_body_bytes": 1.5}}, r"worker config\.settings\.max_body_bytes: expected a whole number, got 1\.5"),
        ({"settings": {**json.loads(CONFIG.to_json())["settings"], "keepalive_requests": True}}, r"worker config\.settings\.keepalive_requests: expected a whole number, got True"),
        ({"listeners": [{"name": "http", "family": 2, "proxy_protocol": False}]}, r"worker config\.listeners\[0\]: field 'fds' is missing"),
        ({"listeners": {"name": "http"}}, r"worker config\.listeners: expected a list"),
        ({"http2": None}, r"worker config\.http2: expected an object, got None"),
        ({"workers": 4}, r"worker config: unknown field 'workers'"),
    ],
)
def test_a_bad_field_is_named(change: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkerConfigError, match=message):
        WorkerConfig.from_json(json.dumps({**json.loads(CONFIG.to_json()), **change}))


def test_not_json() -> None:
    with pytest.raises(WorkerConfigError, match="worker config: not JSON"):
        WorkerConfig.from_json(b"{settings")


def test_the_worker_refuses_a_bad_config_in_one_line() -> None:
    """The worker process itself, started as the primary starts it, on a config with a field missing."""
    bad = {key: value for key, value in json.loads(CONFIG.to_json()).items() if key != "log_format"}
    done = subprocess.run(
        [sys.executable, "-m", "ingress.process.worker", "0", str(os.getpid())],
        input=json.dumps(bad).encode(), capture_output=True, cwd=ROOT, timeout=60,
    )
    assert done.returncode != 0
    assert done.stderr.decode().strip() == "twingress worker: worker config: field 'log_format' is missing"
