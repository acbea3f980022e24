"""
A validator for the part of JSON Schema that docs/audit.schema.json uses (no new dependency):
type (one or a list), enum, required, properties, items, minimum, oneOf, and $ref to #/$defs/NAME.
A keyword outside that part fails loudly, so the schema cannot grow past what is checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from tests.support import ROOT

SCHEMA_FILE = ROOT / "docs" / "audit.schema.json"
KNOWN = {"$schema", "$id", "title", "description", "type", "enum", "required", "properties", "items", "minimum", "oneOf", "$ref", "$defs"}
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text())


def errors(value: Any, node: Mapping[str, Any], root: Mapping[str, Any], where: str = "$") -> Iterator[str]:
    """Each way C{value} breaks C{node} (a part of C{root}), with its JSON path."""
    unknown = set(node) - KNOWN
    if unknown:
        raise ValueError(f"schema keyword(s) {sorted(unknown)} at {where} are not checked by this validator")
    if "$ref" in node:
        name = node["$ref"].removeprefix("#/$defs/")
        yield from errors(value, root["$defs"][name], root, where)
        return
    if "oneOf" in node:
        matching = [option for option in node["oneOf"] if not list(errors(value, option, root, where))]
        if len(matching) != 1:
            yield f"{where}: matches {len(matching)} of oneOf's {len(node['oneOf'])}"
        return
    if "type" in node:
        types = node["type"] if isinstance(node["type"], list) else [node["type"]]
        if not any(TYPES[t](value) for t in types):
            yield f"{where}: {type(value).__name__} is not {'/'.join(types)}"
            return
    if "enum" in node and value not in node["enum"]:
        yield f"{where}: {value!r} is not one of {node['enum']}"
    if "minimum" in node and isinstance(value, int) and value < node["minimum"]:
        yield f"{where}: {value} < {node['minimum']}"
    if isinstance(value, dict):
        for name in node.get("required", ()):
            if name not in value:
                yield f"{where}: {name!r} is missing"
        for name, part in node.get("properties", {}).items():
            if name in value:
                yield from errors(value[name], part, root, f"{where}.{name}")
    if isinstance(value, list) and "items" in node:
        for index, item in enumerate(value):
            yield from errors(item, node["items"], root, f"{where}[{index}]")


def validate(report: Any) -> list[str]:
    root = schema()
    return list(errors(report, root, root))
