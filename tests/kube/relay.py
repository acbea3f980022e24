"""
L{TcpRelay}: a byte relay in front of kube-apiserver, so a test can cut the proxy's watch
connections, or cut the proxy off the API while the API itself keeps working.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from pathlib import Path


class TcpRelay:
    """
    A TCP relay on 127.0.0.1 to C{target}: what twingress talks to when a test must cut its
    connections to the apiserver (TLS passes through untouched; the apiserver's certificate
    names 127.0.0.1, whatever the port).

    - L{cut}: reset every open connection (both sides see it end at once, mid-stream);
    - L{block}: accept and reset new connections too (the API is unreachable for the proxy
      while other clients, the test's, still reach it); L{unblock} heals that.
    """

    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1") -> None:
        self.target = target
        self.listener = socket.socket()
        self.listener.bind((host, 0))
        self.listener.listen(64)
        self.host = host
        self.port = int(self.listener.getsockname()[1])
        self.blocked = False
        self.accepted = 0
        self.refused = 0
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._half_closed: dict[tuple[socket.socket, socket.socket], int] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name=f"relay-{self.port}", daemon=True)
        self._thread.start()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            if self.blocked:
                self.refused += 1
                _reset(downstream)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(downstream)
                continue
            pair = (downstream, upstream)
            with self._lock:
                self._pairs.add(pair)
                self.accepted += 1
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(pair, source, sink), daemon=True).start()

    def _pump(self, pair: tuple[socket.socket, socket.socket], source: socket.socket, sink: socket.socket) -> None:
        """Copy one direction; an orderly end is passed on as a half-close, an error resets both."""
        clean = False
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
            clean = True
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            clean = False
        with self._lock:
            known = pair in self._pairs
            done = self._half_closed.get(pair, 0) + 1
            if known:
                self._half_closed[pair] = done
            finished = known and (not clean or done == 2)
            if finished:
                self._pairs.discard(pair)
                self._half_closed.pop(pair, None)
        if finished:
            for sock in pair:
                if clean:
                    with contextlib.suppress(OSError):
                        sock.close()
                else:
                    _reset(sock)

    def cut(self) -> int:
        """Reset every open connection; returns how many there were."""
        with self._lock:
            pairs = list(self._pairs)
            self._pairs.clear()
            self._half_closed.clear()
        for pair in pairs:
            for sock in pair:
                _reset(sock)
        return len(pairs)

    def block(self) -> None:
        self.blocked = True
        self.cut()

    def unblock(self) -> None:
        self.blocked = False

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.cut()


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), waking any thread blocked reading it."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


def relayed_kubeconfig(kubeconfig: Path, relay: TcpRelay, path: Path) -> Path:
    """A copy of C{kubeconfig} whose server is the relay (same CA and client credentials)."""
    document = json.loads(Path(kubeconfig).read_text())  # cluster.py writes JSON
    for entry in document["clusters"]:
        entry["cluster"]["server"] = f"https://{relay.host}:{relay.port}"
    path.write_text(json.dumps(document, indent=2))
    path.chmod(0o600)
    return path
