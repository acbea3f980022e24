"""
Results as files: every run writes one JSON file (its scenario, the command, the environment - the
machine, its CPUs, the kernel, the Python, the commit and whether the tree was dirty - the config,
the figures with their intervals, and what failed) under bench/results/ (git ignores it), and
C{python -m bench report} reads them back.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"


def _git(*argv: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *argv], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "?"


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def interpreter() -> str:
    """The Python that runs the bench (this tree's twingress runs on the same venv): version, executable, libpython's linking.

    Why: the same code costs about a fifth more instructions per request on a shared, unoptimised
    libpython than on Debian's python3.11 (PGO, LTO, libpython in the executable); a figure says which.
    """
    shared = any("libpython" in line for line in Path("/proc/self/maps").read_text().splitlines())
    return f"CPython {platform.python_version()} {os.path.realpath(sys.executable)} ({'libpython shared' if shared else 'libpython in the executable'})"


def environment() -> dict[str, Any]:
    """What a figure was measured on."""
    return {"machine": platform.node(), "cpu_model": _cpu_model(), "cpus": os.cpu_count(), "kernel": platform.release(),
            "python": interpreter(), "commit": _git("rev-parse", "--short=12", "HEAD"),
            "dirty": bool(_git("status", "--porcelain", "--untracked-files=no"))}


def default_path(scenario: str) -> Path:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    return RESULTS / f"{scenario}-{stamp}.json"


def write(path: Optional[Path], scenario: str, command: list[str], config: dict[str, Any], figures: list[dict[str, Any]],
          failures: list[str], extra: Optional[dict[str, Any]] = None) -> Path:
    """The run's results file (L{default_path} unless C{path}); returns where it went."""
    out = path or default_path(scenario)
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {"scenario": scenario, "command": " ".join(command),
                "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "environment": environment(), "config": config, "figures": figures, "failures": failures, **(extra or {})}
    out.write_text(json.dumps(document, indent=2, default=str) + "\n")
    return out


def read(path: Path) -> dict[str, Any]:
    """A results file, checked to have what L{write} puts in it: ValueError if it does not."""
    document = json.loads(path.read_text())
    if not isinstance(document, dict):
        raise ValueError(f"{path}: not a bench results file (not an object)")
    missing = [key for key in ("scenario", "command", "time", "environment", "config", "figures", "failures") if key not in document]
    if missing:
        raise ValueError(f"{path}: not a bench results file (missing {', '.join(missing)})")
    return document
