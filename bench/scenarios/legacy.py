"""
The scenarios whose code is still the benches' older scripts, in bench/legacy/: each a script run
as a child with the options given after the scenario's name (its C{--help} is the script's), its
JSON (C{--json}, where the script writes one) or else its output's last lines kept in the results
file.  They are scenarios in the sense of the others - one name, one question, one results file,
one line in bench/README.md's table - and their code moves into bench/lib as each is rewritten on it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LEGACY = Path(__file__).resolve().parents[1] / "legacy"
REPO = LEGACY.parents[1]


@dataclass(frozen=True)
class Legacy:
    """A scenario backed by bench/legacy/SCRIPT."""

    NAME: str
    script: str
    QUESTION: str
    json: bool = True  # the script takes --json PATH
    kube: bool = False  # it starts a kube-apiserver of testenv/: run it under testenv/netns-run

    def command(self, argv: Sequence[str], json_path: Path) -> list[str]:
        runner = ["bash"] if self.script.endswith(".sh") else [sys.executable]
        return [*runner, str(LEGACY / self.script), *argv, *(["--json", str(json_path)] if self.json else [])]

    def run(self, argv: Sequence[str]) -> tuple[int, list[dict[str, Any]], list[str]]:
        """The script with C{argv}, its output passed through: (its exit status, the figures, the failures)."""
        with tempfile.TemporaryDirectory(prefix=f"bench-{self.NAME}-") as tmp:
            json_path = Path(tmp) / "out.json"
            tail: list[str] = []
            try:
                child = subprocess.Popen(self.command(argv, json_path), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            except OSError as e:
                return 1, [], [f"{self.script}: {e}"]
            assert child.stdout is not None
            try:
                for line in child.stdout:
                    print(line, end="", flush=True)
                    tail = (tail + [line.rstrip("\n")])[-40:]
                status = child.wait()
            except KeyboardInterrupt:
                child.terminate()
                child.wait()
                raise
            figures = [json.loads(json_path.read_text())] if json_path.exists() else ([{"output": tail}] if status == 0 else [])
        failures = [] if status == 0 else [f"{self.script} exited {status}: " + " | ".join(tail[-5:])]
        return status, figures, failures

    def lines(self, document: dict[str, Any]) -> list[str]:
        out = []
        for figure in document["figures"]:
            if "output" in figure:
                out += figure["output"]
            elif isinstance(figure.get("results"), dict) and "summary" in figure["results"]:
                out += figure["results"]["summary"]
            else:
                out.append(json.dumps(figure.get("results", figure), default=str)[:2000])
        return out


SCENARIOS = (
    Legacy("convergence", "convergence.py", "How long until a change is live, by traffic, at 1k to 10k Ingresses (and HTTPRoutes), and what memory does the table take?", kube=True),
    Legacy("endpoint-removal", "endpoint_removal.py", "How long does the proxy keep sending to a pod removed from an EndpointSlice, at 10k Ingresses?", kube=True),
    Legacy("watch-floor", "watch_floor.py", "What does watching alone cost a cluster being filled (the floor of the creation ratio)?", json=False, kube=True),
    Legacy("renewal", "renewal.py", "When 1,000 TLS Secrets renew at once, how long until every new certificate is served, and does any handshake fail?", kube=True),
    Legacy("soak", "soak.py", "Does twingress hold up under steady load, constant churn and backend kills (errors, latency, memory over time)?", kube=True),
)
