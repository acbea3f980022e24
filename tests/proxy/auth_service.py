"""
An external auth service for the tests: a real process answering as oauth2-proxy-like services do.

The path decides the answer (the test names it in auth-url); every question is kept and
served back, newest last, on GET /__asked, so a test can read exactly what the proxy sent.

  /allow          200, X-Auth-Request-User: alice, X-Auth-Request-Email, Set-Cookie
  /allow-quietly  200 without any field (auth-response-headers names a field it does not send)
  /token          200 with Authorization "Bearer good", else 401 (cache tests count the questions)
  /deny           401 with WWW-Authenticate: Bearer realm="svc" and a Set-Cookie
  /forbid         403
  /redirect       302 (neither 2xx, 401 nor 403: an error to nginx's auth_request)
  /slow           200 after 5 seconds

With C{--tls CERT KEY} it serves HTTPS (the https mirror-target test: a server that keeps what it is sent).
"""

from __future__ import annotations

import argparse
import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ASKED: list[dict[str, object]] = []
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _answer(self, status: int, fields: tuple[tuple[str, str], ...] = (), body: bytes = b"") -> None:
        self.send_response(status)
        for name, value in fields:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _ask(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path = self.path.partition("?")[0]
        if path == "/__asked":
            with LOCK:
                self._answer(200, (("Content-Type", "application/json"),), json.dumps(ASKED).encode())
            return
        with LOCK:
            ASKED.append({"method": self.command, "path": self.path, "headers": [[k, v] for k, v in self.headers.items()], "body": len(body)})
        if path == "/allow":
            self._answer(200, (("X-Auth-Request-User", "alice"), ("X-Auth-Request-Email", "alice@example.com"), ("Set-Cookie", "session=abc; Path=/")), b"ok")
        elif path == "/allow-quietly":
            self._answer(200)
        elif path == "/token":
            good = self.headers.get("Authorization") == "Bearer good"
            self._answer(200 if good else 401, () if good else (("WWW-Authenticate", 'Bearer realm="svc"'),))
        elif path == "/deny":
            self._answer(401, (("WWW-Authenticate", 'Bearer realm="svc"'), ("Set-Cookie", "tried=1")), b"no")
        elif path == "/forbid":
            self._answer(403, (), b"forbidden")
        elif path == "/redirect":
            self._answer(302, (("Location", "http://elsewhere.test/"),))
        elif path == "/slow":
            time.sleep(5)  # not a wait: a slow auth service, slower than the auth timeout of the tests
            self._answer(200)
        else:
            self._answer(404)

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _ask


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that gave up (the proxy's timeout on /slow) is expected


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    arguments = parser.parse_args()
    server = Server(("127.0.0.1", arguments.port), Handler)
    if arguments.tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*arguments.tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
