"""Fixtures for data-plane tests: echo backends and a twingress process on a manifests directory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.proxy.clients import HeldBackend
from tests.proxy.promql import promql_binary
from tests.support import EchoBackend, Manifests, Twingress


@pytest.fixture
def manifests(tmp_path: Path) -> Manifests:
    path = tmp_path / "manifests"
    path.mkdir()
    return Manifests(path)


@pytest.fixture(scope="module")
def echo_pair() -> Iterator[tuple[EchoBackend, EchoBackend]]:
    """Two echo backends on different loopback addresses (127.0.0.1, 127.0.0.2)."""
    a = EchoBackend("pod-a", "127.0.0.1")
    b = EchoBackend("pod-b", "127.0.0.2")
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture
def proxy(manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend]) -> Iterator[Twingress]:
    """twingress routing host "echo.test" to both echo backends."""
    manifests.route("echo", "echo.test", [b.address for b in echo_pair])
    process = Twingress(manifests.path)
    yield process
    process.stop()


@pytest.fixture
def twingress(manifests: Manifests) -> Iterator[Callable[..., Twingress]]:
    """A factory: C{twingress(*args)} runs twistd on the test's manifests directory; every one is stopped at the end."""
    started: list[Twingress] = []

    def start(*args: str, ready_timeout: float = 20.0) -> Twingress:
        started.append(Twingress(manifests.path, *args, ready_timeout=ready_timeout))
        return started[-1]

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def held(manifests: Manifests) -> Iterator[HeldBackend]:
    """held.test routed to a L{HeldBackend} (a request in flight for as long as the test says); write it before start() so the first table has it."""
    backend = HeldBackend()
    manifests.route("held", "held.test", [backend.address])
    yield backend
    backend.stop()


@pytest.fixture(scope="session")
def promql_eval() -> str:
    """testenv/promql.sh's tool (Prometheus's PromQL engine and text parsers), built once if it is not current."""
    return promql_binary()
