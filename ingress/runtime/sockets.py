# -*- test-case-name: tests.proxy.test_workers -*-
"""
Listening sockets: a listener service that fails the start with one line, and (with worker
processes) the sockets opened once by the primary and shared with the workers.

Each worker slot gets its own socket, bound to the same address with
C{SO_REUSEPORT}, and adopts it (C{adoptStreamPort}): the kernel then spreads
new connections over the slots by a hash of their addresses.  One socket
shared by every worker does not spread: the worker that wakes first accepts
everything queued (measured here: bursts of 32 connections split 28/4, 31/1,
32/0 between two workers, so a client's keep-alive connections sat on one
core).  A worker that dies loses only the connections it had accepted; the
ones hashed to its socket meanwhile wait in that socket's queue until its
replacement adopts the same socket.  Only
endpoint kinds that are a plain TCP socket can be shared this way: C{tcp:} and
C{tcp6:}, optionally behind the PROXY-protocol wrapper (C{haproxy:tcp:...}).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import socket
import stat
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Optional

from twisted.application.internet import StreamServerEndpointService
from twisted.application.service import IService, MultiService
from twisted.internet.endpoints import AdoptedStreamServerEndpoint, serverFromString
from twisted.internet.error import CannotListenError
from twisted.logger import Logger
from twisted.protocols.haproxy import proxyEndpoint
from twisted.python import usage

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from


# Where Linux keeps the largest accept queue a listen() may ask for.
SOMAXCONN_PATH = "/proc/sys/net/core/somaxconn"
# nginx's own default backlog, and ingress-nginx's when net.core.somaxconn is lower or unreadable.
NGINX_BACKLOG = 511


def default_backlog(path: str = SOMAXCONN_PATH) -> int:
    """
    The accept queue a listener gets unless its description names one: net.core.somaxconn, or 511
    when that is below 512 or cannot be read, as ingress-nginx sets every listener's C{backlog}
    (its runtime.SysctlSomaxconn, the nginx template's C{listen ... backlog=}).  Twisted's own
    default, 50, is what a burst of new connections outruns on an edge proxy: the kernel drops the
    final ACKs of handshakes it cannot queue, so those clients believe they are connected and
    wait, for as long as a minute when the retransmitted SYN-ACKs run out.
    """
    try:
        with open(path, encoding="ascii") as sysctl:
            value = int(sysctl.read().strip())
    except (OSError, ValueError):
        return NGINX_BACKLOG
    return value if value >= 512 else NGINX_BACKLOG


def with_backlog(description: str, backlog: int) -> str:
    """C{description} (C{tcp:}, C{tcp6:} or C{unix:}, behind C{haproxy:} or not) with C{backlog}, unless it names one."""
    kinds = description.split(":", 2)
    kind = kinds[1] if kinds[0] == "haproxy" and len(kinds) > 1 else kinds[0]
    if kind not in ("tcp", "tcp6", "unix") or re.search(r"(?<!\\)(?:^|:)backlog=", description):
        return description
    return f"{description}:backlog={backlog}"


@dataclass(frozen=True)
class ListenerSpec:
    """One shared listener: which option it came from, how to bind it, whether PROXY headers come first."""

    name: str  # "http" or "https"
    description: str
    family: int
    interface: str
    port: int
    backlog: int
    proxy_protocol: bool


def parse_listener(name: str, description: str, why: str = "with --workers above 1") -> ListenerSpec:
    """A C{tcp:}/C{tcp6:} endpoint description (behind C{haproxy:} or not); a usage error otherwise."""
    kind, _, rest = description.partition(":")
    proxy_protocol = kind == "haproxy"
    if proxy_protocol:
        kind, _, rest = rest.partition(":")
    if kind not in ("tcp", "tcp6"):
        raise usage.UsageError(f"--{name} {description!r}: {why} a listener must be tcp: or tcp6: (optionally haproxy:)")
    positional, keywords = [], {}
    for argument in re.split(r"(?<!\\):", rest) if rest else []:  # "\:" is a colon inside a value (IPv6)
        key, equals, value = argument.partition("=")
        if equals:
            keywords[key] = value
        else:
            positional.append(argument)
    port = keywords.get("port") or (positional[0] if positional else "")
    if not port.isdigit():
        raise usage.UsageError(f"--{name} {description!r}: no port")
    interface = keywords.get("interface", "::" if kind == "tcp6" else "").replace("\\:", ":")
    family = socket.AF_INET6 if kind == "tcp6" or ":" in interface else socket.AF_INET
    backlog = int(keywords["backlog"]) if "backlog" in keywords else default_backlog()
    return ListenerSpec(name, description, family, interface, int(port), backlog, proxy_protocol)


def check_listener(name: str, description: str, shared: bool, handover: bool = False) -> None:
    """
    Refuse, as a usage error (one line and exit status 1), a listener Twisted cannot make:
    C{bogus:123} or C{tcp:notaport} raised from deep inside C{serverFromString} once the
    service was built, and twistd printed a 30-line traceback.  With worker processes
    (C{shared}) it must also be a socket the workers can share (L{parse_listener}).
    """
    try:
        serverFromString(None, description)  # parsed only: the reactor is first used when it listens
    except Exception as error:  # whatever the endpoint parser raised (ValueError, TypeError, OSError for ssl: files) is the user's to fix
        raise usage.UsageError(f"--{name} {description!r} is not a listener ({error}); e.g. tcp:80 or tcp:8080:interface=127.0.0.1") from None
    if shared:
        parse_listener(name, description)
    if handover:
        parse_listener(name, description, "with --handover")


def open_listener(spec: ListenerSpec, reuse_port: bool = False) -> socket.socket:
    """A bound, listening, non-blocking socket; with C{reuse_port}, one of a group on the same address."""
    return bound_socket(spec.family, socket.SOCK_STREAM, spec.interface, spec.port, reuse_port, spec.backlog)


def address_family(interface: str) -> int:
    """C{AF_INET6} for an IPv6 address ("::" is IPv6 and IPv4), C{AF_INET} for the rest ("" is every IPv4 address)."""
    return socket.AF_INET6 if ":" in interface else socket.AF_INET


def bound_socket(family: int, kind: int, interface: str, port: int, reuse_port: bool, backlog: Optional[int] = None) -> socket.socket:
    """
    A bound, non-blocking socket (listening when C{backlog} is given); raises OSError.

    With C{reuse_port} it is one of a group on the same address (C{SO_REUSEPORT}):
    the kernel hashes each TCP connection and each UDP flow (client address
    and port) to one socket of the group, so a UDP client's datagrams all
    reach the same worker, whose session sends its replies from that socket.
    """
    sock = socket.socket(family, kind)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6 and interface in ("", "::"):
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((interface, port))
        if backlog is not None:
            sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


_SO_ATTACH_FILTER = 26
# A classic BPF program run on each TCP segment the listening socket receives (its offsets count from
# the TCP header): a segment with SYN set and ACK clear -- a new connection attempt -- is dropped; every
# other segment passes, so the final ACK of a handshake the kernel has already answered, and the data
# behind it, still complete that connection into the accept queue.
_BPF_LD_B_ABS, _BPF_ALU_AND_K, _BPF_JEQ_K, _BPF_RET_K = 0x30, 0x54, 0x15, 0x06
_TCP_FLAGS_OFFSET, _SYN, _ACK = 13, 0x02, 0x10
_DROP_CONNECTION_ATTEMPTS = b"".join(
    struct.pack("HBBI", code, jump_true, jump_false, k)
    for code, jump_true, jump_false, k in (
        (_BPF_LD_B_ABS, 0, 0, _TCP_FLAGS_OFFSET),  # A = the flags byte
        (_BPF_ALU_AND_K, 0, 0, _SYN | _ACK),
        (_BPF_JEQ_K, 0, 1, _SYN),  # SYN alone: next instruction (drop), else skip it (keep)
        (_BPF_RET_K, 0, 0, 0),  # keep no byte: dropped
        (_BPF_RET_K, 0, 0, 0xFFFFFFFF),  # keep the whole segment
    )
)


def refuse_new_connections(port: Any) -> bool:
    """
    Make a listening socket drop every new connection attempt (SYN) while the connections the kernel
    has already answered complete and wait in its accept queue, to be accepted as usual. Closing a
    listening socket resets whatever is in its queue: under steady traffic a drain that simply closed
    its listeners reset a few connections whose clients had already been told "connected" (4 of
    12,683 requests across a pod deletion on the test node). Only SYNs are dropped: a filter that
    dropped every segment would also drop the final ACK (and the request) of a handshake the kernel
    answered just before, and its client, told it was connected, would meet the closed listener's
    reset. A dropped SYN is retried by the client (in about a second), by then towards a listener
    that takes it or refuses it outright. Linux only; returns whether the filter is in place.

    Some kernels let only a process with CAP_NET_ADMIN attach a socket filter (measured: 6.18 with
    kernel.unprivileged_bpf_disabled=2 answers EPERM to uid 10001, as the DaemonSet runs, and with
    every other capability); the drain then closes the listener at once, after one last accept of
    what is queued (L{DrainableListener.accept_queued}), and says so in its log.
    """
    sock = getattr(port, "socket", None)
    if sock is None:
        return False
    program = ctypes.create_string_buffer(_DROP_CONNECTION_ATTEMPTS)
    fprog = struct.pack("HL", len(_DROP_CONNECTION_ATTEMPTS) // 8, ctypes.addressof(program))
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)
    except OSError as error:
        log.info(
            "drain: the listening socket cannot drop new connection attempts ({error}; some kernels ask CAP_NET_ADMIN"
            " for a socket filter): it closes at once instead",
            error=error.strerror or str(error),
        )
        return False
    return True


_MOST_ACCEPTED_AT_CLOSE = 1000  # calls of Port.doRead at a listener's close (a queue holds at most its backlog)


class DrainableListener(StreamServerEndpointService):
    """A listener whose port can be told to take no new connections before it stops (L{refuse_new_connections})."""

    def __init__(self, endpoint: Any, factory: Any) -> None:
        super().__init__(endpoint, factory)
        self.port: Any = None

    def privilegedStartService(self) -> None:
        super().privilegedStartService()
        waiting = self._waitingForPort
        if waiting is not None:
            waiting.addCallback(self._listening)

    def _listening(self, port: Any) -> Any:
        self.port = port
        return port

    def refuse_new_connections(self) -> bool:
        return self.port is not None and refuse_new_connections(getattr(self.port, "_realPort", self.port))

    def accept_queued(self) -> None:
        """
        Accept, now, whatever the kernel still holds in the queue, before the port closes: a worker
        that was slow to get to its last accepts (a busy or loaded process) left connections queued on
        a socket the primary keeps open, and their clients waited for an answer until the primary
        exited and the kernel reset them.
        """
        port = getattr(self.port, "_realPort", self.port)
        if port is None or not getattr(port, "connected", False) or not hasattr(port, "sessionno"):
            return
        for _ in range(_MOST_ACCEPTED_AT_CLOSE):
            accepted = port.sessionno  # Twisted's Port numbers the connections it accepts
            port.doRead()  # accepts up to its numberAccepts (as few as 1 after a quiet spell)
            if port.sessionno == accepted:
                return


class EndpointListener(DrainableListener):
    """
    A listener that cannot listen stops the start with one line saying which and why (no traceback);
    one that listens calls C{announce} with its address (the startup line that says what serves where).
    """

    _raiseSynchronously = True  # a port in use fails startup instead of logging and going on

    def __init__(self, reactor: Any, description: str, factory: Any, name: str, announce: Optional[Callable[[Any], None]] = None) -> None:
        super().__init__(serverFromString(reactor, with_backlog(description, default_backlog())), factory)
        self.description = description
        self.announce = announce
        self.setName(name)

    def _listening(self, port: Any) -> Any:
        if self.announce is not None:
            self.announce(port.getHost())
        return super()._listening(port)

    def privilegedStartService(self) -> None:
        try:
            super().privilegedStartService()
        except CannotListenError as error:
            refuse_start(f"twistd ingress: --{self.name} {self.description}: cannot listen: {error.socketError}")


def refuse_start(message: str) -> NoReturn:
    """
    Stop the start: C{message} as one line on the process's own stderr, and exit status 1.

    Not C{SystemExit(message)}: by the time the listeners open, twistd has sent C{sys.stderr}
    into the log, so the message became a C{[stderr#error]} log line on stdout.
    """
    say_now(message)
    raise SystemExit(1)


def say_now(line: str) -> None:
    """One line on the process's own stderr, now: before twistd's log starts, or after it took sys.stderr."""
    stream = sys.__stderr__
    if stream is not None:
        stream.write(line + "\n")
        stream.flush()


class AdoptedListener(DrainableListener):
    """A listener on a socket opened (or received) beforehand: the port is the reactor's copy of it (C{adoptStreamPort})."""

    def __init__(self, reactor: Any, spec: ListenerSpec, sock: socket.socket, factory: Any, announce: Callable[[Any], None], index: int = 0) -> None:
        # The endpoint closes the descriptor it adopted: a copy of ours, which stays open to be handed over.
        endpoint: Any = AdoptedStreamServerEndpoint(reactor, os.dup(sock.fileno()), spec.family)
        super().__init__(proxyEndpoint(endpoint) if spec.proxy_protocol else endpoint, factory)
        self.socket = sock  # kept open: it is what a successor is handed
        self.announce = announce
        self.setName(spec.name if index == 0 else f"{spec.name}-{index}")  # several: a predecessor's SO_REUSEPORT group

    def _listening(self, port: Any) -> Any:
        self.announce(self.socket.getsockname())
        return super()._listening(port)


def listen(reactor: Any, description: str, factory: Any, parent: MultiService, name: str, announce: Optional[Callable[[Any], None]] = None) -> IService:
    remove_stale_unix_socket(description)
    service = EndpointListener(reactor, description, factory, name, announce)
    service.setServiceParent(parent)
    return service


def remove_stale_unix_socket(description: str) -> None:
    """
    For a C{unix:PATH} listener, remove a socket file at PATH that nothing answers on, and its lock (Twisted's
    C{PATH.lock}, a link to the pid that held it): a container restarted in the same pod finds its predecessor's
    in the pod's emptyDir, and its bind would fail; the lock names pid 1, which is the restarted container's own
    twistd again, so Twisted takes it for held.  One that answers is left alone (another process listens there:
    the bind fails, with one line).
    """
    kind, _, rest = description.partition(":")
    if kind != "unix" or not rest:
        return
    first = rest.split(":", 1)[0]
    path = first.partition("=")[2] if first.startswith("address=") else first
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path + ".lock")  # no socket: a lock left without one holds nothing
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
            return
        except OSError:
            pass
    for stale in (path, path + ".lock"):
        with contextlib.suppress(OSError):
            os.unlink(stale)
