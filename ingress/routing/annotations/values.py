# -*- test-case-name: tests.unit.test_annotations -*-
"""
Readers of annotation values: text in, a value out, or L{InvalidValue} saying why not.

The formats are ingress-nginx's (its annotations page and its validators):
booleans as Go's C{strconv.ParseBool} reads them, timeouts as whole seconds,
sizes as nginx sizes (C{8k}, C{1m}, C{0} for no limit), paths and URLs from the
character sets ingress-nginx accepts (no spaces, quotes or nginx variables).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from urllib.parse import urlsplit

from OpenSSL import SSL

from ingress.routing.policies.hashing import parse_template
from ingress.routing.policies.retry import CONDITIONS


class InvalidValue(ValueError):
    """An annotation value that cannot be read; the message says what it must be."""


_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_SIZE = re.compile(r"(\d+)([bkmg]?)", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
# ingress-nginx's RegexPathWithCapture: a path made of these, with $1..$9 references.
_PATH = re.compile(r"/?[-._~a-zA-Z0-9/:$]*")
# ingress-nginx's URLIsValidRegex: URLs of these characters only (no variables, no spaces).
_URL = re.compile(r"[-._~a-zA-Z0-9/:,?&=]*")
_HOST = re.compile(r"[-._a-zA-Z0-9]+(:[0-9]{1,5})?")
_TOKEN = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")  # RFC 9110 5.6.2: a field or cookie name


def boolean(value: str) -> bool:
    """C{true}/C{false} as Go's strconv.ParseBool reads them (ingress-nginx's parser)."""
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidValue("must be true or false")


def seconds(value: str) -> float:
    """A timeout: whole seconds, more than 0 ("unitless and in seconds", ingress-nginx's Custom timeouts)."""
    if not value.isdigit() or int(value) == 0:
        raise InvalidValue("must be a whole number of seconds, more than 0")
    return float(value)


def whole_seconds(value: str) -> int:
    """A duration in whole seconds, 0 allowed (HSTS max-age)."""
    if not value.strip().isdigit():
        raise InvalidValue("must be a whole number of seconds")
    return int(value)


def size(value: str) -> int:
    """An nginx size: bytes, or with k, m or g (1024-based); C{0} is returned as 0 (no limit)."""
    match = _SIZE.fullmatch(value.strip())
    if match is None:
        raise InvalidValue("must be a size such as 1024, 8k, 10m or 1g (0: no limit)")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


def path(value: str) -> str:
    """A path starting with "/", of the characters ingress-nginx accepts in one ($1..$9 allowed)."""
    if not value.startswith("/") or _PATH.fullmatch(value) is None:
        raise InvalidValue("must be a path starting with / of letters, digits and -._~/:$")
    return value


def redirect_url(value: str) -> str:
    """An absolute http(s) URL, or a path, made of the characters ingress-nginx accepts in one."""
    if _URL.fullmatch(value) is None or not value:
        raise InvalidValue("must be an http(s) URL or a path, of letters, digits and -._~/:,?&=")
    if value.startswith("/"):
        return value
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidValue("must be an absolute http or https URL, or a path")
    return value


def status_between(low: int, high: int) -> Callable[[str], int]:
    """A reader of a status code from C{low} to C{high}."""

    def status(value: str) -> int:
        if not value.isdigit() or not low <= int(value) <= high:
            raise InvalidValue(f"must be a status code from {low} to {high}")
        return int(value)

    return status


def status_in(*codes: int) -> Callable[[str], int]:
    """A reader of one of the status C{codes}."""

    def status(value: str) -> int:
        if not value.isdigit() or int(value) not in codes:
            raise InvalidValue("must be one of " + ", ".join(map(str, codes)))
        return int(value)

    return status


def error_codes(value: str) -> frozenset[int]:
    """custom-http-errors: comma-separated statuses from 400 to 599 (ingress-nginx's validator: C{^(?:[4,5]\\d{2},?)*$})."""
    codes = [code.strip() for code in value.split(",") if code.strip()]
    if not codes or not all(code.isdigit() and 400 <= int(code) <= 599 for code in codes):
        raise InvalidValue("must be status codes from 400 to 599, separated by commas")
    return frozenset(int(code) for code in codes)


def service_name(value: str) -> str:
    """A Service of the Ingress's namespace (a DNS-1035 label)."""
    if len(value) > 63 or re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", value) is None:
        raise InvalidValue("must be the name of a Service in the Ingress's namespace")
    return value


def host(value: str) -> str:
    """A host name, optionally with a port: what an upstream's Host field may say."""
    if _HOST.fullmatch(value) is None:
        raise InvalidValue("must be a host name, optionally with :port")
    return value


def token(value: str) -> str:
    """A header field or cookie name (an RFC 9110 token)."""
    if _TOKEN.fullmatch(value) is None:
        raise InvalidValue("must be a header or cookie name (letters, digits and !#$%&'*+-.^_`|~)")
    return value


def whole_number(value: str) -> int:
    """An integer from 0."""
    if not value.isdigit():
        raise InvalidValue("must be a whole number")
    return int(value)


def positive_number(value: str) -> int:
    """An integer from 1."""
    if not value.isdigit() or int(value) == 0:
        raise InvalidValue("must be a whole number, more than 0")
    return int(value)


def pattern(value: str) -> re.Pattern[bytes]:
    """A regular expression, searched for in a header value (ingress-nginx: canary-by-header-pattern)."""
    try:
        return re.compile(text(value).encode("latin-1"))
    except (re.error, UnicodeEncodeError) as error:
        raise InvalidValue(f"must be a regular expression ({error})") from None


def one_of(*choices: str) -> Callable[[str], str]:
    """A reader of one of C{choices}, as written."""

    def choice(value: str) -> str:
        if value not in choices:
            raise InvalidValue("must be one of " + ", ".join(choices))
        return value

    return choice


BACKEND_PROTOCOLS = ("HTTP", "HTTPS", "GRPC", "GRPCS", "H2C")
HTTP2_BACKENDS = frozenset({"GRPC", "GRPCS", "H2C"})  # HTTP/2 to the endpoints: h2c, or h2 over TLS (GRPCS)
TLS_BACKENDS = frozenset({"HTTPS", "GRPCS"})


def backend_protocol(value: str) -> str:
    """One of L{BACKEND_PROTOCOLS}, any case (ingress-nginx "Backend Protocol"; H2C is twingress's)."""
    upper = value.strip().upper()
    if upper in BACKEND_PROTOCOLS:
        return upper
    if upper in ("AUTO_HTTP", "FCGI", "AJP"):
        raise InvalidValue("is not supported by twingress (HTTP, HTTPS, GRPC, GRPCS and H2C are)")
    raise InvalidValue("must be one of " + ", ".join(BACKEND_PROTOCOLS))


def on_off(value: str) -> bool:
    """nginx's on/off."""
    if value not in ("on", "off"):
        raise InvalidValue("must be on or off")
    return value == "on"


def namespaced_name(value: str) -> str:
    """A Secret reference: NAME or NAMESPACE/NAME."""
    if re.fullmatch(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-.a-z0-9]*[a-z0-9])?", value) is None:
        raise InvalidValue("must be NAME or NAMESPACE/NAME of a Secret")
    return value


def tls_protocols(value: str) -> tuple[str, ...]:
    """Space-separated TLS versions; only TLSv1.2 and TLSv1.3 (the older ones are broken)."""
    versions = tuple(value.split())
    if not versions or any(v not in ("TLSv1.2", "TLSv1.3") for v in versions):
        raise InvalidValue("must be TLSv1.2, TLSv1.3 or both, separated by spaces")
    return versions


def ciphers(value: str) -> str:
    """An OpenSSL cipher list that selects at least one cipher (OpenSSL itself is asked; no I/O)."""
    if re.fullmatch(r"[-A-Za-z0-9_:+!@=.]+", value) is None:
        raise InvalidValue("must be an OpenSSL cipher list")
    try:
        SSL.Context(SSL.TLS_METHOD).set_cipher_list(value.encode("ascii"))
    except SSL.Error:
        raise InvalidValue("selects no cipher OpenSSL knows") from None
    return value


def hash_template(value: str) -> object:
    """An upstream-hash-by key: text and the variables of L{ingress.routing.policies.hashing}."""
    try:
        return parse_template(text(value))
    except ValueError as error:
        raise InvalidValue(str(error)) from None


def host_list(value: str) -> tuple[str, ...]:
    """Comma-separated host names (server-alias)."""
    hosts = tuple(h.strip().lower() for h in value.split(",") if h.strip())
    if not hosts or any(re.fullmatch(r"(\*\.)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?", h) is None for h in hosts):
        raise InvalidValue("must be host names separated by commas")
    return hosts


def networks(value: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Comma-separated CIDRs or addresses, IPv4 or IPv6 (proxy-real-ip-cidr, source ranges)."""
    try:
        found = tuple(ipaddress.ip_network(item.strip(), strict=False) for item in value.split(",") if item.strip())
    except ValueError as error:
        raise InvalidValue(f"must be CIDRs separated by commas ({error})") from None
    if not found:
        raise InvalidValue("must be CIDRs separated by commas")
    return found


_ORIGIN_RE = re.compile(r"[a-z][a-z0-9+.-]*://(\*\.)?[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?", re.IGNORECASE)
_METHODS_RE = re.compile(r"[A-Za-z]+(\s*,\s*[A-Za-z]+)*")
_HEADERS_RE = re.compile(r"(\*|[A-Za-z0-9_-]+)(\s*,\s*(\*|[A-Za-z0-9_-]+))*")


def origins(value: str) -> tuple[str, ...]:
    """cors-allow-origin: "*", or origins (protocol://host[:port], one "*." label allowed) separated by commas."""
    found = tuple(item.strip() for item in value.split(",") if item.strip())
    if found == ("*",):
        return found
    if not found or any(_ORIGIN_RE.fullmatch(origin) is None for origin in found):
        raise InvalidValue("must be * or origins like https://example.com or https://*.example.com:8443, separated by commas")
    return found


def methods(value: str) -> str:
    """cors-allow-methods: method names separated by commas."""
    if _METHODS_RE.fullmatch(value.strip()) is None:
        raise InvalidValue("must be HTTP methods separated by commas")
    return value.strip()


def field_names(value: str) -> tuple[str, ...]:
    """global-allowed-response-headers: header field names separated by commas."""
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    if not all(_FIELD_NAME_RE.fullmatch(name) for name in names):
        raise InvalidValue("must be header field names separated by commas")
    return names


def header_names(value: str) -> str:
    """cors-allow-headers, cors-expose-headers: field names (or *) separated by commas."""
    if _HEADERS_RE.fullmatch(value.strip()) is None:
        raise InvalidValue("must be header names separated by commas")
    return value.strip()


def next_upstream(value: str) -> tuple[str, ...]:
    """proxy-next-upstream: space-separated nginx conditions (error timeout http_502 ... off)."""
    words = tuple(value.split())
    if not words or any(word not in CONDITIONS for word in words):
        raise InvalidValue("must be words among " + " ".join(sorted(CONDITIONS)))
    return words


_FIELD_NAME_RE = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")


def text(value: str) -> str:
    """A free value without line breaks (they would split the header it goes into)."""
    if "\r" in value or "\n" in value or "\x00" in value:
        raise InvalidValue("must not contain line breaks")
    return value
