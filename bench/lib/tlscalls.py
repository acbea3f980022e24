"""
What the four OpenSSL calls of an HTTPS keep-alive request cost, by the way they are called.

A server-side TLS 1.3 session on memory BIOs, as twingress's transport runs one on the
context twingress builds for a certificate (ECDSA P-256; the stdlib's session has the same
certificate), reads each request's record and writes its response, that is: the
ciphertext into OpenSSL (C{BIO_write}), the plaintext out (C{SSL_read}), the response in
(C{SSL_write}), its ciphertext out (C{BIO_read}).  Each way makes the same calls on the same records:

- C{pyopenssl}: pyOpenSSL's methods (C{bio_write}, C{recv}, C{send},
  C{bio_read}), as Twisted's TLS transport calls them;
- C{binding}: the same OpenSSL functions through the binding pyOpenSSL itself
  calls (cryptography's), into buffers allocated once, as
  L{ingress.speedups.tlsdirect} calls them;
- C{stdlib}: Python's C{ssl} module on memory BIOs, for reference (its own
  OpenSSL build).

The client's records are made before the clock runs (each can be read once: a
record's sequence number is in its tag), so only the server's four calls are
timed, in µs per request (L{measure}; the tls-calls scenario runs it).
"""

from __future__ import annotations

import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.bindings.openssl.binding import Binding
from OpenSSL import SSL

from ingress.proxy.tls.termination import load_certificate, self_signed_certificate

REQUEST = b"GET / HTTP/1.1\r\nHost: bench.local\r\nUser-Agent: wrk\r\n\r\n"
RESPONSE = b"HTTP/1.1 200 OK\r\nServer: twingress\r\nContent-Type: text/plain\r\nContent-Length: 12\r\n\r\nhello world\n"
PLAINTEXT, CIPHERTEXT = 1 << 15, 1 << 16  # the transport's read sizes (direct.py)

lib: Any = Binding.lib
ffi: Any = Binding.ffi


def pump(sender: SSL.Connection, receiver: SSL.Connection) -> None:
    """Move every byte C{sender} has made into C{receiver}."""
    while True:
        try:
            receiver.bio_write(sender.bio_read(CIPHERTEXT))
        except SSL.WantReadError:
            return


def handshake(sides: tuple[Any, Any], want_read: type[Exception], exchange: Callable[[], object]) -> None:
    """Step both sides' handshakes, C{exchange} carrying their bytes across after each turn (ten are plenty)."""
    for _ in range(10):
        for side in sides:
            try:
                side.do_handshake()
            except want_read:
                pass
        exchange()


def pyopenssl_session(context: SSL.Context) -> tuple[SSL.Connection, SSL.Connection]:
    """A handshaken server on C{context} and a client, the client's session tickets read."""
    server = SSL.Connection(context, None)
    server.set_accept_state()
    client = SSL.Connection(SSL.Context(SSL.TLS_METHOD), None)
    client.set_connect_state()

    def exchange() -> None:
        pump(client, server)
        pump(server, client)

    handshake((client, server), SSL.WantReadError, exchange)
    try:
        client.recv(CIPHERTEXT)
    except SSL.WantReadError:
        pass
    return server, client


def client_records(client: SSL.Connection, requests: int) -> list[bytes]:
    """C{requests} request records, one each, as a keep-alive client sends them."""
    records = []
    for _ in range(requests):
        client.send(REQUEST)
        records.append(client.bio_read(CIPHERTEXT))
    return records


def by_pyopenssl(server: SSL.Connection, records: list[bytes]) -> float:
    started = time.perf_counter()
    for record in records:
        server.bio_write(record)
        server.recv(PLAINTEXT)
        server.send(RESPONSE)
        server.bio_read(CIPHERTEXT)
    return time.perf_counter() - started


def by_binding(server: SSL.Connection, records: list[bytes]) -> float:
    ssl_, into, out = server._ssl, server._into_ssl, server._from_ssl  # what direct.py takes from pyOpenSSL
    plaintext, ciphertext = ffi.new("char[]", PLAINTEXT), ffi.new("char[]", CIPHERTEXT)
    started = time.perf_counter()
    for record in records:
        lib.BIO_write(into, record, len(record))
        ffi.unpack(plaintext, lib.SSL_read(ssl_, plaintext, PLAINTEXT))
        lib.SSL_write(ssl_, RESPONSE, len(RESPONSE))
        ffi.unpack(ciphertext, lib.BIO_read(out, ciphertext, CIPHERTEXT))
    return time.perf_counter() - started


def by_stdlib(certificate: Path, key: Path, requests: int) -> float:
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(certificate, key)
    client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_context.check_hostname = False
    client_context.verify_mode = ssl.CERT_NONE
    into, out, client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_context.wrap_bio(into, out, server_side=True)
    client = client_context.wrap_bio(client_in, client_out)
    handshake((client, server), ssl.SSLWantReadError, lambda: (into.write(client_out.read()), client_in.write(out.read())))
    records = []
    for _ in range(requests):
        client.write(REQUEST)
        records.append(client_out.read())
    started = time.perf_counter()
    for record in records:
        into.write(record)
        server.read(PLAINTEXT)
        server.write(RESPONSE)
        out.read()
    return time.perf_counter() - started


def measure(requests: int, rounds: int) -> dict[str, list[float]]:
    """Every way timed C{rounds} times, in turn: µs per request for the four calls, by way and round."""
    with tempfile.TemporaryDirectory() as directory:
        certificate, key = Path(directory, "cert.pem"), Path(directory, "key.pem")
        pem_certificate, pem_key = self_signed_certificate()
        certificate.write_bytes(pem_certificate)
        key.write_bytes(pem_key)
        ways: dict[str, Callable[[], float]] = {}
        context = load_certificate(pem_certificate, pem_key).context  # twingress's own server context
        for name, call in (("pyopenssl", by_pyopenssl), ("binding", by_binding)):

            def timed(call: Callable[[SSL.Connection, list[bytes]], float] = call) -> float:
                server, client = pyopenssl_session(context)
                return call(server, client_records(client, requests))

            ways[name] = timed
        ways["stdlib"] = lambda: by_stdlib(certificate, key, requests)
        results: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(rounds):
            for name, way in ways.items():
                results[name].append(round(way() / requests * 1e6, 3))
    return results


def versions() -> str:
    return f"OpenSSL {SSL.OpenSSL_version(SSL.OPENSSL_VERSION).decode()} (pyOpenSSL's), {ssl.OPENSSL_VERSION} (stdlib's)"
