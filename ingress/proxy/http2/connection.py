# -*- test-case-name: tests.proxy.test_http2 -*-
"""
An HTTP/2 client connection: the C{h2} state machine, its streams, its limits.

The connection starts as an HTTP/1.1 one and is handed over here when TLS's
ALPN chose C{h2}, or when a cleartext connection opens with the HTTP/2
preface and C{--http2-cleartext} is on.  Frames are parsed and written by
C{h2}; this protocol turns its events into L{H2Stream} calls and writes what
the state machine has to send once per read (or once per upstream event).

Abuse ends in GOAWAY and a closed connection, counted by reason in
C{twingress_http2_connection_errors_total}: a client that resets streams
faster than a budget refills (CVE-2023-44487, rapid reset) and a header block
split into more CONTINUATION frames than C{h2} accepts get ENHANCE_YOUR_CALM;
any other protocol error gets the code C{h2} chose (RFC 9113 5.4.1).
"""

from __future__ import annotations

from typing import Final, Optional, cast

from h2.config import H2Configuration
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    Event,
    RemoteSettingsChanged,
    RequestReceived,
    StreamEnded,
    StreamReset,
    TrailersReceived,
    WindowUpdated,
)
from h2.exceptions import DenialOfServiceError, ProtocolError
from h2.settings import SettingCodes, Settings
from hpack.exceptions import HPACKError
from hyperframe.frame import GoAwayFrame
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import classImplements

from ingress.proxy.http2.eventkinds import DATA, ENDED, EVENT_KINDS, IGNORED, REQUEST, RESET, SETTINGS, TERMINATED, TRAILERS, WINDOW
from ingress.proxy.http2.fields import request_head
from ingress.proxy.http2.goaway import GoawayTolerant, with_goaway_code
from ingress.proxy.http2.resets import ResetBudget
from ingress.proxy.http2.response import StreamConnection
from ingress.proxy.http2.stream import H2Stream
from ingress.proxy.http2.validate import MalformedHeaders, check_trailers
from ingress.proxy.idle import Deadline, DeadlineGroup, GroupDeadline
from ingress.proxy.message import h1
from ingress.proxy.request.forwarding import UNKNOWN_PEER, ForwardedFor
from ingress.proxy.request.limits import RequestLimits
from ingress.proxy.request.shared import Shared
from ingress.proxy.transport import IConnectionTransport, hand_over
from ingress.speedups.reactorstep import run_before_next_poll

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class H2ServerProtocol(StreamConnection):
    """The server side of one HTTP/2 connection; its transport's producer, as the HTTP/1.1 protocol is."""

    def __init__(self, factory: Shared) -> None:
        self.factory = factory
        self.settings = factory.settings
        self.limits = RequestLimits.of(self.settings)
        self.streams: dict[int, H2Stream] = {}
        self.paused = False  # the client's socket is full: every stream's upstream waits
        self.h2 = GoawayTolerant(
            H2Configuration(
                client_side=False, header_encoding=None, validate_outbound_headers=False, normalize_outbound_headers=False,
                validate_inbound_headers=False, normalize_inbound_headers=False,  # checked by ours (validate); cookies joined by fields
            )
        )
        self._receiving = False
        self._flush_due = False  # a flush asked for before the reactor's next poll
        self._closed = False
        self._goaway_after: Optional[int] = None  # the last stream served once a graceful GOAWAY was sent
        self._peer = UNKNOWN_PEER
        self._port = b"0"
        self.deadlines = DeadlineGroup(factory.reactor)  # the connection's one DelayedCall, for its own deadline and its streams'
        self._timer: Deadline = GroupDeadline(self.deadlines, self._timed_out)
        self._resets = ResetBudget(factory.reactor.seconds, factory.http2.max_concurrent_streams)

    # -- lifecycle ---------------------------------------------------------------

    def connectionMade(self) -> None:
        self.factory.opened(self)
        if hasattr(self.transport, "setTcpNoDelay"):
            self.transport.setTcpNoDelay(True)
        self.transport.registerProducer(self, True)
        limits = self.factory.http2
        h2 = self.h2
        h2.local_settings = Settings(
            client=False,
            initial_values={
                SettingCodes.MAX_CONCURRENT_STREAMS: limits.max_concurrent_streams,
                SettingCodes.INITIAL_WINDOW_SIZE: limits.initial_window,
                SettingCodes.HEADER_TABLE_SIZE: limits.header_table_size,
                SettingCodes.MAX_HEADER_LIST_SIZE: self.settings.max_head_bytes,
            },
        )
        h2.decoder.max_allowed_table_size = limits.header_table_size
        h2.decoder.max_header_list_size = self.settings.max_head_bytes  # before the client acknowledges it, too
        h2.initiate_connection()
        # Room for every stream's window at once, so one stream that waits on its upstream never stalls the rest.
        h2.increment_flow_control_window(limits.max_concurrent_streams * limits.initial_window)
        self._flush_now()
        self._timer.set(self.settings.header_timeout, "idle")

    def peer(self) -> ForwardedFor:
        """Who the client is (read at the first request: behind a PROXY listener, the header tells)."""
        if self._peer is UNKNOWN_PEER:
            self._peer = ForwardedFor.for_transport(self.transport, self.factory.scheme)
            self._port = b"%d" % (getattr(self.transport.getHost(), "port", 0) or 0)
        return self._peer

    def local_port(self) -> bytes:
        return self._port

    def local_host(self) -> str:
        """The address the client connected to (a Gateway's own address picks its table)."""
        return str(getattr(self.transport.getHost(), "host", ""))

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._closed = True
        self._timer.retire()
        streams, self.streams = list(self.streams.values()), {}
        for stream in streams:
            stream.abandon()
            stream.detach()
        self.deadlines.cancel()
        self.transport.unregisterProducer()  # a TLS transport holds its producer until told: a reference cycle
        self.h2.release()
        self.factory.closed(self)

    # -- reading -----------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self._closed:
            return
        try:
            events = self.h2.receive_data(data)
        except ProtocolError as error:
            self._protocol_error(error)
            return
        self._receiving = True
        try:
            for event in events:
                if self._closed:
                    break
                self._dispatch(event)
        finally:
            self._receiving = False
        self._flush_now()

    def _dispatch(self, event: Event) -> None:
        """One of C{h2}'s events to its handler (a native call in the compiled build; none for the events ignored)."""
        kind = EVENT_KINDS.get(type(event), IGNORED)
        if kind == REQUEST:
            self._request(cast(RequestReceived, event))
        elif kind == DATA:
            self._data(cast(DataReceived, event))
        elif kind == ENDED:
            self._ended(cast(StreamEnded, event))
        elif kind == WINDOW:
            self._window(cast(WindowUpdated, event))
        elif kind == RESET:
            self._reset(cast(StreamReset, event))
        elif kind == TRAILERS:
            self._trailers(cast(TrailersReceived, event))
        elif kind == SETTINGS:
            self._remote_settings(cast(RemoteSettingsChanged, event))
        elif kind == TERMINATED:
            self._terminated(cast(ConnectionTerminated, event))

    def _request(self, event: RequestReceived) -> None:
        stream_id = event.stream_id
        if self._goaway_after is not None and stream_id > self._goaway_after:
            self.h2.reset_stream(stream_id, ErrorCodes.REFUSED_STREAM)
            return
        has_body = event.stream_ended is None
        try:
            head = request_head(event.headers, has_body, self.factory.settings.max_header_fields)
        except MalformedHeaders as error:
            self._malformed(error)
            return
        except h1.HTTPError as refusal:  # (not "error" again: mypyc gives a name one type per function)
            self._open_stream(stream_id).refuse_request(refusal, has_body)  # a 4xx on its stream
            return
        self._open_stream(stream_id).begin(head, event.headers, has_body)

    def _open_stream(self, stream_id: int) -> H2Stream:
        """A new request's stream, which ends the connection's idle time."""
        stream = H2Stream(self, stream_id)
        self.streams[stream_id] = stream
        if self._timer.kind == "idle":
            self._timer.cancel()
            self._timer.kind = ""
        return stream

    def _data(self, event: DataReceived) -> None:
        stream = self.streams.get(event.stream_id)
        if stream is None:
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        else:
            stream.receive_body(event.data, event.flow_controlled_length)

    def _ended(self, event: StreamEnded) -> None:
        stream = self.streams.get(event.stream_id)
        if stream is not None:
            stream.end_of_body()

    def _trailers(self, event: TrailersReceived) -> None:
        try:
            check_trailers(event.headers)
        except MalformedHeaders as error:
            self._malformed(error)
            return
        stream = self.streams.get(event.stream_id)
        if stream is not None:
            stream.trailers(event.headers)

    def _reset(self, event: StreamReset) -> None:
        stream = self.streams.pop(event.stream_id, None)
        if stream is not None:
            stream.abandon()
            stream.detach()
            self._after_stream()
        if event.remote_reset and not self._resets.spend():
            self._calm_down("rapid-reset")

    def _window(self, event: WindowUpdated) -> None:
        if event.stream_id:
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.pump()
        else:
            self._pump_all()

    def _remote_settings(self, event: RemoteSettingsChanged) -> None:
        if SettingCodes.INITIAL_WINDOW_SIZE in event.changed_settings:
            self._pump_all()

    def _terminated(self, event: ConnectionTerminated) -> None:
        """The client's GOAWAY: no new streams; close once those open are done."""
        self._goaway_after = self._goaway_after if self._goaway_after is not None else self.h2.highest_inbound_stream_id
        if not self.streams:
            self._close()

    def _pump_all(self) -> None:
        for stream in list(self.streams.values()):
            stream.pump()

    # -- writing -----------------------------------------------------------------

    def flush(self) -> None:
        """
        Write what the state machine has to send: at the end of the read under way, or just
        before the reactor's next poll, so that what the streams send meanwhile (a response's
        HEADERS, DATA and end, other streams' answers) leaves in one write, one TLS record.
        """
        if self._receiving or self._closed or self._flush_due:
            return
        self._flush_due = True
        run_before_next_poll(self.factory.reactor, self._flush_now)

    def _flush_now(self) -> None:
        self._flush_due = False
        if self._closed:
            return
        data = self.h2.data_to_send()
        if data:
            self.transport.write(data)

    def pauseProducing(self) -> None:
        self.paused = True
        for stream in list(self.streams.values()):
            stream.update_client_full()

    def resumeProducing(self) -> None:
        self.paused = False
        for stream in list(self.streams.values()):
            stream.update_client_full()

    def stopProducing(self) -> None:
        pass

    # -- streams ending, drain, errors -------------------------------------------

    def stream_closed(self, stream: H2Stream) -> None:
        if self.streams.get(stream.stream_id) is stream:
            del self.streams[stream.stream_id]
            stream.detach()
            self._after_stream()

    def _after_stream(self) -> None:
        if self.streams:
            return
        if self._goaway_after is not None or self.factory.draining:
            self.drain()
        elif not self._closed:
            self._timer.set(self.factory.settings.keepalive_timeout, "idle")

    def drain(self) -> None:
        """
        Shutdown (or the idle timeout): GOAWAY NO_ERROR naming the last stream served; the
        open ones finish, and the connection closes when none is left.  The GOAWAY is written
        past the state machine, which would refuse to send on the open streams after its own.
        """
        if self._closed:
            return
        if self._goaway_after is None:
            self._goaway_after = self.h2.highest_inbound_stream_id
            self._write_goaway(ErrorCodes.NO_ERROR)
        if not self.streams:
            self._close()

    def _write_goaway(self, code: ErrorCodes) -> None:
        self._flush_now()
        frame = GoAwayFrame(0)
        frame.last_stream_id = self._goaway_after or 0
        frame.error_code = code
        self.transport.write(frame.serialize())

    def _calm_down(self, reason: str) -> None:
        """GOAWAY ENHANCE_YOUR_CALM to a client abusing the protocol, and close."""
        self.factory.metrics.http2_connection_errors.labels(reason).inc()
        log.warn("HTTP/2 client {peer} closed: {reason}", peer=self.peer().ip or "?", reason=reason)
        self.h2.close_connection(ErrorCodes.ENHANCE_YOUR_CALM)
        self._receiving = False
        self._close()

    def _malformed(self, error: MalformedHeaders) -> None:
        """A malformed header list (RFC 9113 8.1.1): GOAWAY PROTOCOL_ERROR, as C{h2}'s own check answered."""
        self.factory.metrics.http2_connection_errors.labels("protocol").inc()
        log.info("HTTP/2 client {peer} closed: {error}", peer=self.peer().ip or "?", error=str(error))
        self.h2.close_connection(ErrorCodes.PROTOCOL_ERROR)
        self._receiving = False
        self._close()

    def _protocol_error(self, error: ProtocolError) -> None:
        """C{h2} refused what the client sent and queued its GOAWAY: send it and close."""
        pending = self.h2.data_to_send()
        if "continuation" in str(error).lower():
            reason = "continuation-flood"
            pending = with_goaway_code(pending, ErrorCodes.ENHANCE_YOUR_CALM)
        else:
            reason = "protocol"
            if isinstance(error.__cause__, HPACKError) and not isinstance(error, DenialOfServiceError):
                # A field block that cannot be decoded: RFC 9113 4.3 makes it COMPRESSION_ERROR, where h2 says
                # PROTOCOL_ERROR. (Too large a header list is h2's DenialOfServiceError: ENHANCE_YOUR_CALM stays.)
                pending = with_goaway_code(pending, ErrorCodes.COMPRESSION_ERROR)
        self.factory.metrics.http2_connection_errors.labels(reason).inc()
        log.info("HTTP/2 client {peer} closed: {error}", peer=self.peer().ip or "?", error=str(error))
        if pending:
            self.transport.write(pending)
        self._close()

    def _timed_out(self, kind: str) -> None:
        if kind == "idle" and not self.streams:
            self.drain()

    def _close(self) -> None:
        if self._closed:
            return
        self._flush_now()  # what the streams sent last leaves before the close
        self._closed = True
        self._timer.cancel()
        self.transport.unregisterProducer()
        self.transport.loseConnection()
        streams, self.streams = list(self.streams.values()), {}
        for stream in streams:
            stream.abandon()


def take_over(transport: IConnectionTransport, factory: Shared, data: bytes) -> None:
    """Make a connection HTTP/2's (ALPN chose h2, or it opened with the preface), replaying what was read."""
    protocol = H2ServerProtocol(factory)
    hand_over(transport, protocol)
    protocol.makeConnection(transport)
    if data:
        protocol.dataReceived(data)


classImplements(H2ServerProtocol, IPushProducer)
