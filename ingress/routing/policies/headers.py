# -*- test-case-name: tests.unit.test_annotation_policies -*-
"""
Header fields a route sets on the request its upstream receives, or on the response its client receives.

A set field replaces every field of that name (nginx's C{proxy_set_header} and
C{more_set_headers}, which ingress-nginx's C{proxy-set-headers} and
C{add-headers} ConfigMaps compile to; Gateway API's header modifiers will
compile to the same value).  The lines and the pattern that removes the old
fields are made once, when the table is built; a value with nginx variables
(C{t=${msec}}, ingress-nginx's custom-headers example) is kept as a template
and filled in per request (L{ingress.proxy.request.variables}).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ingress.routing.policies.variables import Part

_NAME = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")


@dataclass(frozen=True, slots=True)
class HeaderChanges:
    """C{lines}: the fields to add, CRLF-terminated; C{drop}: removes the fields they replace."""

    fields: tuple[tuple[str, str], ...]
    lines: bytes
    drop: re.Pattern[bytes]
    added: tuple[tuple[str, str], ...] = ()  # fields added beside the client's of the same name (Gateway API "add")
    removed: tuple[str, ...] = ()  # fields dropped (Gateway API "remove")
    templates: tuple[tuple[str, tuple[Part, ...]], ...] = ()  # set fields whose values have nginx variables
    texts: tuple[tuple[str, str], ...] = ()  # the templates as written, for /debug/routes

    def to_json(self) -> dict[str, str]:
        """For /debug/routes: set fields by name, added ones as "+name", removed ones as "-name"."""
        return dict(self.fields) | dict(self.texts) | {f"+{name}": value for name, value in self.added} | {f"-{name}": "" for name in self.removed}


def header_changes(
    fields: Iterable[tuple[str, str]],
    added: Iterable[tuple[str, str]] = (),
    removed: Iterable[str] = (),
    templates: Iterable[tuple[str, str, tuple[Part, ...]]] = (),
) -> HeaderChanges:
    """
    The changes that set C{fields}, add C{added} and drop C{removed} (names as RFC 9110 tokens, values
    without line breaks; checked by the caller).  An added field is a field line of its own, which
    means the same as its value appended to the others' with a comma (RFC 9110 5.3).  C{templates}
    are set fields (name, text, parts) whose values are filled in per request.
    """
    pairs, extra, gone = tuple(sorted(fields)), tuple(added), tuple(removed)
    variable = tuple(sorted(templates))
    names = sorted({name.lower() for name, _ in pairs} | {name.lower() for name in gone} | {name.lower() for name, _, _ in variable})
    drop = re.compile(rb"^(?:%s):.*\n" % b"|".join(re.escape(n.encode("latin-1")) for n in names) if names else rb"(?!)", re.MULTILINE | re.IGNORECASE)
    lines = b"".join(b"%s: %s\r\n" % (name.encode("latin-1"), value.encode("latin-1")) for name, value in pairs + extra)
    return HeaderChanges(pairs, lines, drop, extra, gone, tuple((n, parts) for n, _, parts in variable), tuple((n, text) for n, text, _ in variable))


def merged(base: HeaderChanges | None, over: HeaderChanges | None) -> HeaderChanges | None:
    """C{base}'s set fields with C{over}'s on top (a field of C{over} replaces C{base}'s of the same name)."""
    if base is None or over is None:
        return over if base is None else base
    names = {name.lower() for name, _ in over.fields} | {name.lower() for name, _ in over.texts}
    fields = [pair for pair in base.fields if pair[0].lower() not in names] + list(over.fields)
    texts = dict(base.texts)
    templates = [(name, texts[name], parts) for name, parts in base.templates if name.lower() not in names]
    templates += [(name, text, parts) for (name, parts), (_, text) in zip(over.templates, over.texts, strict=True)]
    return header_changes(fields, base.added + over.added, base.removed + over.removed, templates)


def valid_field(name: str, value: str) -> bool:
    """A field name that is a token, and a value without control characters."""
    return _NAME.fullmatch(name) is not None and not any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in value)
