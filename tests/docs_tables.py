"""
Reading docs/ the way the docs tests check it: the reference tables (one row per option, metric or
annotation key, the key in code spans in the first cell), the code spans of the prose, and the metric
families of a Prometheus text exposition.

The tables are the documentation's one place for each name; the tests compare them with the code's
own lists (the Options class, the registered metrics, the key tables), so a name that is added,
renamed or removed on one side only fails a test.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

_SPAN = re.compile(r"`([^`]+)`")


def doc_files() -> list[Path]:
    """Every page of docs/ and the README: what an operator reads."""
    return sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]


def cells(line: str) -> list[str]:
    """The cells of one Markdown table row ("| a | b |" -> ["a", "b"])."""
    return [cell.strip() for cell in line.strip().strip("|").split(" | ")]


def table_rows(path: Path, header: str) -> list[list[str]]:
    """The body rows of every table in C{path} whose header row starts with C{header}."""
    rows: list[list[str]] = []
    inside = False
    for line in path.read_text().splitlines():
        if line.startswith(header):
            inside = True
            continue
        if not line.startswith("|"):
            inside = False
            continue
        if inside and not set(line) <= set("|-: "):  # not the |---| line
            rows.append(cells(line))
    return rows


def spans(text: str) -> list[str]:
    """The contents of the inline code spans of C{text}."""
    return _SPAN.findall(text)


def prose_and_code(path: Path) -> tuple[str, list[str]]:
    """C{path}'s text outside fenced blocks, and the lines inside them."""
    prose: list[str] = []
    code: list[str] = []
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        (code if fenced else prose).append(line)
    return "\n".join(prose), code


def families(exposition: str, sampled_only: bool = False) -> dict[str, str]:
    """
    The metric families of a Prometheus text exposition, by the name a query uses, with their type.

    That name is the samples' (C{twingress_http_requests_total}, ingress-nginx's
    C{nginx_ingress_controller_requests}), less a histogram's C{_bucket}/C{_sum}/C{_count}; a
    family without samples yet (a labelled counter nobody incremented) is known by its TYPE line.
    C{_created} samples are the client library's, not families of ours.  C{sampled_only}: only the
    families that have samples.
    """
    found: dict[str, str] = {}
    for name, kind, samples in _blocks(exposition):
        if name.endswith("_created"):
            continue
        stems = {re.sub(r"_(bucket|sum|count)$", "", sample) if kind == "histogram" else sample for sample in samples}
        stems = {stem for stem in stems if not stem.endswith("_created")}
        if sampled_only and not stems:
            continue
        for stem in stems or {name}:
            found[stem] = kind
    return found


def _blocks(exposition: str) -> Iterator[tuple[str, str, list[str]]]:
    """(TYPE name, type, sample names) of each family of C{exposition}."""
    name, kind, samples = "", "", []
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            if name:
                yield name, kind, samples
            _, _, name, kind = line.split(" ", 3)
            samples = []
        elif line and not line.startswith("#"):
            samples.append(re.split(r"[{ ]", line, maxsplit=1)[0])
    if name:
        yield name, kind, samples
