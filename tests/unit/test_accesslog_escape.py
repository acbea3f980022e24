"""
The access log's quoting of client bytes (a request target, a Referer, a User-Agent): printable ASCII
stays as it is, and every other byte, a quote and a backslash too, is written as C{\\xHH}, so a client
can neither end the quoted field nor start a new line.  nginx's log_format documents the same rule for
its default escaping: "characters “\"”, “\\”, and other characters with values less than 32 or above 126
will be escaped as “\\xXX”" (nginx.org, ngx_http_log_module, log_format's escape parameter).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingress.proxy.request.accesslines import _escape


def _reference(value: bytes) -> str:
    return "".join(chr(b) if 0x20 <= b <= 0x7E and b not in b'"\\' else f"\\x{b:02x}" for b in value)


@given(st.binary(max_size=80))
def test_any_bytes_are_escaped_as_the_rule_says(value: bytes) -> None:
    assert _escape(value) == _reference(value)


@given(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80))
def test_printable_ascii_is_kept_as_it_is_but_quotes_and_backslashes(text: str) -> None:
    assert _escape(text.encode()) == text.replace("\\", "\\x5c").replace('"', "\\x22")


@pytest.mark.parametrize(
    ("value", "logged"),
    [
        (b"/a?b=1 c", "/a?b=1 c"),
        (b'curl "x"', "curl \\x22x\\x22"),
        (b"a\\b", "a\\x5cb"),
        (b"tab\there", "tab\\x09here"),
        (b"line\r\nnext", "line\\x0d\\x0anext"),
        (b"del\x7f", "del\\x7f"),
        ("caf\u00e9".encode(), "caf\\xc3\\xa9"),
        (b"", ""),
    ],
)
def test_examples(value: bytes, logged: str) -> None:
    assert _escape(value) == logged
