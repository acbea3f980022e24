"""The image tests report what they measured (the image's size) at the end of the run."""

from __future__ import annotations

import pytest

REPORT_KEY = pytest.StashKey[list[str]]()


@pytest.fixture
def report(request: pytest.FixtureRequest):
    """Lines for the run's summary ("deploy: ..."), shown whether the test passes or not."""
    lines = request.config.stash.setdefault(REPORT_KEY, [])
    return lines.append


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    lines = config.stash.get(REPORT_KEY, [])
    if lines:
        terminalreporter.section("deploy")
        for line in lines:
            terminalreporter.write_line(line)
