"""
Response compression from the ingress-nginx ConfigMap (configmap.md: "use-gzip", "gzip-level",
"gzip-min-length", "gzip-types"; when nginx compresses: ngx_http_gzip_module, with ingress-nginx's
gzip_proxied any, gzip_vary on, gzip_http_version 1.1), through twistd over HTTP/1.1 and HTTP/2.
"""

from __future__ import annotations

import gzip
import http.client
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support import Manifests, Twingress

TEXT = b"".join(b"line %d of a compressible text body\n" % n for n in range(2000))  # ~70 KB


class _Backend(BaseHTTPRequestHandler):
    """Answers by path: its type, length and framing are what the test is about."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, fields: dict[str, str], body: bytes, chunks: int = 0) -> None:
        self.send_response(status)
        for name, value in fields.items():
            self.send_header(name, value)
        if chunks:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            size = len(body) // chunks + 1
            for at in range(0, len(body), size):
                piece = body[at : at + size]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                time.sleep(0.05)  # not a wait: the backend sends its chunks apart, as a streaming one does
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        path = self.path
        if path == "/text":
            self._send(200, {"Content-Type": "text/plain; charset=utf-8", "ETag": '"v1"'}, TEXT)
        elif path == "/html":
            self._send(200, {"Content-Type": "text/html"}, TEXT)
        elif path == "/chunked":
            self._send(200, {"Content-Type": "application/json"}, TEXT, chunks=5)
        elif path == "/small":
            self._send(200, {"Content-Type": "text/plain"}, b"tiny")
        elif path == "/png":
            self._send(200, {"Content-Type": "image/png"}, TEXT)
        elif path == "/encoded":
            self._send(200, {"Content-Type": "text/plain", "Content-Encoding": "br"}, TEXT)
        elif path == "/partial":
            self._send(206, {"Content-Type": "text/plain", "Content-Range": f"bytes 0-99/{len(TEXT)}"}, TEXT[:100])
        elif path == "/error":
            self._send(500, {"Content-Type": "text/plain"}, TEXT)
        else:
            self._send(404, {"Content-Type": "text/plain"}, TEXT)


@pytest.fixture(scope="module")
def backend() -> Iterator[tuple[str, int]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Backend)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield ("127.0.0.1", server.server_address[1])
    server.shutdown()



@pytest.fixture
def proxy(manifests: Manifests, twingress: Callable[..., Twingress], backend: tuple[str, int]) -> Twingress:
    manifests.route("files", "g.test", [backend])
    manifests.write("config.yaml", Manifests.controller_config_map({"use-gzip": "true"}))
    return twingress("--nginx-configmap", Manifests.NGINX_CONFIGMAP, "--http2-cleartext")


def _get(port: int, path: str, method: str = "GET", **headers: str) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, headers={"Host": "g.test", **{k.replace("_", "-"): v for k, v in headers.items()}})
        response = connection.getresponse()
        body = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        connection.close()


def test_compressed_over_http1_streamed_and_marked(proxy: Twingress) -> None:
    """use-gzip: a text/plain and a text/html answer are gzip, chunked, without Content-Length, with Vary and a weak ETag."""
    for path in ("/text", "/html"):
        status, fields, body = _get(proxy.http_port, path, Accept_Encoding="gzip, deflate")
        assert status == 200
        assert fields["content-encoding"] == "gzip" and fields["vary"] == "Accept-Encoding"
        assert "content-length" not in fields and fields["transfer-encoding"] == "chunked"
        assert gzip.decompress(body) == TEXT and len(body) < len(TEXT) // 5
    assert _get(proxy.http_port, "/text", Accept_Encoding="gzip")[1]["etag"] == 'W/"v1"'


def test_chunked_upstream_is_compressed_piece_by_piece(proxy: Twingress) -> None:
    """A chunked upstream body (application/json, in gzip-types) is decoded and compressed as it arrives."""
    status, fields, body = _get(proxy.http_port, "/chunked", Accept_Encoding="gzip")
    assert status == 200 and fields["content-encoding"] == "gzip"
    assert gzip.decompress(body) == TEXT


@pytest.mark.parametrize(
    ("path", "method", "headers", "why"),
    [
        ("/text", "GET", {}, "no Accept-Encoding"),
        ("/text", "GET", {"Accept_Encoding": "gzip;q=0, deflate"}, "gzip refused with q=0"),
        ("/text", "GET", {"Accept_Encoding": "br"}, "gzip not accepted"),
        ("/text", "HEAD", {"Accept_Encoding": "gzip"}, "HEAD"),
        ("/text", "GET", {"Accept_Encoding": "gzip", "Range": "bytes=0-99"}, "a Range request"),
        ("/partial", "GET", {"Accept_Encoding": "gzip"}, "206"),
        ("/small", "GET", {"Accept_Encoding": "gzip"}, "under gzip-min-length (256)"),
        ("/png", "GET", {"Accept_Encoding": "gzip"}, "image/png is not in gzip-types"),
        ("/encoded", "GET", {"Accept_Encoding": "gzip"}, "already Content-Encoding: br"),
        ("/error", "GET", {"Accept_Encoding": "gzip"}, "a 500 (nginx compresses 200, 403, 404)"),
    ],
)
def test_left_alone(proxy: Twingress, path: str, method: str, headers: dict[str, str], why: str) -> None:
    """The answers nginx's gzip filter passes through unchanged."""
    status, fields, body = _get(proxy.http_port, path, method, **headers)
    assert fields.get("content-encoding") in (None, "br"), why
    assert "content-length" in fields, why
    if method == "GET" and path != "/encoded":
        assert body in (TEXT, TEXT[:100], b"tiny"), why


def test_404_is_compressed_too(proxy: Twingress) -> None:
    status, fields, body = _get(proxy.http_port, "/missing", Accept_Encoding="gzip")
    assert status == 404 and fields["content-encoding"] == "gzip" and gzip.decompress(body) == TEXT


def test_compressed_over_http2(proxy: Twingress, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The same over HTTP/2 (prior knowledge): DATA frames carry the gzip stream, no Content-Length."""
    for path in ("/text", "/chunked"):
        out = tmp_path / "body"
        result = subprocess.run(
            ["curl", "-sS", "--http2-prior-knowledge", "-D", "-", "-o", str(out), "-H", "Host: g.test", "-H", "Accept-Encoding: gzip",
             f"http://127.0.0.1:{proxy.http_port}{path}"],
            capture_output=True, text=True, timeout=20,
        )
        assert result.returncode == 0, result.stderr
        head = result.stdout.lower()
        assert head.startswith("http/2 200") and "content-encoding: gzip" in head and "vary: accept-encoding" in head, head
        assert "content-length" not in head
        assert gzip.decompress(out.read_bytes()) == TEXT


def test_off_without_use_gzip(manifests: Manifests, twingress: Callable[..., Twingress], backend: tuple[str, int]) -> None:
    """use-gzip defaults to false: the upstream's body passes unchanged."""
    manifests.route("files", "g.test", [backend])
    manifests.write("config.yaml", Manifests.controller_config_map({"gzip-level": "5"}))
    process = twingress("--nginx-configmap", Manifests.NGINX_CONFIGMAP)
    status, fields, body = _get(process.http_port, "/text", Accept_Encoding="gzip")
    assert status == 200 and "content-encoding" not in fields and body == TEXT
