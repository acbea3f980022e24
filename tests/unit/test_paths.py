"""
Tests for L{ingress.routing.paths}: a path in the form routing matches it.

The rules are nginx's (docs, "location": "matching is performed against a
normalized URI, after decoding the text encoded in the '%XX' form, resolving
references to relative path components '.' and '..', and possible compression
of two or more adjacent slashes into a single slash"), with a path above the
root refused (nginx answers 400).
"""

from __future__ import annotations

import pytest

from ingress.routing.paths import PathError, routing_path


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        # already normal: returned as it is
        ("/", "/"),
        ("/admin", "/admin"),
        ("/admin/", "/admin/"),
        ("/a.b/c..d/.e", "/a.b/c..d/.e"),  # dots inside a segment are not dot segments
        # percent-decoding (once)
        ("/%61dmin", "/admin"),
        ("/%41%42", "/AB"),
        ("/a%2fb", "/a/b"),  # %2F is a slash for matching
        ("/%2561", "/%61"),  # decoded once: %25 is "%", the rest stays text
        ("/caf%C3%A9", "/caf\xc3\xa9"),  # bytes kept one to one (latin-1), as the undecoded path is
        ("/a%20b", "/a b"),
        # dot segments
        ("/./admin", "/admin"),
        ("/x/../admin", "/admin"),
        ("/a/b/../../c", "/c"),
        ("/a/./b/.", "/a/b/"),
        ("/a/b/..", "/a/"),
        ("/a/..", "/"),
        ("/x/%2e%2e/admin", "/admin"),  # encoded dots are dots once decoded
        ("/x/%2E./admin", "/admin"),
        ("/x/..%2fadmin", "/admin"),
        # repeated slashes
        ("//admin", "/admin"),
        ("/a///b//", "/a/b/"),
        ("//", "/"),
        ("/%2F%2Fa", "/a"),
    ],
)
def test_normal_forms(raw: str, normal: str) -> None:
    assert routing_path(raw) == normal


@pytest.mark.parametrize(
    "raw",
    ["/..", "/../a", "/a/../..", "/a/../../b", "/%2e%2e", "/x/%2e%2e/%2E%2E/y", "/..%2f..%2fetc"],
)
def test_above_the_root_is_an_error(raw: str) -> None:
    with pytest.raises(PathError, match="above the root"):
        routing_path(raw)


@pytest.mark.parametrize("raw", ["/%", "/a%2", "/%g0", "/%zz", "/%%41"])
def test_invalid_percent_encoding_is_an_error(raw: str) -> None:
    with pytest.raises(PathError, match="percent-encoding"):
        routing_path(raw)


@pytest.mark.parametrize("raw", ["/%00", "/a%00b"])
def test_an_encoded_nul_is_an_error(raw: str) -> None:
    with pytest.raises(PathError, match="NUL"):
        routing_path(raw)


def test_a_normal_path_is_returned_unchanged_not_rebuilt() -> None:
    path = "/api/v1/users"
    assert routing_path(path) is path  # the fast path: no work for the common case
