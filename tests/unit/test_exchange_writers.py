"""
Nothing but the exchange and its named collaborators writes an exchange's state.

The rule, over the AST of every module in ingress/: an assignment (plain, augmented, annotated,
or a target inside a tuple or list of targets) to an attribute of an object named as an
exchange - the name C{exchange}, or C{self.exchange} / C{self._exchange} - is allowed only in
L{WRITERS}: the exchange's own module (there, an exchange writes its fields as C{self.x}) and
L{ingress.proxy.request.failures}, the collaborator that still decides over the exchange's
retry fields.  A framing (HTTP/1.1, HTTP/2, the access log...) asks the exchange by calling its
methods instead, so that one object owns the request's state (docs/architecture.md).  Writes
through another name or C{setattr} are not seen: the names above are the ones the code uses.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WRITERS = frozenset({"ingress/proxy/request/exchange.py", "ingress/proxy/request/failures.py"})
EXCHANGE_NAMES = frozenset({"exchange"})
EXCHANGE_ATTRIBUTES = frozenset({"exchange", "_exchange"})  # self.exchange, self._exchange


def _is_exchange(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in EXCHANGE_NAMES
    return isinstance(node, ast.Attribute) and node.attr in EXCHANGE_ATTRIBUTES and isinstance(node.value, ast.Name) and node.value.id == "self"


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


def _flatten(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [leaf for element in target.elts for leaf in _flatten(element)]
    if isinstance(target, ast.Starred):
        return _flatten(target.value)
    return [target]


def exchange_writes(source: str, name: str = "<string>") -> list[str]:
    """Every write to an exchange's attribute in C{source}, as C{name:line: exchange.attr}."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        for target in _targets(node):
            for leaf in _flatten(target):
                if isinstance(leaf, ast.Attribute) and _is_exchange(leaf.value):
                    found.append(f"{name}:{leaf.lineno}: {ast.unparse(leaf)}")
    return found


def test_the_rule_sees_each_kind_of_write() -> None:
    """The check finds a plain, an augmented, an annotated and a tuple write, through each name; reads and other objects pass."""
    source = (
        "exchange.state = 1\n"
        "self._exchange.body_sent += 2\n"
        "self.exchange.route: int = 3\n"
        "upstream, exchange.upstream = exchange.upstream, None\n"
        "[a, *exchange.pending] = b\n"
        "x = exchange.state\n"  # a read
        "other.state = 1\n"  # not an exchange
        "self.exchange = exchange\n"  # holding an exchange, not writing it
    )
    assert [line.split(": ", 1)[1] for line in exchange_writes(source)] == [
        "exchange.state",
        "self._exchange.body_sent",
        "self.exchange.route",
        "exchange.upstream",
        "exchange.pending",
    ]


def test_nothing_but_the_exchange_and_its_collaborators_writes_its_state() -> None:
    outside = []
    for path in sorted((ROOT / "ingress").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name not in WRITERS:
            outside += exchange_writes(path.read_text(encoding="utf-8"), name)
    assert outside == [], "an exchange's state written outside it (call an Exchange method instead):\n" + "\n".join(outside)
