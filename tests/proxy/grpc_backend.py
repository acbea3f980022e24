"""
A gRPC server for the tests (grpcio, generic handlers on raw bytes: no generated code).

Service C{test.Echo}:
- C{Unary}: answers the request's bytes; metadata C{x-echo} comes back as initial metadata
  C{x-echo} and trailer C{x-trailer}; a request of C{b"fail"} ends with NOT_FOUND and a message.
- C{UnaryTwo}: the same as C{Unary}, another method of the service (routes that match methods).
- C{Download}: the request is a decimal byte count; answers it in 64 KiB messages.
- C{Upload}: counts the bytes of every request message; answers the count.
- C{Chat}: bidirectional; answers each message with it reversed.
- C{Wait}: creates MARKER_FILE.started (the call has arrived), then waits (up to 30 s) until
  cancelled; writes "cancelled" to the file named by argv[2] when it is.

Run: C{python tests/proxy/grpc_backend.py PORT MARKER_FILE [CERT KEY]} (with CERT and KEY: TLS,
for backend-protocol GRPCS); C{GRPC_BACKEND_MAX_AGE_MS} in the environment makes it end its
connections with a graceful GOAWAY after that long, as servers with a maximum connection age do.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc

_CHUNK = b"g" * 65536


def _identity(data: bytes) -> bytes:
    return data


class Echo:
    def __init__(self, marker: Path, name: str = "") -> None:
        self.marker = marker
        self.name = name  # answered to the request "who": which server a call reached

    def unary(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        metadata = dict(context.invocation_metadata())
        if "x-echo" in metadata:
            context.send_initial_metadata((("x-echo", metadata["x-echo"]),))
            context.set_trailing_metadata((("x-trailer", "t-" + metadata["x-echo"]),))
        if request == b"fail":
            context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
        if request == b"who":
            return self.name.encode()
        return request

    def download(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        left = int(request)
        while left > 0:
            block = _CHUNK[: min(left, len(_CHUNK))]
            left -= len(block)
            yield block

    def upload(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        return str(sum(len(r) for r in requests)).encode()

    def chat(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        for request in requests:
            yield request[::-1]

    def wait(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self.marker.with_name(self.marker.name + ".started").touch()
        done = threading.Event()
        context.add_callback(done.set)
        done.wait(30)
        if not context.is_active():
            written = self.marker.with_suffix(".tmp")
            written.write_text("cancelled")
            written.replace(self.marker)  # whole or not at all: the test polls for the file and reads it at once
        return b"late"


def main() -> None:
    port, marker = int(sys.argv[1]), Path(sys.argv[2])
    echo = Echo(marker, f"port-{port}")
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(echo.unary, _identity, _identity),
        "UnaryTwo": grpc.unary_unary_rpc_method_handler(echo.unary, _identity, _identity),
        "Download": grpc.unary_stream_rpc_method_handler(echo.download, _identity, _identity),
        "Upload": grpc.stream_unary_rpc_method_handler(echo.upload, _identity, _identity),
        "Chat": grpc.stream_stream_rpc_method_handler(echo.chat, _identity, _identity),
        "Wait": grpc.unary_unary_rpc_method_handler(echo.wait, _identity, _identity),
    }
    options = [("grpc.max_concurrent_streams", 2000)]
    if os.environ.get("GRPC_BACKEND_MAX_AGE_MS"):  # the server ends each connection with a graceful GOAWAY after this long
        options += [("grpc.max_connection_age_ms", int(os.environ["GRPC_BACKEND_MAX_AGE_MS"])), ("grpc.max_connection_age_grace_ms", 5000)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64), options=options)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", handlers),))
    if len(sys.argv) > 4:
        credentials = grpc.ssl_server_credentials([(Path(sys.argv[4]).read_bytes(), Path(sys.argv[3]).read_bytes())])
        server.add_secure_port(f"127.0.0.1:{port}", credentials)
    else:
        server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
