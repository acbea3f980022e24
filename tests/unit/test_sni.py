"""Reading the SNI name from real ClientHellos (made by Python's ssl module) and from broken input."""

from __future__ import annotations

import ssl
from typing import Optional

import pytest

from ingress.proxy.tls import sni


def client_hello(server_name: Optional[str]) -> bytes:
    """The first flight of a real TLS client, taken from a memory BIO."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("name", ["pt.test", "A.Example.COM", "x" * 60 + ".example.org"])
def test_the_name_a_real_client_sends(name: str) -> None:
    assert sni.client_hello_server_name(client_hello(name)) == ("ok", name.lower())


def test_no_server_name() -> None:
    assert sni.client_hello_server_name(client_hello(None)) == ("ok", None)


def test_every_prefix_asks_for_more() -> None:
    hello = client_hello("pt.test")
    for cut in range(len(hello)):
        assert sni.client_hello_server_name(hello[:cut]) == (sni.NEED_MORE, None), cut


@pytest.mark.parametrize(
    "data",
    [b"GET / HTTP/1.1\r\n", b"\x15\x03\x01\x00\x02\x02\x28", b"\x16\x02\x00\x00\x01\x00", b"\x00"],
    ids=["http", "alert-record", "sslv2-version", "nul"],
)
def test_non_tls_is_recognised(data: bytes) -> None:
    assert sni.client_hello_server_name(data) == (sni.NOT_TLS, None)


def test_a_corrupt_extension_block_reads_as_no_name() -> None:
    hello = bytearray(client_hello("pt.test"))
    hello[-10:] = b"\xff" * 10  # lengths inside the extensions now point past the end
    assert sni.client_hello_server_name(bytes(hello))[0] == "ok"
