"""
The listeners' factories from one L{ingress.process.dataplane.ListenerOptions} value: which listeners
exist, which wait for a PROXY header, and the TLS and HTTP/2 options each gets.
"""

from __future__ import annotations

import dataclasses

import pytest
from twisted.internet.testing import MemoryReactorClock

from ingress.observe.metrics import Metrics
from ingress.process.dataplane import DataPlane, ListenerOptions, data_plane
from ingress.proxy.http1.factory import HTTPProxyFactory
from ingress.proxy.proxy_protocol import ProxyProtocolWhenAsked
from ingress.proxy.request.settings import HTTP2Settings, ProxySettings
from ingress.proxy.request.upstream import UpstreamPool
from ingress.proxy.tls.front import TLSFrontFactory
from ingress.runtime.live import LiveTable

CIPHERS = "ECDHE-RSA-AES128-GCM-SHA256"


def _plane(listeners: ListenerOptions) -> DataPlane:
    clock, settings = MemoryReactorClock(), ProxySettings()
    return data_plane(clock, LiveTable(), UpstreamPool(clock, settings), settings, Metrics(), None, listeners)  # type: ignore[arg-type]  # the testing reactor stands for the process's


def test_only_the_listeners_asked_for() -> None:
    plane = _plane(ListenerOptions(http=True, https=False, tls_min_version="1.2", tls_ciphers=CIPHERS))
    assert plane.http is not None and plane.https is None and plane.store is None
    assert len(plane.drainables) == 1


def test_a_listener_behind_a_haproxy_endpoint_has_no_proxy_protocol_wrapper_of_its_own() -> None:
    plane = _plane(ListenerOptions(http=True, https=True, tls_min_version="1.2", tls_ciphers=CIPHERS, behind_proxy=frozenset({"https"})))
    assert isinstance(plane.http, ProxyProtocolWhenAsked)  # the table's use-proxy-protocol decides
    assert isinstance(plane.https, TLSFrontFactory)  # the endpoint already reads the header


def test_tls_and_http2_options_reach_the_factories() -> None:
    http2 = HTTP2Settings(enabled=False, max_concurrent_streams=7)
    plane = _plane(ListenerOptions(http=True, https=True, tls_min_version="1.3", tls_ciphers=CIPHERS, http2=http2))
    assert plane.store is not None
    assert (plane.store.min_version, plane.store.ciphers, plane.store.http2) == ("1.3", CIPHERS, False)
    assert isinstance(plane.http, ProxyProtocolWhenAsked)
    factory = plane.http.wrapped
    assert isinstance(factory, HTTPProxyFactory) and factory.http2 is http2


def test_the_options_are_one_frozen_value() -> None:
    listeners = ListenerOptions(http=True, https=False, tls_min_version="1.2", tls_ciphers=CIPHERS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        listeners.http = False  # type: ignore[misc]
    assert listeners.http2 is None and listeners.behind_proxy == frozenset()
