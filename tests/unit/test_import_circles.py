"""
No import circle inside ingress/proxy/ (issue 33): a module of the request path can be read
knowing only what it imports.

The imports are read from the source (every C{import} and C{from ... import}, those under
C{if TYPE_CHECKING:} too: a circle a reader has to keep in mind is a circle), resolved to the
modules of the package, and searched for a path that leads back to where it started.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import ingress

PROXY = Path(ingress.__file__).parent / "proxy"


def module_files(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for each .py under C{package} (a package is named by its __init__)."""
    root = package
    while (root.parent / "__init__.py").exists():  # up to the top package: names are absolute
        root = root.parent
    root = root.parent
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported_names(name: str, path: Path) -> Iterator[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports among C{modules} (an imported name is taken as its longest known module prefix)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = graph[name] = set()
        for imported in _imported_names(name, path):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                edges.add(imported)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (as the path that closes it) for each import that leads back to a module being walked."""
    found: list[list[str]] = []
    done: set[str] = set()

    def walk(name: str, path: list[str]) -> None:
        path.append(name)
        for imported in sorted(graph[name]):
            if imported in path:
                found.append([*path[path.index(imported) :], imported])
            elif imported not in done:
                walk(imported, path)
        path.pop()
        done.add(name)

    for name in sorted(graph):
        if name not in done:
            walk(name, [])
    return found


def test_the_proxy_package_has_no_import_circle() -> None:
    modules = module_files(PROXY)
    assert "ingress.proxy.http.exchange" in modules and "ingress.proxy.http2.stream" in modules
    found = circles(import_graph(modules))
    assert not found, "import circles in ingress/proxy:\n" + "\n".join(" -> ".join(circle) for circle in found)


def test_a_circle_is_found_through_type_checking_and_relative_imports(tmp_path: Path) -> None:
    """The check itself: a circle closed by a TYPE_CHECKING-only, relative import is reported."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..c import thing\n")
    (package / "c.py").write_text("import pkg.a\nthing = 1\n")
    (package / "d.py").write_text("from pkg import c\n")  # into the circle, not part of it
    found = circles(import_graph(module_files(package)))
    assert found == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]
