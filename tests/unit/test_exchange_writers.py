"""
The exchange is the only writer of its state (DESIGN.md, "The request path: one exchange per
request"): read over the source, nothing in ingress/ but ingress/proxy/http/exchange.py assigns
an attribute of an exchange, or of what an exchange holds (C{exchange.attempts.tried = ...}).

An exchange is what these hold: a variable or parameter named C{exchange}, C{owner} or C{sink}
(the upstream connections' name for the exchange they report to), and C{self.exchange} /
C{self._exchange} (the HTTP/1.1 connection, the HTTP/2 stream, an HTTP/2 endpoint's exchange).
Inside exchange.py the exchange writes its own (C{self.state = ...}); the client sides and the
collaborators (attempts, admission, deadlines, steps) tell it what happened through its methods.
"""

from __future__ import annotations

import ast
from pathlib import Path

import ingress

ROOT = Path(ingress.__file__).parent
OWNER = ROOT / "proxy" / "http" / "exchange.py"
NAMES = frozenset({"exchange", "owner", "sink"})
SELF_ATTRIBUTES = frozenset({"exchange", "_exchange"})


def _holds_exchange(node: ast.expr) -> bool:
    """Whether C{node} (the object of an attribute store, or what it is reached from) is an exchange."""
    while isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in SELF_ATTRIBUTES:
            return True
        node = node.value
    return isinstance(node, ast.Name) and node.id in NAMES


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found: list[ast.expr] = []
        for target in node.targets:
            found.extend(target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target])
        return found
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


def exchange_writes(source: str) -> list[str]:
    """C{line: target} for each store into an exchange's attributes in C{source}."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for target in _targets(node):
            if isinstance(target, ast.Attribute) and _holds_exchange(target.value):
                found.append(f"{target.lineno}: {ast.unparse(target)}")
    return found


def test_nothing_but_the_exchange_writes_its_state() -> None:
    writes = {}
    for path in sorted(ROOT.rglob("*.py")):
        if path == OWNER:
            continue
        found = exchange_writes(path.read_text())
        if found:
            writes[str(path.relative_to(ROOT))] = found
    assert writes == {}, writes


def test_the_search_finds_each_kind_of_write() -> None:
    """The check above can fail: each way of writing an exchange's state is found (and reads are not)."""
    source = """
exchange.state = 1
exchange.body_sent += 2
exchange.attempts.tried = None
upstream, exchange.upstream = exchange.upstream, None
self._exchange.request_complete = True
self.exchange.status: int = 3
owner.responded = True
value = exchange.state
exchange.fail(502, "read, not written")
self.state = 4
"""
    assert [line.split(": ")[1] for line in exchange_writes(source)] == [
        "exchange.state", "exchange.body_sent", "exchange.attempts.tried", "exchange.upstream",
        "self._exchange.request_complete", "self.exchange.status", "owner.responded",
    ]  # fmt: skip


def test_the_exchange_module_is_where_its_writes_are() -> None:
    """The exchange does write its state (the search reads the right module): many C{self.x = ...} in its class."""
    tree = ast.parse(OWNER.read_text())
    exchange = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Exchange")
    stores = [t for node in ast.walk(exchange) for t in _targets(node) if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"]
    assert len(stores) > 30
