"""
hpack's Huffman decoder as h2stack.py compiles it: the same answers as upstream's interpreted code.

h2stack.py compiles C{hpack.huffman_table} with declarations of its own (C int locals, C-level flag
constants) and its module body optimised at -O0; these tests hold on both builds, and on the
compiled one they are what says the declarations changed no answer (RFC 7541 5.2, Appendix B).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hpack.huffman_table
import pytest
from hpack import Decoder, Encoder, HPACKDecodingError
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH
from hpack.huffman_table import decode_huffman
from hypothesis import given, settings
from hypothesis import strategies as st

import h2stack

_ENCODER = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH)


def _upstream_decoder() -> Callable[[bytes], bytes]:
    """decode_huffman as upstream's source runs it, interpreted: the .py file beside whichever module imports."""
    source = Path(hpack.huffman_table.__file__ or "").with_name("huffman_table.py")
    spec = importlib.util.spec_from_file_location("hpack._huffman_table_as_upstream_runs_it", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    decode: Callable[[bytes], bytes] = module.decode_huffman
    return decode


_UPSTREAM = _upstream_decoder()


def _outcome(decode: Callable[[bytes], bytes], coded: bytes) -> Any:
    try:
        return decode(coded)
    except HPACKDecodingError as error:
        return str(error)


@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_get_upstream_s_answer(coded: bytes) -> None:
    """Any octets, most of them no valid coding: the decoded bytes or the refusal upstream's interpreted source gives."""
    assert _outcome(decode_huffman, coded) == _outcome(_UPSTREAM, coded)


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=300))
def test_every_byte_string_decodes_to_itself(data: bytes) -> None:
    """Every octet has a code (Appendix B), so any bytes round-trip; the empty string decodes to itself."""
    assert decode_huffman(_ENCODER.encode(data)) == data


def test_rfc_7541_c_4_examples_decode() -> None:
    """RFC 7541 C.4.1-C.4.3: the Huffman-coded values of the request examples."""
    assert decode_huffman(bytes.fromhex("f1e3c2e5f23a6ba0ab90f4ff")) == b"www.example.com"
    assert decode_huffman(bytes.fromhex("a8eb10649cbf")) == b"no-cache"
    assert decode_huffman(bytes.fromhex("25a849e95ba97d7f")) == b"custom-key"
    assert decode_huffman(bytes.fromhex("25a849e95bb8e8b4bf")) == b"custom-value"
    assert decode_huffman(b"") == b"" and decode_huffman(None) == b""


@pytest.mark.parametrize(
    ("coded", "why"),
    [
        (b"\xff\xff\xff\xff", "Invalid Huffman string"),  # EOS (30 ones) inside the string: 5.2 says a decoding error
        (b"\x00", "Incomplete Huffman string"),  # "0" then three zero bits: padding must be ones
        (bytes.fromhex("f1e3c2e5f23a6ba0ab90f4ff") + b"\xff", "Incomplete Huffman string"),  # padding longer than 7 bits
    ],
)
def test_a_bad_coding_is_refused_as_upstream_refuses_it(coded: bytes, why: str) -> None:
    with pytest.raises(HPACKDecodingError, match=why):
        decode_huffman(coded)


def test_a_literal_field_decodes_through_the_decoder() -> None:
    """The decoder's literal path, which calls the decoder of the compiled module: a traceparent as a client codes it."""
    fields = [(b":path", b"/static/js/app.3f2a1b9c.chunk.js?v=20261129"), (b"traceparent", b"00-" + b"ab" * 16 + b"-" + b"cd" * 8 + b"-01")]
    block = Encoder().encode(fields, huffman=True)
    assert Decoder().decode(block, raw=True) == fields


def test_the_declarations_are_of_modules_h2stack_compiles() -> None:
    """The declarations name modules h2stack.py compiles: the Huffman decoder (with its compiler options) and h2's extension types."""
    assert set(h2stack.COMPILE_ARGS) == {"hpack.huffman_table"}
    assert set(h2stack.DECLARATIONS) == {"hpack.huffman_table", *h2stack.EXTENSION_TYPES}
    for module in h2stack.DECLARATIONS:
        package, name = module.split(".")
        assert package in h2stack.PACKAGES and f"{name}.py" not in h2stack.INTERPRETED
