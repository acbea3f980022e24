"""
Compression settings and decisions (ingress-nginx configmap.md: "use-gzip", "gzip-level",
"gzip-min-length", "gzip-types", "enable-brotli"; RFC 9110 12.5.3 for Accept-Encoding).
"""

from __future__ import annotations

import gzip

import pytest

from ingress.model import ConfigMap, ObjectMeta
from ingress.proxy.message.compression import GzipBody, accepts_gzip
from ingress.routing.nginx_config import read_nginx_config


def _read(*data: tuple[str, str]):  # type: ignore[no-untyped-def]
    config_map = ConfigMap(ObjectMeta("default", "c"), data)
    return read_nginx_config({("default", "c"): config_map}, ("default", "c"))


def test_brotli_is_refused_with_its_reason_and_bad_values_named() -> None:
    config, problems = _read(("enable-brotli", "true"), ("use-gzip", "true"), ("gzip-level", "10"))
    messages = {p.reason: p.message for p in problems}
    assert "gzip only" in messages["UnsupportedConfigKey"] and "enable-brotli" in messages["UnsupportedConfigKey"]
    assert "gzip-level" in messages["InvalidConfigKey"]
    assert config.listener is not None and config.listener.gzip is not None and config.listener.gzip.level == 1


def test_defaults_and_types() -> None:
    config, _ = _read(("use-gzip", "true"))
    settings = config.listener.gzip if config.listener else None
    assert settings is not None and settings.min_length == 256 and settings.level == 1
    assert settings.compresses(b"text/html") and settings.compresses(b"application/json") and not settings.compresses(b"image/png")
    config, _ = _read(("use-gzip", "true"), ("gzip-types", "*"))
    assert config.listener is not None and config.listener.gzip is not None and config.listener.gzip.compresses(b"image/png")
    config, _ = _read(("gzip-level", "5"))
    assert config.listener is not None and config.listener.gzip is None


@pytest.mark.parametrize(
    ("value", "accepted"),
    [(b"gzip", True), (b"deflate, gzip;q=0.5", True), (b"GZIP", True), (b"gzip;q=0", False), (b"gzip; q=0.0", False), (b"br", False), (b"*", False)],
)
def test_accept_encoding(value: bytes, accepted: bool) -> None:
    assert accepts_gzip(value) is accepted


def test_gzip_body_streams_each_piece() -> None:
    """Each piece fed comes out at once (a sync flush), in chunks; the whole is one gzip stream."""
    body = GzipBody(1, upstream_chunked=True)
    data = b""
    for piece in (b"5\r\nhello\r\n", b"6\r\n world\r\n0\r\n\r\n"):
        body.feed(piece)
        assert body.payload  # not held back for the end
        data += b"".join(body.payload)
        body.payload.clear()  # as the relay takes them
    data += body.finish()
    assert data.endswith(b"0\r\n\r\n")
    decoded, rest = b"", data
    while rest:
        size, _, rest = rest.partition(b"\r\n")
        length = int(size, 16)
        decoded, rest = decoded + rest[:length], rest[length + 2 :]
    assert gzip.decompress(decoded) == b"hello world"


@pytest.mark.parametrize("length", [1, 300, 1024, 70_000])
def test_small_window_for_a_known_length_still_round_trips(length: int) -> None:
    """A known length picks a smaller zlib window (as nginx's gzip filter does); the stream stays valid gzip."""
    data = (b"abcdefghij" * (length // 10 + 1))[:length]
    body = GzipBody(1, upstream_chunked=False, chunked=False, length=length)
    body.feed(data)
    out = b"".join(body.payload)
    body.payload.clear()
    assert gzip.decompress(out + body.finish()) == data
