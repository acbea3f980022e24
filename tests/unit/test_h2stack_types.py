"""
h2's classes that h2stack.py makes extension types (C{EXTENSION_TYPES}): declared as upstream assigns them.

A declaration names each instance attribute upstream's code assigns; the compiled methods read those
from a C slot.  An attribute the pinned source assigns that is not declared would still work (every
class keeps a C{__dict__}) but miss the slot; a declared one that the source no longer assigns would be
a slot nothing uses: both mean the declarations were written for another version.  The source read
is the C{.py} file upstream installs beside the compiled module.
"""

from __future__ import annotations

import ast
import importlib
import weakref
from pathlib import Path

import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection

import h2stack

CLASSES = [(module, name) for module, classes in h2stack.EXTENSION_TYPES.items() for name in classes]


def _assigned_attributes(module: str, class_name: str) -> set[str]:
    """The names C{self.<name>} is assigned to (=, +=, annotated) in the class's body, but its properties, in upstream's source."""
    source = Path(importlib.import_module(module).__file__ or "").with_name(module.rsplit(".", 1)[1] + ".py")  # beside the .so too
    tree = ast.parse(source.read_text())
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name]
    properties = {node.name for node in cls.body if isinstance(node, ast.FunctionDef) and node.decorator_list}
    names = set()
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) and part.value.id == "self":
                    names.add(part.attr)
    return names - properties  # a property's setter keeps its own storage


@pytest.mark.parametrize(("module", "class_name"), CLASSES)
def test_the_declared_attributes_are_those_upstream_assigns(module: str, class_name: str) -> None:
    declared = set(h2stack.EXTENSION_TYPES[module][class_name].split())
    assert declared == _assigned_attributes(module, class_name)


def test_a_connection_keeps_what_a_python_class_has() -> None:
    """Any attribute can be set, weak references work, a Python subclass overrides its methods: as upstream's class, compiled or not."""

    class Subclass(H2Connection):
        def data_to_send(self, amount: int | None = None) -> bytes:
            return b"overridden"

    connection = Subclass(H2Configuration(client_side=True))
    connection.initiate_connection()
    connection.anything_else = 1  # type: ignore[attr-defined]
    assert (connection.anything_else, weakref.ref(connection)() is connection) == (1, True)  # type: ignore[attr-defined]
    assert connection.data_to_send() == b"overridden"
    connection.streams = {"replaced": None}
    assert connection.streams == {"replaced": None}
