"""
hpack's debug records are dropped at their call unless DEBUG is enabled for hpack
(L{ingress.speedups.librarylog}), and hpack codes the same with them dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from hpack import Decoder, Encoder
from twisted.internet.testing import MemoryReactorClock

from ingress.observe.metrics import Metrics
from ingress.process.dataplane import ListenerOptions, data_plane
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.upstream import UpstreamPool
from ingress.runtime.live import LiveTable
from ingress.speedups import ENABLED
from ingress.speedups.librarylog import HPACK_LOGGERS, drop_hpack_debug, dropped


@pytest.fixture(autouse=True)
def hpack_loggers_as_found() -> Iterator[None]:
    """Each test starts from loggers whose debug is logging's own, at no level of their own, and leaves them as it found them."""
    loggers = [logging.getLogger(name) for name in HPACK_LOGGERS]
    found = [(logger.__dict__.get("debug"), logger.level) for logger in loggers]
    for logger in loggers:
        logger.__dict__.pop("debug", None)
        logger.setLevel(logging.NOTSET)
    yield
    for logger, (debug, level) in zip(loggers, found, strict=True):
        logger.__dict__.pop("debug", None)
        if debug is not None:
            logger.debug = debug  # type: ignore[method-assign]
        logger.setLevel(level)


def round_trip() -> list[tuple[bytes, bytes]]:
    """A header list through hpack's encoder and decoder twice (the second time indexed)."""
    headers = [(b":status", b"200"), (b"content-type", b"text/plain"), (b"x-request-id", b"4b1d")]
    encoder, decoder = Encoder(), Decoder()
    decoder.decode(encoder.encode(headers), raw=True)
    return [(bytes(name), bytes(value)) for name, value in decoder.decode(encoder.encode(headers), raw=True)]


def test_hpack_debug_calls_do_nothing_once_dropped_and_hpack_codes_the_same() -> None:
    assert not logging.getLogger("hpack.hpack").isEnabledFor(logging.DEBUG)  # the process's logging passes WARNING and up
    before = round_trip()
    drop_hpack_debug()
    for name in HPACK_LOGGERS:
        assert logging.getLogger(name).debug is dropped
    assert round_trip() == before == [(b":status", b"200"), (b"content-type", b"text/plain"), (b"x-request-id", b"4b1d")]


def test_other_levels_still_log_once_debug_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    drop_hpack_debug()
    with caplog.at_level(logging.WARNING, logger="hpack.table"):
        logging.getLogger("hpack.table").warning("a warning of hpack's")
    assert [record.getMessage() for record in caplog.records] == ["a warning of hpack's"]


def test_a_logger_with_debug_enabled_keeps_its_records(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="hpack"):
        drop_hpack_debug()
        assert logging.getLogger("hpack.hpack").debug is not dropped
        round_trip()
    assert any(record.name == "hpack.hpack" and record.levelno == logging.DEBUG for record in caplog.records)


def test_the_data_plane_drops_them_for_its_process_unless_the_speed_ups_are_off() -> None:
    """Dropped by the data plane with the speed-ups on; hpack's loggers left as they are with TWINGRESS_SPEEDUPS=0."""
    reactor, settings = MemoryReactorClock(), ProxySettings()  # type: ignore[no-untyped-call]  # Twisted's testing reactor is not annotated
    data_plane(reactor, LiveTable(), UpstreamPool(reactor, settings), settings, Metrics(), None, ListenerOptions(http=False, https=False, tls_min_version="1.2", tls_ciphers=""))  # type: ignore[arg-type]  # the testing reactor stands for the process's
    assert all((logging.getLogger(name).debug is dropped) is ENABLED for name in HPACK_LOGGERS)
