"""
The scenarios, one module each: C{NAME}, C{QUESTION} (the question it answers, one line),
C{add_arguments(parser)} (its own options; the shared ones are L{bench.__main__}'s),
C{run(run: Run) -> list[figure]} and C{lines(document) -> list[str]} (its table, for
C{python -m bench report}).  A new scenario is a module here and its name in L{scenarios}' tuple.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Optional

from bench.lib import procs


@dataclass
class Run:
    """What a scenario's C{run} is given: its options, its children, the CPUs, and where to say what it does."""

    args: argparse.Namespace
    children: procs.Children
    proxy_cpus: Optional[str]
    load_cpus: Optional[str]
    say: Callable[[str], None] = print
    config: dict[str, Any] = field(default_factory=dict)  # what the scenario adds to the results file's config
    failures: list[str] = field(default_factory=list)  # what it could not measure, one line each

    def failed(self, what: str, error: Exception) -> None:
        """C{what} could not be measured: the results file keeps why, the run says its first line and goes on."""
        self.failures.append(f"{what}: {error}")
        self.say(f"FAILED {what}: {str(error).splitlines()[0] if str(error) else type(error).__name__}")


def scenarios() -> dict[str, ModuleType]:
    """The scenarios on bench/lib, by name (imported here, late: a scenario's imports are its own business)."""
    names = (
        "pairs", "node",
        "latency", "tls", "streams", "h2_path", "floor_h2", "mix", "floor_library", "instructions", "tls_calls", "workers_cost", "first_answer",
        "convergence", "endpoint_removal", "watch_floor", "renewal", "soak",
    )
    modules = [importlib.import_module(f"bench.scenarios.{name}") for name in names]
    return {module.NAME: module for module in modules}
