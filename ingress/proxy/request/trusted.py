# -*- test-case-name: tests.proxy.test_trusted_forwarding -*-
"""
The forwarding of one request from a peer the routing table trusts (L{ForwardedTrust}).

Only a table built with the ingress-nginx ConfigMap's C{use-forwarded-headers}
or C{enable-real-ip} has a trust, so an edge without one never pays for this.
Header values that are not what they claim to be (a proto other than http or
https, a host that is no host, a port that is no number) are ignored, and the
request's own value is used.
"""

from __future__ import annotations

from ingress.proxy.message import h1
from ingress.proxy.request.forwarding import ForwardedFor, scheme_fields
from ingress.routing.policies.trust import ForwardedTrust

_PROTOS = {b"http": b"http", b"https": b"https"}


def trusted_forwarding(trust: ForwardedTrust, peer: ForwardedFor, request: h1.Head, port: bytes) -> ForwardedFor:
    """What this request forwards: C{peer} (the connection's) unless the peer is a trusted proxy."""
    if not trust.trusts(peer.ip):
        return peer
    values: dict[bytes, bytes] = {}
    hops: list[str] = []
    for _, name, value in h1.split_fields(request.block):
        if name == trust.header:
            hops.extend(hop.strip() for hop in value.decode("latin-1").split(",") if hop.strip())
        elif name in (b"x-forwarded-proto", b"x-forwarded-host", b"x-forwarded-port"):
            values.setdefault(name, value)
    client = trust.client(peer.ip, hops)
    scheme, host = peer.scheme, ""
    if trust.pass_headers:
        scheme = _PROTOS.get(values.get(b"x-forwarded-proto", b"").lower(), scheme)
        forwarded_host = values.get(b"x-forwarded-host", b"")
        host = forwarded_host.decode("latin-1") if forwarded_host and h1.valid_host(forwarded_host) else ""
        forwarded_port = values.get(b"x-forwarded-port", b"")
        port = forwarded_port if forwarded_port.isdigit() else port
    chain = ", ".join([*hops, peer.ip]) if trust.append and trust.pass_headers and hops else client
    fields = b"X-Forwarded-For: %s\r\nX-Real-IP: %s\r\nX-Forwarded-Proto: %s\r\nX-Forwarded-Port: %s\r\n" % (
        chain.encode("latin-1"),
        client.encode("latin-1"),
        scheme,
        port,
    )
    return ForwardedFor(client, fields + scheme_fields(scheme), scheme, host)
