"""
testenv/promql.sh's tool from the tests: Prometheus's own PromQL engine and text parsers.

C{promql-eval} evaluates expressions over samples; C{promql-eval parse} reads a /metrics body with
expfmt's TextParser (github.com/prometheus/common/expfmt, as client_golang and promtool read the
format) and with the scraper's textparse.PromParser (what a Prometheus server stores).
"""

from __future__ import annotations

import json
import subprocess

from tests.support import ROOT


def promql_binary() -> str:
    """The tool's path, built (or found current) by the project's script (tests/proxy/conftest.py's C{promql_eval})."""
    result = subprocess.run([str(ROOT / "testenv" / "promql.sh")], capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def parse(binary: str, body: bytes) -> dict:
    """
    C{{"families": {name: {"type", "metrics"}}, "types": {name: type}, "series": [{"labels", "v"}]}}:
    expfmt's families (empty ones dropped, as it drops them), the scraper's TYPE entries and samples
    (each sample's labels with its C{__name__} as Prometheus stores it).  Either parser's error fails.
    """
    result = subprocess.run([binary, "parse"], input=body, capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    parsed: dict = json.loads(result.stdout)
    return parsed
