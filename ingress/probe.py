"""
C{python -m ingress.probe SOCKET PATH}: the kubelet's exec probe of an admin listener on a unix socket
(C{--admin unix:SOCKET}).  Exit status 0 when C{GET PATH} answers 200; 1 otherwise, with one line on stderr.

Why exec and a unix socket: with hostNetwork, two pods of a node (the old one and its surge successor
during an upgrade) share the node's addresses, so a TCP admin port answers for whichever pod holds it,
and the new pod's probe could pass on the old one's behalf; a socket in the pod's own emptyDir is that
pod's.  Standard library only, and nothing of twingress imported: it runs every few seconds, and its
start is most of its cost.
"""

from __future__ import annotations

import socket
import sys

TIMEOUT = 2.0  # under the probes' timeoutSeconds
_MOST = 65536


def probe(path: str, resource: str, timeout: float = TIMEOUT) -> tuple[bool, str]:
    """Whether C{GET resource} over the unix socket C{path} answers 200, and the line that says what was answered."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(timeout)
            connection.connect(path)
            connection.sendall(f"GET {resource} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
            answer = b""
            while len(answer) < _MOST and (chunk := connection.recv(_MOST)):
                answer += chunk
    except OSError as error:
        return False, f"{path}: {error.strerror or error}"
    head, _, body = answer.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        return False, f"{path}: not an HTTP answer: {status[:80]!r}"
    return parts[1] == "200", f"{resource}: {status} {body.decode('utf-8', 'replace').strip()[:200]}"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m ingress.probe SOCKET PATH (e.g. /run/twingress/admin.sock /readyz)", file=sys.stderr)
        return 2
    ok, line = probe(argv[0], argv[1])
    if not ok:
        print(f"probe: {line}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
