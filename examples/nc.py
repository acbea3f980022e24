"""
A minimal netcat for the stream example's hints: standard library only, so any Python 3 runs it
(nc and socat are not in the prerequisites).  Not part of the product.

C{echo hello | python3 examples/nc.py 127.0.0.1 9700} connects over TCP, sends its standard
input, ends its side (a half-close, as C{nc -q} does) and prints what comes back until the other
side closes.  With C{-u} it sends standard input as one UDP datagram and prints the replies that
arrive until C{--wait} seconds pass without one (C{nc -u -w}).  An error is one line on stderr and
exit 1.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Optional


def tcp(host: str, port: int, data: bytes, timeout: float) -> bytes:
    """Send C{data}, half-close, read to the end."""
    with socket.create_connection((host, port), timeout=timeout) as connection:
        connection.sendall(data)
        connection.shutdown(socket.SHUT_WR)
        received = b""
        while block := connection.recv(65536):
            received += block
        return received


def udp(host: str, port: int, data: bytes, wait: float) -> bytes:
    """Send C{data} as one datagram; the replies until C{wait} seconds pass without one."""
    address = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    with socket.socket(address[0], socket.SOCK_DGRAM) as sock:
        sock.settimeout(wait)
        sock.connect(address[4])
        sock.send(data)
        received = b""
        while True:
            try:
                received += sock.recv(65535)
            except TimeoutError:
                return received


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="examples/nc.py", description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("-u", "--udp", action="store_true", help="UDP instead of TCP")
    parser.add_argument("-w", "--wait", type=float, default=1.0, help="UDP: seconds to wait for another reply (default 1)")
    parser.add_argument("--timeout", type=float, default=10.0, help="TCP: seconds to connect and between reads (default 10)")
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    options = parser.parse_args(argv)
    data = sys.stdin.buffer.read()
    try:
        if options.udp:
            received = udp(options.host, options.port, data, options.wait)
        else:
            received = tcp(options.host, options.port, data, options.timeout)
    except OSError as error:
        print(f"examples/nc.py: {options.host}:{options.port}: {error.strerror or error}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(received)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
