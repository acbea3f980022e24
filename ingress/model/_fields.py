# -*- test-case-name: tests.unit.test_parse -*-
"""
Typed field access and the API server's value checks, for L{ingress.model.parse}.

Manifests from a directory never went through an API server, and API JSON is
only dicts, lists and scalars of whatever type the author wrote; so every read
of a field goes through these helpers, which turn a missing, mistyped or
malformed value into a L{ParseError} naming the field, never a TypeError or a
wrong value reaching routing.  The name, host, path and address checks copy
k8s.io/apimachinery util/validation and the networking validation, so a file
is rejected where the API server would have rejected it.

Kept apart from the per-kind parsers (L{ingress.model._kinds}) because these
know nothing about any kind: they are the vocabulary those parsers are written
in.  L{ParseError} is defined here because these helpers raise it.  Private:
import L{ParseError} and L{parse_host} from L{ingress.model.parse}, which re-exports
them.  Pure: no I/O, no Twisted.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ingress.model import PATH_IMPLEMENTATION_SPECIFIC

# The API server's checks (k8s.io/apimachinery util/validation, networking validation).
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_DNS_1123_LABEL = re.compile(_DNS_LABEL)
_DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_IANA_SVC_NAME = re.compile(r"(?=.{1,15}$)(?=.*[a-z])(?!-)(?!.*--)[-a-z0-9]+(?<!-)")
_SLOPPY_IPV4 = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")
_INVALID_PATH_SEQUENCES = ("//", "/./", "/../", "%2f", "%2F")
_INVALID_PATH_SUFFIXES = ("/..", "/.")


class ParseError(ValueError):
    """
    An object the API server would reject, or that routing cannot use.

    C{reason} is a short CamelCase word ("Invalid", "Required") for metrics and
    conditions; C{message} names the field, like the API server's own errors.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


def _invalid(path: str, value: Any, why: str) -> ParseError:
    return ParseError("Invalid", f"{path}: Invalid value: {value!r}: {why}")


def _required(path: str, why: str = "Required value") -> ParseError:
    return ParseError("Required", f"{path}: {why}")


# -- typed field access: every wrong type becomes a ParseError, never a TypeError


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _invalid(path, value, "must be an object")
    return value


def _list(value: Any, path: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise _invalid(path, value, "must be a list")
    return value


def _str(value: Any, path: str, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise _invalid(path, value, "must be a string")
    return value


def _int(value: Any, path: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(path, value, "must be an integer")
    return value


def _port_number(value: Any, path: str) -> int:
    number = _int(value, path)
    if number is None:
        raise _required(path)
    if not 1 <= number <= 65535:
        raise _invalid(path, number, "must be between 1 and 65535, inclusive")
    return number


def _string_map(value: Any, path: str) -> dict[str, str]:
    """Labels and annotations: the API only stores strings (YAML `true` unquoted is an error)."""
    return {_str(k, path): _str(v, f"{path}[{k}]") for k, v in _mapping(value, path).items()}


# -- names, hosts, addresses and paths


_IP_CHARACTERS = frozenset("0123456789abcdefABCDEF.:")  # all an IPv4 or IPv6 address is made of (a zone after "%" aside)


def _check_dns_subdomain(value: str, path: str) -> None:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise _invalid(path, value, "must be a lower-case RFC 1123 subdomain")


def _is_ip(host: str) -> bool:
    """Like the API server's sloppy IP parse: leading zeros still make an IPv4 address."""
    if "%" not in host and not _IP_CHARACTERS.issuperset(host):
        return False  # a letter past "f" (most names): no address, and no parse that raises twice to say so
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return _SLOPPY_IPV4.fullmatch(host) is not None
    return True


def parse_host(value: Any, path: str, *, allow_ip: bool = False) -> str:
    """
    Lower-case, trailing dot stripped, then validated: the key form routing and SNI use.

    A wildcard is allowed only as one whole leading label ("*.example.com").
    """
    host = _str(value, path).rstrip(".").lower()
    if not host:
        return ""
    if not allow_ip and _is_ip(host):
        raise _invalid(path, host, "must be a DNS name, not an IP address")
    name = host[2:] if host.startswith("*.") else host
    if "*" in name:
        raise _invalid(path, host, "a wildcard must be the whole first label ('*.example.com')")
    _check_dns_subdomain(name, path)
    return host


def _parse_address(value: Any, address_type: str, path: str) -> str:
    """IPs are checked and written canonically, so that the same endpoint deduplicates across slices."""
    text = _str(value, path)
    if address_type == "FQDN":
        return text
    try:
        address = ipaddress.IPv4Address(text) if address_type == "IPv4" else ipaddress.IPv6Address(text)
    except ValueError:
        raise _invalid(path, text, f"must be a valid {address_type} address") from None
    return str(address)


def _parse_path(value: Any, path_type: str, path: str) -> str:
    """Exact and Prefix paths must be absolute and clean; ImplementationSpecific may be empty."""
    text = _str(value, path)
    if (text or path_type != PATH_IMPLEMENTATION_SPECIFIC) and not text.startswith("/"):
        raise _invalid(path, text, "must be an absolute path")
    if path_type == PATH_IMPLEMENTATION_SPECIFIC:
        return text
    for sequence in _INVALID_PATH_SEQUENCES:
        if sequence in text:
            raise _invalid(path, text, f"must not contain {sequence!r}")
    for suffix in _INVALID_PATH_SUFFIXES:
        if text.endswith(suffix):
            raise _invalid(path, text, f"cannot end with {suffix!r}")
    return text


# -- metadata


def _timestamp(value: Any, path: str) -> str:
    """RFC 3339 text; YAML loaders turn unquoted timestamps into datetimes, so accept those too."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.UTC)
        return str(value.strftime("%Y-%m-%dT%H:%M:%SZ"))  # value came in as Any: the datetime check does not type strftime
    return _str(value, path)
