"""
Every C{# type: ignore} in ingress/ says which error it silences and why (issue 33): a bare one
silences every error on its line, now and after the next change, and a reader cannot tell
whether it still has a reason to be there.
"""

from __future__ import annotations

import re

from tests.support import ROOT

IGNORE = re.compile(r"#\s*type:\s*ignore")
# "# type: ignore[code, code]  # the reason, in words"
EXPLAINED = re.compile(r"#\s*type:\s*ignore\[[a-z][a-z-]*(?:,\s*[a-z][a-z-]*)*\]\s+#\s*\S.{10,}")


def test_every_type_ignore_has_its_code_and_its_reason() -> None:
    paths = sorted((ROOT / "ingress").rglob("*.py"))
    assert len(paths) > 100, "the scan reads ingress/"
    unexplained = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in paths
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if IGNORE.search(line) and not EXPLAINED.search(line)
    ]
    assert unexplained == [], "\n".join(unexplained)


def test_the_pattern_tells_an_explained_ignore_from_the_others() -> None:
    assert EXPLAINED.search("x = f()  # type: ignore[arg-type]  # the reactor is typed object here")
    for bare in ("x = f()  # type: ignore", "x = f()  # type: ignore[arg-type]", "x = f()  # type: ignore  # why"):
        assert IGNORE.search(bare) and not EXPLAINED.search(bare), bare
