# -*- test-case-name: tests.proxy.test_grpc -*-
"""
HTTP/2 to endpoints (backend-protocol GRPC, GRPCS, H2C): multiplexed connections, pooled per endpoint.

One connection to an endpoint carries as many exchanges at once as the
endpoint's SETTINGS_MAX_CONCURRENT_STREAMS allows; another is opened only
when every one is full.  Connections are keyed like the HTTP/1.1 pools (the
address, and the TLS configuration), so a new routing table that keeps an
endpoint keeps its connections.  Endpoint choice and passive health are the
HTTP/1.1 pool's (L{ingress.proxy.request.upstream.UpstreamPool}).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional
from typing import Protocol as TypingProtocol

from h2.config import H2Configuration
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    ResponseReceived,
    StreamEnded,
    StreamReset,
    TrailersReceived,
    WindowUpdated,
)
from h2.exceptions import ProtocolError
from h2.settings import SettingCodes, Settings
from twisted.internet.interfaces import IConnector, IDelayedCall
from twisted.internet.protocol import ClientFactory, Protocol, connectionDone
from twisted.protocols.tls import TLSMemoryBIOFactory
from twisted.python.failure import Failure

from ingress.proxy.http2.goaway import GoawayTolerant
from ingress.proxy.http2.validate import MalformedHeaders, check_response, check_trailers
from ingress.proxy.request.backend_tls import connection_creator
from ingress.proxy.request.settings import HTTP2Settings, ProxySettings
from ingress.proxy.transport import IConnectionTransport, release_connector
from ingress.routing.policies.backend import BackendTLS
from ingress.runtime.reactor import IProcessReactor
from ingress.speedups.fastwrite import direct_writer

Address = tuple[str, int]
Headers = list[tuple[bytes, bytes]]


class ExchangeSink(TypingProtocol):
    """What an upstream HTTP/2 connection reports to the exchange that owns one of its streams."""

    def upstream_headers(self, headers: Headers, ended: bool) -> None: ...

    def upstream_data(self, data: bytes, flow_length: int) -> None: ...

    def upstream_trailers(self, headers: Headers) -> None: ...

    def upstream_ended(self) -> None: ...

    def upstream_reset(self, code: int) -> None: ...

    def upstream_lost(self, detail: str) -> None: ...

    def upstream_window(self) -> None: ...


class H2UpstreamConnection(Protocol):
    """One HTTP/2 connection to an endpoint; its streams belong to different client requests."""

    transport: IConnectionTransport

    def __init__(self, pool: H2UpstreamPool, key: tuple[Address, str]) -> None:
        self.pool = pool
        self.key = key
        self.h2 = GoawayTolerant(
            H2Configuration(
                client_side=True, header_encoding=None, validate_outbound_headers=False,
                validate_inbound_headers=False, normalize_inbound_headers=False,  # checked by ours (validate): a tenth of h2's cost
            )
        )
        self.sinks: dict[int, ExchangeSink] = {}
        self.ready = False
        self.going_away = False
        self.connected = False
        self._waiting: list[tuple[Callable[[H2UpstreamConnection], None], Callable[[str, bool], None]]] = []
        self._idle_call: Optional[IDelayedCall] = None

    @property
    def room(self) -> int:
        """Streams this connection may still open."""
        if self.going_away:
            return 0
        limit = self.h2.remote_settings.max_concurrent_streams
        return limit - len(self.sinks) - len(self._waiting)

    def wait(self, ready: Callable[[H2UpstreamConnection], None], failed: Callable[[str, bool], None]) -> None:
        self._waiting.append((ready, failed))

    def connectionMade(self) -> None:
        self.connected = True
        self.pool.opened += 1
        self.transport.setTcpNoDelay(True)
        self._write = direct_writer(self.transport)  # with the iteration's other sends (fastwrite)
        limits = self.pool.http2
        self.h2.local_settings = Settings(
            client=True,
            initial_values={SettingCodes.INITIAL_WINDOW_SIZE: limits.initial_window, SettingCodes.ENABLE_PUSH: 0},
        )
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(limits.max_concurrent_streams * limits.initial_window)
        self.flush()
        self.ready = True
        waiting, self._waiting = self._waiting, []
        for ready, _ in waiting:
            ready(self)

    def open_stream(self, sink: ExchangeSink, headers: Headers, end_stream: bool) -> int:
        """Start an exchange: its HEADERS go out now."""
        self._cancel_idle()
        stream_id: int = self.h2.get_next_available_stream_id()
        self.sinks[stream_id] = sink
        self.h2.send_headers(stream_id, headers, end_stream=end_stream)
        self.flush()
        return stream_id

    def release(self, stream_id: int) -> None:
        """An exchange is over (ended, reset, or its client gone)."""
        self.sinks.pop(stream_id, None)
        if not self.sinks and self.connected:
            if self.going_away:
                self.transport.loseConnection()
            else:
                self._cancel_idle()
                self._idle_call = self.pool.reactor.callLater(self.pool.settings.upstream_idle_timeout, self._idle)

    def cancel(self, stream_id: int, code: ErrorCodes = ErrorCodes.CANCEL) -> None:
        """The client gave up: the endpoint is told with RST_STREAM."""
        if stream_id in self.sinks and self.connected:
            try:
                self.h2.reset_stream(stream_id, code)
            except ProtocolError:
                pass  # already closed on our side
            self.flush()
        self.release(stream_id)

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and self.connected:
            self._write(data)

    def dataReceived(self, data: bytes) -> None:
        try:
            events = self.h2.receive_data(data)
            for event in events:
                self._event(event)
        except (ProtocolError, MalformedHeaders) as error:
            self.flush()
            self.transport.abortConnection()
            self._lose_all(f"upstream HTTP/2 protocol error: {error}")
            return
        self.flush()

    def _event(self, event: Any) -> None:
        if isinstance(event, ConnectionTerminated):
            self._goaway(event)
            return
        sink = self.sinks.get(getattr(event, "stream_id", 0))
        if isinstance(event, DataReceived):
            if sink is None:
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            else:
                sink.upstream_data(event.data, event.flow_controlled_length)
        elif isinstance(event, WindowUpdated):
            targets = list(self.sinks.values()) if event.stream_id == 0 else [sink] if sink is not None else []
            for target in targets:
                target.upstream_window()
        elif sink is None:
            return
        elif isinstance(event, ResponseReceived):
            check_response(event.headers)
            sink.upstream_headers(event.headers, event.stream_ended is not None)
        elif isinstance(event, TrailersReceived):
            check_trailers(event.headers)
            sink.upstream_trailers(event.headers)
        elif isinstance(event, StreamEnded):
            self.sinks.pop(event.stream_id, None)
            sink.upstream_ended()
            self.release(event.stream_id)
        elif isinstance(event, StreamReset):
            self.sinks.pop(event.stream_id, None)
            sink.upstream_reset(event.error_code)
            self.release(event.stream_id)

    def _goaway(self, event: ConnectionTerminated) -> None:
        """No new streams here; those above the last one the endpoint names were never served."""
        self.going_away = True
        last = event.last_stream_id if event.last_stream_id is not None else 0
        for stream_id in [s for s in self.sinks if s > last]:
            self.sinks.pop(stream_id).upstream_lost("upstream refused the stream (GOAWAY)")
        if event.error_code != ErrorCodes.NO_ERROR:
            self.transport.loseConnection()
        elif not self.sinks:
            self.transport.loseConnection()

    def _idle(self) -> None:
        self._idle_call = None
        if not self.sinks and self.connected:
            self.going_away = True
            self.h2.close_connection()
            self.flush()
            self.transport.loseConnection()

    def _cancel_idle(self) -> None:
        if self._idle_call is not None and self._idle_call.active():
            self._idle_call.cancel()
        self._idle_call = None

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.connected = False
        self._cancel_idle()
        self.pool.forget(self)
        self._lose_all("upstream closed the connection")
        self.h2.release()

    def connect_failed(self, detail: str, timed_out: bool) -> None:
        self.pool.forget(self)
        waiting, self._waiting = self._waiting, []
        for _, failed in waiting:
            failed(detail, timed_out)

    def _lose_all(self, detail: str) -> None:
        self.pool.forget(self)
        waiting, self._waiting = self._waiting, []
        for _, failed in waiting:
            failed(detail, False)
        sinks, self.sinks = list(self.sinks.values()), {}
        for sink in sinks:
            sink.upstream_lost(detail)


class _Connector(ClientFactory):
    """Builds one L{H2UpstreamConnection}; a failure to connect fails everyone waiting on it."""

    noisy = False

    def __init__(self, connection: H2UpstreamConnection) -> None:
        self.connection = connection

    def buildProtocol(self, addr: object) -> H2UpstreamConnection:
        return self.connection

    def clientConnectionFailed(self, connector: object, reason: Failure) -> None:
        from twisted.internet.error import TimeoutError as ConnectTimeout

        self.connection.connect_failed(reason.getErrorMessage(), reason.check(ConnectTimeout) is not None)

    def clientConnectionLost(self, connector: object, reason: Failure) -> None:
        release_connector(connector)


class H2UpstreamPool:
    """HTTP/2 connections by endpoint (and TLS configuration)."""

    def __init__(self, reactor: IProcessReactor, settings: ProxySettings, http2: HTTP2Settings) -> None:
        self.reactor = reactor
        self.settings = settings
        self.http2 = http2
        self._connections: dict[tuple[Address, str], list[H2UpstreamConnection]] = {}
        self.opened = 0  # connections made (ingress.observe.upstream_metrics)

    def get(
        self,
        address: Address,
        tls: Optional[BackendTLS],
        ready: Callable[[H2UpstreamConnection], None],
        failed: Callable[[str, bool], None],
        timeout: float,
    ) -> Optional[IConnector]:
        """A connection with room for one more stream: now (C{ready} runs before this returns), or once connected."""
        key = (address, tls.key if tls is not None else "")
        for connection in self._connections.get(key, ()):
            if connection.room > 0:
                if connection.ready:
                    ready(connection)
                else:
                    connection.wait(ready, failed)
                return None
        connection = H2UpstreamConnection(self, key)
        connection.wait(ready, failed)
        self._connections.setdefault(key, []).append(connection)
        connector = _Connector(connection)
        factory: ClientFactory = connector if tls is None else TLSMemoryBIOFactory(connection_creator(tls), True, connector)  # type: ignore[assignment]  # TLSMemoryBIOFactory is a WrappingFactory to the stubs, not a ClientFactory; connectTCP takes it as one
        return self.reactor.connectTCP(address[0], address[1], factory, timeout=timeout)

    def forget(self, connection: H2UpstreamConnection) -> None:
        connections = self._connections.get(connection.key)
        if connections and connection in connections:
            connections.remove(connection)
            if not connections:
                del self._connections[connection.key]
