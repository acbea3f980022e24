# -*- test-case-name: tests.proxy.test_external_auth -*-
"""
Asking a route's auth service whether a request may pass (C{auth-url}), as nginx's auth_request does.

The question is the request's head without its body, sent as ingress-nginx's auth
location sends it: the client's fields (hop-by-hop ones, Content-Length and
X-Forwarded-Proto dropped), the service's host as Host, and X-Original-URL,
X-Original-Method, X-Sent-From, X-Real-IP, X-Forwarded-For and X-Auth-Request-Redirect;
with C{auth-method} also X-Original-URI and X-Scheme.  The method is GET unless
C{auth-method} says otherwise: nginx's subrequests are GETs.

The answer is read as nginx's auth_request module reads it: 2xx lets the request
through, 401 and 403 are the client's answer (a 401 with the service's
WWW-Authenticate, or a 302 to the sign-in URL), anything else, no answer within
the route's connect and read timeouts, or no connection at all is a 500: the
route fails closed.  Connections to the services are kept alive and shared
(Twisted's Agent with a persistent pool); certificates of https services are not
verified, as nginx's proxy_ssl_verify is off by default, but SNI is sent.
"""

from __future__ import annotations

import re
import time
from typing import Any, Optional
from urllib.parse import urlsplit

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers
from twisted.web.iweb import IPolicyForHTTPS, IResponse
from zope.interface import implementer

from ingress.proxy.message import h1
from ingress.proxy.request.backend_tls import connection_creator
from ingress.proxy.request.variables import expand
from ingress.routing.policies.backend import BackendTLS
from ingress.routing.policies.extauth import ExternalAuth

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

_REMEMBERED = 10_000  # cached answers kept (auth-cache-key)
_BODY_LIMIT = 1 << 20  # an answer's body is read (so the connection can be reused) up to this much
_NOT_PASSED = h1.HOP_BY_HOP | {
    b"host", b"content-length", b"x-forwarded-proto", b"x-original-url", b"x-original-method", b"x-sent-from",
    b"x-real-ip", b"x-forwarded-for", b"x-auth-request-redirect", b"x-original-uri", b"x-scheme",
}


class Verdict:
    """
    What the service decided: pass (C{status} 0: C{request_fields} replace the fields C{drop}
    matches on the request, C{cookies} go on the response) or answer here (C{status}, with
    C{fields}, CRLF-terminated lines); C{reason} names the denial for twingress_http_denied_total.
    """

    __slots__ = ("status", "reason", "fields", "request_fields", "drop", "cookies", "hold")

    def __init__(self, status: int = 0, reason: str = "", fields: bytes = b"", request_fields: bytes = b"", drop: Optional[re.Pattern[bytes]] = None, cookies: bytes = b"") -> None:
        self.hold: Optional[tuple[str, str]] = None  # limit-connections: (zone, address) to leave when the request ends
        self.status = status
        self.reason = reason
        self.fields = fields
        self.request_fields = request_fields
        self.drop = drop
        self.cookies = cookies

    def applied_to(self, head_bytes: bytes) -> bytes:
        """The upstream request head with the service's fields in place of the client's of those names."""
        if self.drop is None:
            return head_bytes
        first_line, _, rest = head_bytes.partition(b"\r\n")
        return b"%s\r\n%s%s" % (first_line, self.request_fields, self.drop.sub(b"", rest))


class _Answer:
    """The parts of a service's answer a verdict needs (what the cache keeps)."""

    __slots__ = ("status", "fields")

    def __init__(self, status: int, fields: dict[bytes, list[bytes]]) -> None:
        self.status = status
        self.fields = fields


class ExternalAuthChecker:
    """The listeners' shared client of auth services: one connection pool, one cache of answers."""

    def __init__(self, reactor: IReactorTime) -> None:
        self.reactor = reactor
        self._pool = HTTPConnectionPool(reactor, persistent=True)
        self._pool.maxPersistentPerHost = 32
        self._agent = Agent(reactor, contextFactory=_UnverifiedTLS(), pool=self._pool)
        self._cache: dict[tuple[str, str], tuple[float, _Answer]] = {}

    def check(self, auth: ExternalAuth, request: h1.Head, client_ip: str, scheme: bytes, timeout: float) -> Deferred[Verdict]:
        """The service's verdict on C{request} (from the cache when C{auth-cache-key} allows)."""
        key: Optional[tuple[str, str]] = None
        if auth.cache_key:
            key = (auth.source + "\0" + request.host.decode("latin-1"), expand(auth.cache_key, request, client_ip, scheme))
            cached = self._cache.get(key)
            if cached is not None and cached[0] > time.monotonic():
                return succeed(self._verdict(auth, cached[1], request, client_ip, scheme))
        url = expand(auth.url, request, client_ip, scheme)
        split = urlsplit(url)
        if split.scheme not in ("http", "https") or not split.hostname:
            log.warn("external auth {url!r} is not a URL for this request; answered 500", url=url)
            return succeed(Verdict(500, "external-auth-error"))
        asking = self._agent.request(
            (auth.method or "GET").encode("ascii"), url.encode("latin-1"), self._question(auth, request, client_ip, scheme, split.hostname)
        )
        asking.addCallback(_read_answer)
        asking.addTimeout(timeout, self.reactor)
        return asking.addCallbacks(self._answered, self._unanswered, callbackArgs=(auth, key, request, client_ip, scheme), errbackArgs=(url,))

    def _question(self, auth: ExternalAuth, request: h1.Head, client_ip: str, scheme: bytes, service_host: str) -> Headers:
        """The fields sent to the service (ingress-nginx's auth location)."""
        headers = Headers()
        own = frozenset(name.lower().encode("latin-1") for name, _ in auth.proxy_set_headers)
        for name, lower, value in h1.split_fields(request.block):
            if lower not in _NOT_PASSED and lower not in own and lower not in request.connection:
                headers.addRawHeader(name, value)
        target = expand((("var", "request_uri"),), request, client_ip, scheme)
        original = f"{scheme.decode('latin-1')}://{request.host.decode('latin-1')}{target}"
        headers.setRawHeaders(b"Host", [service_host.encode("idna")])
        headers.setRawHeaders(b"X-Original-URL", [original.encode("latin-1")])
        headers.setRawHeaders(b"X-Original-Method", [request.method])
        headers.setRawHeaders(b"X-Sent-From", [b"nginx-ingress-controller"])
        headers.setRawHeaders(b"X-Real-IP", [client_ip.encode("latin-1")])
        headers.setRawHeaders(b"X-Forwarded-For", [client_ip.encode("latin-1")])
        headers.setRawHeaders(b"X-Auth-Request-Redirect", [(auth.request_redirect or target).encode("latin-1")])
        if auth.method:
            headers.setRawHeaders(b"X-Original-URI", [target.encode("latin-1")])
            headers.setRawHeaders(b"X-Scheme", [scheme])
        for field, template in auth.proxy_set_headers:
            text = expand(template, request, client_ip, scheme)
            if text:  # nginx sends no field for an empty value
                headers.setRawHeaders(field.encode("latin-1"), [text.encode("latin-1")])
        return headers

    def _answered(self, answer: _Answer, auth: ExternalAuth, key: Optional[tuple[str, str]], request: h1.Head, client_ip: str, scheme: bytes) -> Verdict:
        if key is not None:
            seconds = auth.cache_seconds(answer.status)
            if seconds > 0:
                if len(self._cache) >= _REMEMBERED:
                    self._cache.pop(next(iter(self._cache)))  # the oldest
                self._cache[key] = (time.monotonic() + seconds, answer)
        return self._verdict(auth, answer, request, client_ip, scheme)

    def _unanswered(self, failure: Failure, url: str) -> Verdict:
        log.warn("external auth {url} gave no answer ({error}); answered 500", url=url, error=failure.getErrorMessage() or repr(failure.value))
        return Verdict(500, "external-auth-error")

    def _verdict(self, auth: ExternalAuth, answer: _Answer, request: h1.Head, client_ip: str, scheme: bytes) -> Verdict:
        cookies = b"".join(b"Set-Cookie: %s\r\n" % value for value in answer.fields.get(b"set-cookie", ()))
        status = answer.status
        if 200 <= status < 300:
            return _passed(auth, answer, cookies)
        if status == 401 and auth.signin:
            location = expand(auth.signin, request, client_ip, scheme).encode("latin-1")
            return Verdict(302, "external-auth", b"Location: %s\r\n%s" % (location, cookies))
        if status in (401, 403):
            challenge = b"".join(b"WWW-Authenticate: %s\r\n" % value for value in answer.fields.get(b"www-authenticate", ())) if status == 401 else b""
            return Verdict(status, "external-auth", challenge + (cookies if auth.always_set_cookie else b""))
        log.warn("external auth {url} answered {status}: not 2xx, 401 or 403; answered 500", url=auth.source, status=status)
        return Verdict(500, "external-auth-error")

    def stop(self) -> Deferred[None]:
        closing: Deferred[None] = self._pool.closeCachedConnections()
        return closing


def _passed(auth: ExternalAuth, answer: _Answer, cookies: bytes) -> Verdict:
    """A 2xx: the listed fields replace the client's (absent from the answer: the client's is dropped all the same)."""
    if not auth.response_headers:
        return Verdict(cookies=cookies)
    lines = []
    for name in auth.response_headers:
        value = answer.fields.get(name.lower().encode("latin-1"))
        if value:
            lines.append(b"%s: %s\r\n" % (name.encode("latin-1"), value[0]))
    return Verdict(request_fields=b"".join(lines), drop=_drop_pattern(auth.response_headers), cookies=cookies)


_DROP_PATTERNS: dict[tuple[str, ...], re.Pattern[bytes]] = {}


def _drop_pattern(names: tuple[str, ...]) -> re.Pattern[bytes]:
    pattern = _DROP_PATTERNS.get(names)
    if pattern is None:
        if len(_DROP_PATTERNS) >= 1024:
            _DROP_PATTERNS.clear()
        alternatives = b"|".join(re.escape(name.encode("latin-1")) for name in names)
        pattern = _DROP_PATTERNS[names] = re.compile(rb"^(?:%s):.*\n" % alternatives, re.MULTILINE | re.IGNORECASE)
    return pattern


def _read_answer(response: IResponse) -> Deferred[_Answer]:
    """The answer's status and fields, once its body is read (and dropped) so the connection can serve again."""
    fields = {name.lower(): list(values) for name, values in response.headers.getAllRawHeaders()}
    done: Deferred[_Answer] = Deferred()
    response.deliverBody(_Drain(done, _Answer(response.code, fields)))
    return done


class _Drain(Protocol):
    """Reads an answer's body to its end, keeping none of it."""

    def __init__(self, done: Deferred[_Answer], answer: _Answer) -> None:
        self.done = done
        self.answer = answer
        self.received = 0

    def dataReceived(self, data: bytes) -> None:
        self.received += len(data)
        if self.received > _BODY_LIMIT and self.transport is not None:
            self.transport.stopProducing()  # type: ignore[attr-defined]  # an ITransport to mypy; a response body's transport is its producer, which stops the read

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if not self.done.called:
            self.done.callback(self.answer)  # the status and fields are what count, however the body ended


@implementer(IPolicyForHTTPS)
class _UnverifiedTLS:
    """TLS to https auth services: SNI, no certificate check (nginx's proxy_ssl_verify off)."""

    def creatorForNetloc(self, hostname: bytes, port: int) -> Any:
        return connection_creator(BackendTLS(name=hostname.decode("idna"), sni=True))
