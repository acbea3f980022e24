"""
A small fault-injecting HTTPS proxy in front of Pebble (Pebble has no rate limits): the ACME client
talks to it as to Pebble (the same test CA signs its certificate), it forwards every request to
Pebble with the client's Host header (Pebble builds its URLs from it, so they name the proxy),
except the requests a rule picks,
which it answers itself with a problem document (RFC 7807) and the headers the rule names; the
answers it relays can have headers replaced (L{FaultProxy.answer_headers}: Pebble's renewalInfo
says C{Retry-After: 21600}, a test wants seconds).  It notes the time of every request by path,
so a test can say when the client asked again.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional

from acme import client as acme_client
from acme import errors, messages
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from josepy.jwk import JWKRSA

from tests.acme_support import Pebble

RATE_LIMITED = "urn:ietf:params:acme:error:rateLimited"
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


@dataclass
class Fault:
    """Answer C{times} requests of C{method} to a path that starts with C{path} with C{status} and the problem C{problem}, plus C{headers}."""

    method: str
    path: str
    status: int
    problem: str
    detail: str
    headers: dict[str, str] = field(default_factory=dict)
    times: int = 1


class FaultProxy:
    """The proxy on 127.0.0.1; L{directory} is the URL to give twingress instead of Pebble's."""

    def __init__(self, pebble: Pebble, work: Path) -> None:
        self.pebble = pebble
        self.faults: list[Fault] = []
        self.answer_headers: list[tuple[str, str, dict[str, str]]] = []  # (method, path prefix, headers replaced in Pebble's answers)
        self.seen: list[tuple[float, str, str, int]] = []  # (monotonic time, method, path, status answered)
        self._lock = threading.Lock()
        leaf = pebble.authority.issue(["localhost", "127.0.0.1"])
        (work / "proxy-cert.pem").write_bytes(leaf.fullchain_pem())
        (work / "proxy-key.pem").write_bytes(leaf.key_pem())
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(work / "proxy-cert.pem"), str(work / "proxy-key.pem"))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="acme-faults", daemon=True)
        self._thread.start()

    @property
    def directory(self) -> str:
        return f"https://127.0.0.1:{self.port}/dir"

    def times(self, method: str, path: str) -> list[float]:
        with self._lock:
            return [at for at, m, p, _ in self.seen if m == method and p == path]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _fault_for(self, method: str, path: str) -> Optional[Fault]:
        with self._lock:
            for fault in self.faults:
                if fault.times > 0 and fault.method == method and path.startswith(fault.path):
                    fault.times -= 1
                    return fault
        return None

    def _note(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self.seen.append((time.monotonic(), method, path, status))



def _handler(proxy: FaultProxy) -> Callable[..., BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's names
            self._relay()

        def do_HEAD(self) -> None:  # noqa: N802
            self._relay()

        def do_POST(self) -> None:  # noqa: N802
            self._relay()

        def _relay(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            fault = proxy._fault_for(self.command, self.path)
            if fault is not None:
                proxy._note(self.command, self.path, fault.status)
                problem = json.dumps({"type": fault.problem, "detail": fault.detail, "status": fault.status}).encode()
                self.send_response(fault.status)
                self.send_header("Content-Type", "application/problem+json")
                for name, value in fault.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(problem)))
                self.end_headers()
                self.wfile.write(problem)
                return
            upstream = http.client.HTTPSConnection("127.0.0.1", proxy.pebble.port, context=ssl.create_default_context(cafile=str(proxy.pebble.ca_file)), timeout=15)
            headers = {name: value for name, value in self.headers.items() if name.lower() not in HOP_BY_HOP}  # Host kept: Pebble builds its URLs (and checks the JWS url) from it
            upstream.request(self.command, self.path, body=body if self.command == "POST" else None, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
            proxy._note(self.command, self.path, answer.status)
            self.send_response(answer.status)
            replaced = {name: value for method, prefix, headers in proxy.answer_headers if method == self.command and self.path.startswith(prefix)
                        for name, value in headers.items()}
            for name, value in answer.getheaders():
                if name.lower() not in HOP_BY_HOP and name.lower() not in {key.lower() for key in replaced}:
                    self.send_header(name, value)
            for name, value in replaced.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            upstream.close()

    return Handler


def revoke(directory: str, ca_file: Path, account_key_pem: bytes, certificate: x509.Certificate) -> None:
    """Revoke C{certificate} as the account of C{account_key_pem} (twingress's), with certbot's client as twingress uses it."""
    key = serialization.load_pem_private_key(account_key_pem, password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    network = acme_client.ClientNetwork(JWKRSA(key=key), user_agent="twingress-tests", verify_ssl=str(ca_file))  # type: ignore[arg-type]
    acme = acme_client.ClientV2(acme_client.ClientV2.get_directory(directory, network), network)
    try:
        acme.new_account(messages.NewRegistration.from_data(terms_of_service_agreed=True))
    except errors.ConflictError as existing:  # the key's account: its URL
        network.account = messages.RegistrationResource(uri=existing.location, body=messages.Registration())
    acme.revoke(certificate, 0)
