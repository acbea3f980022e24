# -*- test-case-name: tests.proxy.test_retry -*-
"""
Whether a failed attempt is passed to another endpoint.

Without a policy, twingress's own rule: a connection that could not be made is
tried once more on another endpoint, and a pooled connection closed before it
answered is tried again for an idempotent request without a body.  With a
route's L{Retry} (ingress-nginx's C{proxy-next-upstream}), nginx's rules: the
failure must be one it names; a request that reached an endpoint is passed on
only if its method is idempotent (or with C{non_idempotent}); never after the
response has begun; a Gateway API retry (C{same_endpoint}) may go back to the endpoint that
failed when there is no other.  Request bodies stream through twingress, so a request
with a body is passed on only while none of it reached an endpoint (a failed
connection).
"""

from __future__ import annotations

from typing import Optional

from ingress.proxy.message import h1
from ingress.routing.policies.retry import Retry

IDEMPOTENT = frozenset({b"GET", b"HEAD", b"OPTIONS", b"PUT", b"DELETE", b"TRACE"})


def may_retry(policy: Optional[Retry], cause: str, request: h1.Head, attempts: int, endpoints: int, reused: bool, elapsed: float) -> bool:
    """
    C{cause}: "error", "timeout", "invalid_header" or "http_NNN"; a connect failure is "error" or
    "timeout" with C{attempts} counting it, and nothing of the request was sent then.
    """
    sent = cause != "connect-error" and cause != "connect-timeout"
    has_body = request.framing.chunked or bool(request.framing.content_length)
    if policy is None:
        if not sent:
            return attempts < 2 and endpoints > 1
        return cause == "error" and attempts < 2 and request.method in IDEMPOTENT and not has_body and (reused or endpoints > 1)
    word = cause.removeprefix("connect-")
    if word.startswith("http_"):
        if int(word[5:]) not in policy.statuses:
            return False
    elif word not in policy.on:
        return False
    if policy.tries and attempts >= policy.tries:
        return False
    if not reused and attempts >= endpoints and not policy.same_endpoint:
        return False
    if policy.timeout and elapsed >= policy.timeout:
        return False
    if sent and (has_body or (request.method not in IDEMPOTENT and not policy.non_idempotent)):
        return False
    return True
