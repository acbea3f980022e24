"""
gRPC pieces shared by the tests that run grpcio through twistd: a real grpcio server
(C{grpc_backend.py} in a process of its own) and h2c client channels with the authority a
call names its host by.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc

from tests.support import ROOT, free_port, wait_for_port

SERVICE = "/test.Echo/"


class Backend:
    """C{grpc_backend.py} on a free loopback port: answers the call C{b"who"} with C{port-<port>}."""

    def __init__(self, directory: Path, *tls: str, max_age_ms: int = 0) -> None:
        self.port = free_port()
        self.marker = directory / f"cancelled-{self.port}"
        command = [sys.executable, str(ROOT / "tests" / "proxy" / "grpc_backend.py"), str(self.port), str(self.marker), *tls]
        env = {**os.environ, "GRPC_BACKEND_MAX_AGE_MS": str(max_age_ms)} if max_age_ms else None
        self.process = subprocess.Popen(command, cwd=ROOT, env=env)
        wait_for_port("127.0.0.1", self.port, self.process)

    @property
    def started(self) -> Path:
        """The file a C{Wait} call creates when it arrives: a test cancels only a call under way."""
        return self.marker.with_name(self.marker.name + ".started")

    def cancelled(self) -> bool:
        """Whether a C{Wait} call has seen its cancellation (the marker written, whole)."""
        return self.marker.exists()

    @property
    def name(self) -> bytes:
        """What it answers to C{b"who"}: which server a call reached."""
        return f"port-{self.port}".encode()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def h2c_channel(port: int, host: str) -> grpc.Channel:
    """A channel to 127.0.0.1:port over HTTP/2 with prior knowledge, its calls to C{host} (:authority)."""
    return grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.default_authority", host)])
