# -*- test-case-name: tests.unit.test_annotation_policies -*-
"""
Header fields a route sets on the request its upstream receives, or on the response its client receives.

A set field replaces every field of that name (nginx's C{proxy_set_header} and
C{more_set_headers}, which ingress-nginx's C{proxy-set-headers} and
C{add-headers} ConfigMaps compile to; Gateway API's header modifiers will
compile to the same value).  The lines and the pattern that removes the old
fields are made once, when the table is built.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_NAME = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")


@dataclass(frozen=True, slots=True)
class HeaderChanges:
    """C{lines}: the fields to add, CRLF-terminated; C{drop}: removes the fields they replace."""

    fields: tuple[tuple[str, str], ...]
    lines: bytes
    drop: re.Pattern[bytes]
    added: tuple[tuple[str, str], ...] = ()  # fields added beside the client's of the same name (Gateway API "add")
    removed: tuple[str, ...] = ()  # fields dropped (Gateway API "remove")

    def to_json(self) -> dict[str, str]:
        """For /debug/routes: set fields by name, added ones as "+name", removed ones as "-name"."""
        return dict(self.fields) | {f"+{name}": value for name, value in self.added} | {f"-{name}": "" for name in self.removed}


def header_changes(fields: Iterable[tuple[str, str]], added: Iterable[tuple[str, str]] = (), removed: Iterable[str] = ()) -> HeaderChanges:
    """
    The changes that set C{fields}, add C{added} and drop C{removed} (names as RFC 9110 tokens, values
    without line breaks; checked by the caller).  An added field is a field line of its own, which
    means the same as its value appended to the others' with a comma (RFC 9110 5.3).
    """
    pairs, extra, gone = tuple(sorted(fields)), tuple(added), tuple(removed)
    names = sorted({name.lower() for name, _ in pairs} | {name.lower() for name in gone})
    drop = re.compile(rb"^(?:%s):.*\n" % b"|".join(re.escape(n.encode("latin-1")) for n in names) if names else rb"(?!)", re.MULTILINE | re.IGNORECASE)
    lines = b"".join(b"%s: %s\r\n" % (name.encode("latin-1"), value.encode("latin-1")) for name, value in pairs + extra)
    return HeaderChanges(pairs, lines, drop, extra, gone)


def valid_field(name: str, value: str) -> bool:
    """A field name that is a token, and a value without control characters."""
    return _NAME.fullmatch(name) is not None and not any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in value)
