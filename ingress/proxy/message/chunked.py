# -*- test-case-name: tests.unit.test_h1 -*-
"""
Chunked framing (RFC 9112 7.1), walked without decoding: the bytes of a chunked body are passed on
as they came, and only its end (and any framing error) is found here.
"""

from __future__ import annotations

import re
from typing import Final

from ingress.proxy.message.h1 import CR, CRLF, FIELDS_RE, TOKEN, Framing, HTTPError

_CHUNK_SIZE_RE: Final = re.compile(
    rb"([0-9A-Fa-f]{1,16})((?:[ \t]*;[ \t]*%s(?:[ \t]*=[ \t]*(?:%s|\"(?:[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*\"))?)*)[ \t]*"
    % (TOKEN, TOKEN)
)


class ChunkedFramer:
    """
    Walks chunked framing (RFC 9112 7.1) without decoding: C{feed} says how many
    of the given bytes belong to the message, so they can be forwarded raw.

    With C{decode} set it also collects the chunk payloads (for a client that
    cannot take chunked: HTTP/1.0).
    """

    # the states (one name each: mypyc compiles class constants, not tuple unpacking)
    _SIZE = 0
    _DATA = 1
    _DATA_CRLF = 2
    _TRAILER = 3
    _DONE = 4

    def __init__(self, max_line: int = 4096, decode: bool = False) -> None:
        self._state = self._SIZE
        self._remaining = 0
        self._line = b""
        self._max_line = max_line
        self._decode = decode
        self.payload: list[bytes] = []
        self.total = 0

    @property
    def done(self) -> bool:
        return self._state == self._DONE

    def feed(self, data: bytes) -> int:
        """
        Consume framing from C{data}; returns how many bytes belong to this message.

        Raises L{HTTPError}(400) on invalid framing.  Bytes after the end of
        the message (a pipelined request) are not consumed.
        """
        pos = 0
        size = len(data)
        while pos < size and self._state != self._DONE:
            if self._state == self._DATA:
                take = min(self._remaining, size - pos)
                if self._decode:
                    self.payload.append(data[pos : pos + take])
                pos += take
                self._remaining -= take
                self.total += take
                if self._remaining == 0:
                    self._state = self._DATA_CRLF
                continue
            end = data.find(b"\n", pos)
            if end < 0:
                self._line += data[pos:]
                if len(self._line) > self._max_line:
                    raise HTTPError(400, "chunk line too long")
                return size
            line = self._line + data[pos : end + 1]
            self._line = b""
            pos = end + 1
            self._line_done(line)
        return pos

    def _line_done(self, line: bytes) -> None:
        if len(line) > self._max_line:
            raise HTTPError(400, "chunk line too long")
        if not line.endswith(CRLF) or CR in line[:-2]:
            raise HTTPError(400, "bare CR or LF in chunked body")
        body = line[:-2]
        if self._state == self._DATA_CRLF:
            if body:
                raise HTTPError(400, "chunk data longer than its size")
            self._state = self._SIZE
        elif self._state == self._SIZE:
            match = _CHUNK_SIZE_RE.fullmatch(body)
            if match is None:
                raise HTTPError(400, "invalid chunk size")
            self._remaining = int(match.group(1), 16)
            self._state = self._DATA if self._remaining else self._TRAILER
        elif body == b"":
            self._state = self._DONE
        elif FIELDS_RE.fullmatch(body + CRLF) is None:
            raise HTTPError(400, "malformed trailer field")


class LengthFramer:
    """A body of known length (Content-Length) behind L{ChunkedFramer}'s C{feed}, C{done} and C{total}."""

    __slots__ = ("_remaining", "total")

    def __init__(self, length: int) -> None:
        self._remaining = length
        self.total = length  # known from the start: a body too large is refused before it is read

    @property
    def done(self) -> bool:
        return self._remaining == 0

    def feed(self, data: bytes) -> int:
        """How many of C{data}'s bytes belong to the body."""
        used = min(self._remaining, len(data))
        self._remaining -= used
        return used


class RequestBody:
    """
    A request body as the HTTP/1.1 connection reads it off its buffer: its framing, and the most the
    route lets it be.  The bytes pass on as they came; what follows the body stays for the next request.
    """

    __slots__ = ("framer", "limit")

    def __init__(self, framing: Framing, limit: int) -> None:
        self.framer: ChunkedFramer | LengthFramer = ChunkedFramer() if framing.chunked else LengthFramer(framing.content_length or 0)
        self.limit = limit

    @property
    def done(self) -> bool:
        return self.framer.done

    def take(self, data: bytes) -> tuple[bytes, bytes]:
        """C{data} split into the body's bytes and the rest; L{HTTPError} for bad framing, or 413 past the limit."""
        used = self.framer.feed(data)
        if self.framer.total > self.limit:
            raise HTTPError(413, "request body too large")
        return (data, b"") if used == len(data) else (data[:used], data[used:])
