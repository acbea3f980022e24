"""
Every twisted.logger Logger in ingress/ names its namespace.

C{Logger()} infers its namespace from the caller's frame; a module compiled by mypyc (setup.py's
HOT_MODULES and HTTP2_MODULES, e.g. ingress/observe/accesslog.py) has no Python frame, and the
inference found C{importlib._bootstrap} instead: the access log's reopen line read
C{[importlib._bootstrap#info]}, and JSON logs filtered by C{system} lost it.  The source test
holds for every build; the import test checks the live objects, compiled ones included when the
compiled build is in place.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tests.support import ROOT

PACKAGE = ROOT / "ingress"


def _logger_calls(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        node for node in ast.walk(tree)
        if isinstance(node, ast.Call) and (getattr(node.func, "id", None) == "Logger" or getattr(node.func, "attr", None) == "Logger")
    ]


def _module_loggers() -> list[tuple[str, str]]:
    """(module, name) of each module-level C{name = Logger(namespace=__name__)} in ingress/."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.parse(path.read_text()).body:
            call = node.value if isinstance(node, ast.Assign) else None
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Logger":
                namespace = next((k.value for k in call.keywords if k.arg == "namespace"), None)
                if isinstance(namespace, ast.Name) and namespace.id == "__name__":
                    found.extend((module, target.id) for target in node.targets if isinstance(target, ast.Name))  # type: ignore[union-attr]
    return found


def test_every_logger_names_its_namespace() -> None:
    unnamed = [
        f"{path.relative_to(ROOT)}:{call.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for call in _logger_calls(path)
        if not any(keyword.arg == "namespace" for keyword in call.keywords) and not call.args
    ]
    assert unnamed == []


def test_the_access_log_is_among_them() -> None:
    """The module the report was about (compiled: HOT_MODULES) is found by the next test's scan."""
    assert ("ingress.observe.accesslog", "log") in _module_loggers()
    assert len(_module_loggers()) >= 20


@pytest.mark.parametrize(("module", "name"), _module_loggers())
def test_each_module_logger_is_its_module_s(module: str, name: str) -> None:
    """The live object, in whichever build is installed (a compiled module reads as its own name too)."""
    loaded = importlib.import_module(module)
    assert getattr(loaded, name).namespace == loaded.__name__ == module
