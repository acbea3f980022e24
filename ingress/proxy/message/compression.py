# -*- test-case-name: tests.proxy.test_gzip -*-
"""
gzip for responses, streamed: one zlib stream per response, each piece of the upstream's body
compressed and flushed as it arrives (a stream of events keeps flowing; nothing waits for the
whole body).

When, as nginx's gzip module decides it (ngx_http_gzip_filter_module, with ingress-nginx's
template: C{gzip_proxied any}, C{gzip_vary on}, C{gzip_http_version 1.1}): the client accepts
gzip (C{Accept-Encoding}, a q of 0 refuses), the request is HTTP/1.1 or later and not HEAD, the
status is 200, 403 or 404 (so never a 206), the response has no Content-Encoding, its type is
one of C{gzip-types} and a known length is at least C{gzip-min-length}.  We also leave a request
with C{Range} alone.  The answer loses Content-Length and gains C{Content-Encoding: gzip} and
C{Vary: Accept-Encoding}; a strong ETag becomes weak, as nginx makes it.
"""

from __future__ import annotations

import re
import zlib
from typing import Optional

from ingress.proxy.message.chunked import ChunkedFramer
from ingress.routing.compression import Gzip

ADDED_FIELDS = b"Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n"
_COMPRESSED_STATUSES = frozenset({200, 403, 404})
_LENGTH_RE = re.compile(rb"(?im)^content-length:[^\r\n]*\r\n")
_ETAG_RE = re.compile(rb'(?im)^(etag:[ \t]*)(")')


def _field(block: bytes, lowered: bytes, name: bytes) -> Optional[bytes]:
    """Header C{name} ("\\nname:") of a field block and its lower-cased copy, both starting with "\\n"."""
    at = lowered.find(name)
    if at < 0:
        return None
    start = at + len(name)
    end = block.find(b"\r\n", start)
    return block[start : end if end >= 0 else len(block)].strip(b" \t")


def accepts_gzip(value: bytes) -> bool:
    """RFC 9110 12.5.3: "gzip" (or "x-gzip") listed with a q above 0."""
    for item in value.lower().split(b","):
        coding, _, params = item.partition(b";")
        if coding.strip() not in (b"gzip", b"x-gzip"):
            continue
        for param in params.split(b";"):
            name, _, q = param.partition(b"=")
            if name.strip() == b"q":
                try:
                    return float(q.strip()) > 0
                except ValueError:
                    return False
        return True
    return False


def should_compress(
    gzip: Gzip, method: bytes, version: tuple[int, int], request_block: bytes, status: int, response_block: bytes, content_length: Optional[int]
) -> bool:
    """Whether this answer is compressed (the module docstring's rules)."""
    if status not in _COMPRESSED_STATUSES or method == b"HEAD" or version < (1, 1):
        return False
    if content_length is not None and content_length < gzip.min_length:
        return False
    lowered = b"\n" + response_block.lower()
    if lowered.find(b"\ncontent-encoding:") >= 0:
        return False
    media = _field(b"\n" + response_block, lowered, b"\ncontent-type:")
    if media is None or not gzip.compresses(media.partition(b";")[0].strip().lower()):
        return False
    request = b"\n" + request_block.lower()
    if request.find(b"\nrange:") >= 0:
        return False
    accept = _field(b"\n" + request_block, request, b"\naccept-encoding:")
    return accept is not None and accepts_gzip(accept)


def compressed_block(block: bytes) -> bytes:
    """The response's fields for its compressed form: no Content-Length, a weak ETag."""
    return _ETAG_RE.sub(rb"\1W/\2", _LENGTH_RE.sub(b"", block))


def _window_for(length: Optional[int]) -> tuple[int, int]:
    """
    zlib's window bits and memory level for a body of known C{length}: as nginx's gzip filter
    does, smaller for a small body (a 1 KiB answer needs no 32 KiB window; setting one up costs
    more than compressing it).
    """
    window, memory = zlib.MAX_WBITS, 8
    if length is not None and length > 0:
        while length < 1 << (window - 1) and window > 9:
            window -= 1
            memory -= 1
    return window, max(memory, 1)


class GzipBody:
    """
    The body transform of one compressed response (the response's C{feed}/C{payload} interface):
    upstream bytes in (chunked or not), gzip out, in chunks for HTTP/1.1 (C{chunked}) or as
    plain data (HTTP/2 frames it itself).  C{finish} gives the last bytes.
    """

    def __init__(self, level: int, upstream_chunked: bool, chunked: bool = True, length: Optional[int] = None) -> None:
        window, memory = _window_for(length)
        self._zlib = zlib.compressobj(level, zlib.DEFLATED, 16 + window, memory)
        self._dechunk = ChunkedFramer(decode=True) if upstream_chunked else None
        self._chunked = chunked
        self.payload: list[bytes] = []

    def feed(self, data: bytes) -> int:
        if self._dechunk is not None:
            self._dechunk.feed(data)
            data = b"".join(self._dechunk.payload)
            self._dechunk.payload.clear()
        if data:
            self._emit(self._zlib.compress(data) + self._zlib.flush(zlib.Z_SYNC_FLUSH))
        return len(data)

    def finish(self) -> bytes:
        self._emit(self._zlib.flush(zlib.Z_FINISH))
        tail = b"".join(self.payload)
        self.payload.clear()
        return tail + b"0\r\n\r\n" if self._chunked else tail

    def _emit(self, data: bytes) -> None:
        if data:
            self.payload.append(b"%x\r\n%s\r\n" % (len(data), data) if self._chunked else data)
