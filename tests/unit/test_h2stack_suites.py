"""
The HTTP/2 stack twingress runs against upstream's own test suites: h2, hpack and hyperframe, unmodified.

h2stack.py compiles the three pinned libraries with Cython, without changing their source, and the
image ships them so; issue 32 asks that "their own test suites run against the compiled build in
CI".  Our HTTP/2, gRPC and h2spec tests cover what twingress uses of them; upstream's suites cover
the rest: every frame type parsed and serialised, HPACK's encoder, decoder and dynamic table, every
transition of the connection's and the streams' state machines.  A difference Cython made
(an annotation enforced, a name bound early, an exception changed) would fail one of them.

Each suite is the C{tests/} of the pinned source distribution (C{python h2stack.py suites}, which
C{make test} runs), run as upstream runs it (pytest over C{tests/}; hypothesis's wall-clock
deadline off, below) in a process of this interpreter, so against the packages it imports: the compiled modules in C{make test}'s compiled
run, upstream's C{.py} files in its pure run.  The count of passed tests is pinned with the
versions: a suite that collected less, skipped or failed anything does not pass here.  h2's suite
runs a second time after the one change the data plane makes to h2's classes when it starts
(L{ingress.speedups.statehash}: its state-machine Enums hashed by identity): it walks every
transition, valid and invalid, so a transition no longer found would fail it.
"""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import h2stack
from tests.support import unavailable

# distribution -> (a module of it that h2stack.py compiles, the tests its pinned version's suite passes)
SUITES = {
    "h2": ("h2.connection", 1662),
    "hpack": ("hpack.hpack", 88),
    "hyperframe": ("hyperframe.frame", 108),
}
# Left out, with why: hyperframe's test_external_collection.py reads the http2-frame-test-case
# corpus, which its source distribution does not ship (it collects no case and skips).
IGNORED = {"hyperframe": ["tests/test_external_collection.py"]}
# Our own environment's pytest plugins that upstream's suites were not written for: pytest-twisted
# runs every coroutine test function on the reactor, and h2's tests/coroutine_tests.py has its own.
PLUGINS_OFF = ["-p", "no:twisted", "-p", "no:cacheprovider"]
_SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ \w+(?:, \d+ \w+)*) in [\d.]+s", re.MULTILINE)


def _suite(distribution: str, tmp_path: Path) -> Path:
    """A copy of the distribution's suite to run in (hypothesis keeps its database beside it)."""
    fetched = h2stack.suite_path(distribution)
    if not (fetched / "complete").exists():
        unavailable(f"{distribution}'s test suite is not fetched ({fetched}): run make test or python h2stack.py suites")
    shutil.copytree(fetched / "tests", tmp_path / "tests")
    return tmp_path


def _imported_file(module: str, cwd: Path) -> str:
    """The file a fresh process of this interpreter imports C{module} from, started where the suite runs."""
    done = subprocess.run([sys.executable, "-c", f"import {module}; print({module}.__file__)"], cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def _counts(output: str) -> dict[str, int]:
    """pytest's closing line, "1662 passed, 2 warnings in 12.56s", as {"passed": 1662, "warnings": 2}."""
    found = _SUMMARY.findall(output)
    assert found, f"no pytest summary in:\n{output[-3000:]}"
    return {kind: int(count) for count, kind in (part.split(" ") for part in found[-1].split(", "))}


# How a suite is started: pytest over its tests/, as upstream runs it, with hypothesis's deadline off (200 ms
# of wall-clock time per example by default, which h2's and hpack's property tests would otherwise keep).
# A deadline measures how fast this machine ran an example, which CI's two parallel lanes decide, not what
# the library did: h2's test_changing_max_frame_size once took 243 ms there and failed.  No upstream suite
# sets a deadline or a profile of its own.  The second way starts it after the one change the data plane
# makes to h2's classes (ingress.speedups.statehash: its state-machine Enums hashed by identity).
_START = ("from hypothesis import settings; settings.register_profile('no-deadline', deadline=None); "
          "settings.load_profile('no-deadline'); {before}import sys, pytest; sys.exit(pytest.main(sys.argv[1:]))")
PLAIN = ["-c", _START.format(before="")]
IDENTITY_HASHED = ["-c", _START.format(before="from ingress.speedups.statehash import hash_states_by_identity; hash_states_by_identity(); ")]


def _passes(distribution: str, tmp_path: Path, start: list[str]) -> None:
    """Upstream's suite of C{distribution}, run on the packages twingress imports, passes whole: no failure, skip or error."""
    module, expected = SUITES[distribution]
    where = _suite(distribution, tmp_path)
    ours = importlib.import_module(module).__file__
    assert _imported_file(module, where) == ours, "the suite must run against the packages twingress imports"
    ignored = [f"--ignore={path}" for path in IGNORED.get(distribution, [])]
    done = subprocess.run([sys.executable, *start, "-q", *PLUGINS_OFF, *ignored, "tests"], cwd=where,
                          capture_output=True, text=True, timeout=900)
    counts = _counts(done.stdout)
    build = "compiled" if (ours or "").endswith(".so") else "pure"
    outcome = {kind: n for kind, n in counts.items() if kind not in ("passed", "warning", "warnings")}
    assert done.returncode == 0 and not outcome, f"{distribution} ({build}, {ours}): {counts}\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
    assert counts.get("passed") == expected, f"{distribution} ({build}): {counts}, {expected} expected to pass"


@pytest.mark.parametrize("distribution", sorted(SUITES))
def test_upstream_s_suite_passes_on_the_installed_build(distribution: str, tmp_path: Path) -> None:
    _passes(distribution, tmp_path, PLAIN)


def test_h2_s_suite_passes_with_its_enums_hashed_as_the_data_plane_hashes_them(tmp_path: Path) -> None:
    """Every transition of h2's state machines (its suite walks them all, valid and invalid) found as before the change."""
    _passes("h2", tmp_path, IDENTITY_HASHED)


def test_a_summary_line_reads_as_counts() -> None:
    assert _counts("....\n===== 1662 passed, 2 warnings in 12.56s =====\n") == {"passed": 1662, "warnings": 2}
    assert _counts("x\n1 failed, 87 passed in 1.50s\n") == {"failed": 1, "passed": 87}
