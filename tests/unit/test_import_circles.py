"""
The import graph of ingress/ (issues 33 and 62): no import circle anywhere in the package, and the
top-level packages in layers that point one way, as DESIGN.md and docs/architecture.md draw them.

The imports are read from the source (every C{import} and C{from ... import}, those under
C{if TYPE_CHECKING:} too: a circle a reader has to keep in mind is a circle, and so is a layer a
reader has to look above for), resolved to the modules of the package.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import ingress

INGRESS = Path(ingress.__file__).parent


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


def test_ingress_has_no_import_circle() -> None:
    modules = module_files(INGRESS)
    assert "ingress.proxy.request.exchange" in modules and "ingress.routing.route" in modules and "ingress.tap" in modules
    found = circles(import_graph(modules))
    assert not found, "import circles in ingress/:\n" + "\n".join(" -> ".join(circle) for circle in found)


# The top-level packages (and modules) of ingress/, lowest first: each may import only those before
# it.  routing/ is the pure build over model/'s values; runtime/ is what every process runs on (the
# live table's pointer, the reactor's type, listening sockets); observe/ is where the others record (metrics,
# logs) and what reads the live table for /debug/routes; speedups/ (library patches and the compiled
# build's shapes, one switch off) sits under its users, proxy/ and process/, and over observe/ (the
# collector's metrics); proxy/ records into observe/ and routes by
# routing/'s table; process/ runs the builder and the workers' data planes over proxy/; sources/ feed
# the builder; controllers/ read the sources and write status; options and tap (the twistd entry) wire
# them all together; audit builds the table as tap would, and __main__ runs it (python -m ingress audit).
# "ingress" is the package's own __init__ (its version, and the check that no
# compiled module is stale): below them all; probe (the kubelet's exec probe) imports nothing of ours.
LAYERS: dict[str, int] = {
    name: rank
    for rank, name in enumerate([
        "ingress", "probe", "model", "routing", "runtime", "observe", "speedups", "proxy", "process",
        "sources", "acme", "controllers", "options", "tap", "audit", "__main__",
    ])
}

# The known imports against the layers, each by its two modules, so that any other one fails: none
# (the access log's line functions, which read the request's head, live in proxy/request/accesslines;
# observe/accesslog only buffers and writes the lines).
KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset()


def package_of(module: str) -> str:
    """The top-level package (or module) of ingress/ that C{module} is in."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(graph: dict[str, set[str]], layers: dict[str, int]) -> set[tuple[str, str]]:
    """Each import (importer, imported) of a module in a package at or above the importer's own."""
    return {
        (name, imported)
        for name, edges in graph.items()
        for imported in edges
        if package_of(imported) != package_of(name) and layers[package_of(imported)] >= layers[package_of(name)]
    }


def test_every_package_of_ingress_has_a_layer() -> None:
    """A new package (or top-level module) must be placed in L{LAYERS} before the layers test can judge it."""
    assert {package_of(name) for name in module_files(INGRESS)} == set(LAYERS)


def test_no_package_of_ingress_imports_one_above_it() -> None:
    graph = import_graph(module_files(INGRESS))
    found = upward_imports(graph, LAYERS)
    assert found - KNOWN_UPWARD == set(), "imports of a package above the importer's: " + ", ".join(f"{a} -> {b}" for a, b in sorted(found - KNOWN_UPWARD))
    assert KNOWN_UPWARD - found == set(), "known exceptions no longer there (remove them): " + ", ".join(f"{a} -> {b}" for a, b in sorted(KNOWN_UPWARD - found))


def test_an_import_above_the_importer_is_found(tmp_path: Path) -> None:
    """The check itself: an upward import is reported, through TYPE_CHECKING and relative imports; a downward one is not."""
    package = tmp_path / "pkg"
    for sub in ("low", "high"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "high" / "user.py").write_text("from pkg.low import base\n")
    (package / "low" / "base.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..high.user import x\n")
    graph = import_graph(module_files(package))
    assert upward_imports(graph, {"pkg": 2, "low": 0, "high": 1}) == {("pkg.low.base", "pkg.high.user")}


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


# Inside proxy/, the two HTTP framings (http1/: HTTP/1.1 to clients; http2/) share one request path
# (request/: the exchange, policies, guards, upstream pools, failures) over the HTTP message as
# bytes (message/): neither of those two imports a framing, and HTTP/2 imports nothing of HTTP/1.1's
# framing (HTTP/1.1 imports HTTP/2: a connection hands itself over on ALPN h2 or the h2c preface).
PROXY_NOT_IMPORTING: dict[str, frozenset[str]] = {
    "message": frozenset({"request", "http1", "http2"}),
    "request": frozenset({"http1", "http2"}),
    "http2": frozenset({"http1"}),
}


def proxy_part_of(module: str) -> str:
    """The subpackage (or module) of ingress/proxy/ that C{module} is in, "" outside proxy/."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "proxy" else ""


def forbidden_proxy_imports(graph: dict[str, set[str]], rules: dict[str, frozenset[str]]) -> set[tuple[str, str]]:
    """Each import (importer, imported) inside proxy/ that C{rules} (part -> parts it must not import) forbids."""
    return {(name, imported) for name, edges in graph.items() for imported in edges if proxy_part_of(imported) in rules.get(proxy_part_of(name), ())}


def test_the_request_path_imports_no_framing_and_http2_nothing_of_http1() -> None:
    modules = module_files(INGRESS)
    assert {"ingress.proxy.message.h1", "ingress.proxy.request.exchange", "ingress.proxy.http1.server", "ingress.proxy.http2.stream"} <= set(modules)
    found = forbidden_proxy_imports(import_graph(modules), PROXY_NOT_IMPORTING)
    assert not found, "imports across proxy/'s framings: " + ", ".join(f"{a} -> {b}" for a, b in sorted(found))


def test_a_framing_imported_by_the_request_path_is_found() -> None:
    """The check itself: request/ importing http1/, and http2/ importing http1/, are found; http1/ importing http2/ is allowed."""
    graph = {
        "ingress.proxy.request.exchange": {"ingress.proxy.http1.server", "ingress.proxy.message.h1"},
        "ingress.proxy.http2.stream": {"ingress.proxy.http1.h1response", "ingress.proxy.request.exchange"},
        "ingress.proxy.http1.server": {"ingress.proxy.http2.connection"},
        "ingress.tap": {"ingress.proxy.http1.factory"},
    }
    assert forbidden_proxy_imports(graph, PROXY_NOT_IMPORTING) == {
        ("ingress.proxy.request.exchange", "ingress.proxy.http1.server"),
        ("ingress.proxy.http2.stream", "ingress.proxy.http1.h1response"),
    }
