"""
Every module's Twisted C{test-case-name} header names a test module that exists.

trial, editors and readers go from a module to its tests through that header;
one that names a test module which was renamed or never written sends them
nowhere (fifteen did, before this test).
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support import ROOT

HEADER = re.compile(r"^# -\*- test-case-name: ([\w.]+) -\*-$", re.MULTILINE)


def test_every_test_case_name_header_names_an_existing_test_module() -> None:
    named = {}
    for source in sorted((ROOT / "ingress").rglob("*.py")):
        match = HEADER.search(source.read_text())
        if match:
            named[source.relative_to(ROOT)] = match.group(1)
    assert len(named) > 50, named  # the headers are found at all
    missing = {str(source): name for source, name in named.items() if not (ROOT / Path(*name.split("."))).with_suffix(".py").is_file()}
    assert not missing, missing
