# -*- test-case-name: tests.unit.test_h1 -*-
"""
Where an HTTP/1.1 head ends in what has been read: the blank line found, the line and head limits
enforced, and a head that cannot become a request refused before it is complete (garbage, a bare CR or
LF, an overlong request line), rather than at the header timeout.
"""

from __future__ import annotations

import re
from typing import Final

from ingress.proxy.message.h1 import CRLF, HTTPError

HEAD_END: Final = b"\r\n\r\n"
_BARE_LF_RE: Final = re.compile(rb"(?<!\r)\n|\r(?!\n)")
_METHOD_PREFIX_RE: Final = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]*(?: |\r|$)")


def find_head_end(buffer: bytes | bytearray, start: int = 0) -> int:
    """Index just past the blank line that ends a head, or -1 while incomplete."""
    end = buffer.find(HEAD_END, start)
    return -1 if end < 0 else end + 4


def check_incomplete_head(buffer: bytes | bytearray, max_line: int, max_head: int) -> None:
    """
    Refuse an unfinished head early: bare LF/CR, an overlong first line, an oversized head.

    Called only while a head is still incomplete, so its cost stays off the
    common path.
    """
    if _METHOD_PREFIX_RE.match(buffer) is None:
        raise HTTPError(400, "not an HTTP request")  # garbage is refused now, not at the header timeout
    scan = buffer[:-1] if buffer.endswith(b"\r") else buffer  # its LF may be in the next read
    if _BARE_LF_RE.search(scan) is not None:
        raise HTTPError(400, "bare CR or LF in head")
    first_end = buffer.find(CRLF)
    if (first_end < 0 and len(buffer) > max_line) or first_end > max_line:
        raise HTTPError(414, "request line too long")
    if len(buffer) > max_head:
        raise HTTPError(431, "header section too large")


def complete_head(buffer: bytes, max_line: int, max_head: int) -> int:
    """
    Index just past a complete head at the buffer's start within the limits, or -1 while
    incomplete; HTTPError for a head refused whole or early (L{check_incomplete_head}).
    """
    end = find_head_end(buffer)
    if end < 0:
        check_incomplete_head(buffer, max_line, max_head)
        return -1
    if end > max_head:
        raise HTTPError(431, "header section too large")
    if buffer.find(CRLF, 0, end) > max_line:
        raise HTTPError(414, "request line too long")
    return end
