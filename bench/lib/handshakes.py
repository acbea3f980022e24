"""
Full-TLS-handshake load generator with SNI: the stand-in for C{openssl s_time -new}.

Debian's OpenSSL 3.0 C{s_time} has no C{-servername} (it fails with "Unknown option:
-servername") and sends no SNI, so it cannot choose the certificate under test nor
exercise SNI selection.  This does the same thing as C{s_time -new} (connect, full
handshake, close; never a session to resume) with the SNI name we need, in several
processes so that one slow round trip does not leave the server idle.

Each connection is closed with SO_LINGER 0 (an RST, as C{s_time} effectively does by
closing with the server's session tickets unread), so tens of thousands of handshakes
leave no TIME_WAIT sockets to exhaust the ephemeral ports.

Run (normally by the tls scenario, L{measure}, pinned with taskset)::

    python -m bench.lib.handshakes --port 8443 --sni bench.local --seconds 10 --clients 4

It prints one JSON object: handshakes, seconds, rate, errors (with samples), and what
the first handshake of the first client negotiated (version, cipher, peer certificate
SHA-256, session reused).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import socket
import ssl
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any, Optional

VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
_LINGER_RST = struct.pack("ii", 1, 0)


def client_context(version: Optional[str]) -> ssl.SSLContext:
    """No verification (self-signed), no session reuse: every handshake is a full one."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.options |= ssl.OP_NO_TICKET
    if version:
        ctx.minimum_version = ctx.maximum_version = VERSIONS[version]
    return ctx


def handshake(ctx: ssl.SSLContext, port: int, sni: str, timeout: float = 5.0) -> ssl.SSLSocket:
    """One TCP connection and one full handshake to 127.0.0.1:port; the caller closes it."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    try:
        return ctx.wrap_socket(raw, server_hostname=sni)
    except BaseException:
        raw.close()
        raise


def describe(conn: ssl.SSLSocket) -> dict[str, Any]:
    """What a handshake negotiated, and which certificate the server sent (SHA-256 of its DER)."""
    der = conn.getpeercert(binary_form=True) or b""
    return {"version": conn.version(), "cipher": (conn.cipher() or ("?",))[0],
            "cert_sha256": hashlib.sha256(der).hexdigest(), "session_reused": conn.session_reused}


def _worker(index: int, port: int, sni: str, seconds: float, version: Optional[str],
            start_at: float, out: Any) -> None:
    ctx = client_context(version)
    done = errors = 0
    samples: list[str] = []
    first: Optional[dict[str, Any]] = None
    while time.time() < start_at:
        time.sleep(0.001)
    began = time.monotonic()
    deadline = began + seconds
    while time.monotonic() < deadline:
        try:
            conn = handshake(ctx, port, sni)
        except (OSError, ssl.SSLError) as e:
            errors += 1
            if len(samples) < 5:
                samples.append(f"{type(e).__name__}: {e}")
            continue
        if first is None and index == 0:
            first = describe(conn)
        elif conn.session_reused:  # never expected: no session is ever offered
            errors += 1
            if len(samples) < 5:
                samples.append("a session was resumed")
        conn.close()
        done += 1
    out.put({"handshakes": done, "errors": errors, "samples": samples, "first": first,
             "seconds": time.monotonic() - began})


def run(port: int, sni: str, seconds: float, clients: int, version: Optional[str]) -> dict[str, Any]:
    """C{clients} processes doing sequential full handshakes for C{seconds}; the totals."""
    mp = multiprocessing.get_context("fork")
    out = mp.Queue()
    start_at = time.time() + 0.2
    workers = [mp.Process(target=_worker, args=(i, port, sni, seconds, version, start_at, out))
               for i in range(clients)]
    for w in workers:
        w.start()
    parts = [out.get(timeout=seconds + 60) for _ in workers]
    for w in workers:
        w.join(timeout=10)
    total = sum(p["handshakes"] for p in parts)
    elapsed = max(p["seconds"] for p in parts)
    return {
        "handshakes": total,
        "seconds": round(elapsed, 3),
        "rate": round(total / elapsed, 1) if elapsed else 0.0,
        "errors": sum(p["errors"] for p in parts),
        "error_samples": [s for p in parts for s in p["samples"]][:5],
        "negotiated": next((p["first"] for p in parts if p["first"]), None),
        "clients": clients,
    }


def measure(port: int, sni: str, seconds: int, clients: int, cpus: Optional[str], version: Optional[str] = None) -> dict[str, Any]:
    """L{run} in a child pinned to C{cpus} (the load's, not the bench's own CPU): its totals; L{BenchFailed} if it fails."""
    import subprocess

    from bench.lib.procs import BenchFailed, pinned
    from bench.lib.site import REPO
    argv = pinned(cpus, [sys.executable, "-m", "bench.lib.handshakes", "--port", str(port), "--sni", sni, "--seconds", str(seconds),
                         "--clients", str(clients), *(["--tls", version] if version else [])])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 90, cwd=REPO)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchFailed(f"the handshake client: {e}") from e
    if done.returncode != 0:
        raise BenchFailed(f"the handshake client failed ({done.returncode}):\n{done.stdout[-600:]}{done.stderr[-600:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description="full TLS handshakes/s with SNI (s_time -new with SNI)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--sni", required=True)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--tls", choices=sorted(VERSIONS), help="pin the TLS version (default: best)")
    args = p.parse_args(argv)
    print(json.dumps(run(args.port, args.sni, args.seconds, args.clients, args.tls)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
