"""
Never silently dropped, checkably: charts/twingress/keys.yaml, the table the chart judges every
value with at render time, against ingress-nginx's own chart (its values.yaml and its ci/ values
files, vendored unchanged in tests/chart/data/, SOURCE.md there) and against twingress's options.

- Every key path of ingress-nginx's values.yaml is honoured or refused by an entry (the table's
  own rule: an entry of its own, or PARENT.* of a parent); an empty map or list is a key too.
- Every key of the chart's own values.yaml is honoured, and its default is not refused.
- Every entry of the table is a key of one of the two charts (no stale entries).
- Each of ingress-nginx's ci/*-values.yaml renders, or fails naming only keys the table refuses;
  and again without its controller.image (each names ingress-nginx's test image, refused).
- controller.extraArgs' lists: every twingress option is in exactly one of them.
- docs/helm.md's tables: made from this table, each entry once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ingress.tap import Options
from tests.chart import helm, helm_docs
from tests.docs_tables import spans, table_rows

INGRESS_NGINX = Path(__file__).parent / "data" / "ingress-nginx-4.15.1"
CI_VALUES = sorted((INGRESS_NGINX / "ci").glob("*-values.yaml"))
REFUSAL = re.compile(r"^(?P<path>\S+): refused: .+$")


def _paths(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every key path of a values tree and its value (a non-empty map is walked, not yielded)."""
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            yield from _paths(value, path)
        else:
            yield path, value


def _entry(table: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The entry that judges PATH, found as templates/_check.tpl walks: top down, the first entry of its own stops it."""
    parts = path.split(".")
    inherited: dict[str, Any] | None = None
    for end in range(1, len(parts) + 1):
        head = ".".join(parts[:end])
        if head in table:
            return dict(table[head])
        if end == len(parts):
            break
        own = table.get(f"{head}.*")
        if own is not None:
            inherited = own
        elif inherited is not None:
            return dict(inherited)  # a map below a PARENT.* entry is judged whole
    return None if inherited is None else dict(inherited)


def _table() -> dict[str, Any]:
    values: dict[str, Any] = helm.keys()["values"]
    return values


def _load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    return loaded


def test_every_ingress_nginx_key_is_honoured_or_refused() -> None:
    """Each of ingress-nginx 4.15.1's 345 key paths has an entry that honours or refuses it."""
    table = _table()
    paths = [path for path, _ in _paths(_load(INGRESS_NGINX / "values.yaml"))]
    assert len(paths) > 300
    unjudged = [path for path in paths if _entry(table, path) is None]
    assert unjudged == []
    vague = [path for path in paths if not {"honour", "refuse"} & set(_entry(table, path) or {})]
    assert vague == []


def test_every_key_of_the_chart_is_honoured_at_its_default() -> None:
    """The chart's own values.yaml: every key honoured, or refused but for its default (hostPort.enabled: false)."""
    table = _table()
    for path, value in _paths(_load(helm.CHART / "values.yaml")):
        if value == {} and any(entry.startswith(f"{path}.") for entry in table):
            continue  # controller.service: {}, its keys documented in comments, each with an entry
        entry = _entry(table, path)
        assert entry is not None, path
        if "refuse" in entry:
            assert value in entry.get("allow", []), path
        else:
            assert "honour" in entry, path


def test_no_entry_is_stale() -> None:
    """Each entry names a key path of the chart's values, ingress-nginx's values, or one of ingress-nginx's ci files."""
    known: set[str] = set()
    for source in [helm.CHART / "values.yaml", INGRESS_NGINX / "values.yaml", *CI_VALUES]:
        for path, _ in _paths(_load(source)):
            parts = path.split(".")
            known.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))
    # controller.service's keys are documented in comments of the chart's values.yaml (unset by default)
    stale = [entry for entry in _table() if entry.removesuffix(".*") not in known]
    assert stale == []


def _refused_paths(message: str) -> list[str]:
    """The key paths a failed render names (each on a line of its own, "PATH: refused: WHY")."""
    lines = [line for line in message.splitlines() if ": refused: " in line]
    return [match["path"] for line in lines if (match := REFUSAL.match(line.removeprefix("Error: execution error at ").split("): ")[-1]))]


def _check_renders_or_refuses(values: Path) -> bool:
    """Render with VALUES: it renders (True), or fails (False) naming only paths the table refuses."""
    done = helm.run(*helm.template_args("twingress", "twingress", [values], []))
    if done.returncode == 0:
        return True
    paths = _refused_paths(done.stderr)
    assert paths, done.stderr
    table = _table()
    for path in paths:
        entry = _entry(table, path) if path != "controller.image" else {"refuse": "ingress-nginx's image"}
        assert entry is not None and "refuse" in entry, f"{path} named, but not a refused key: {done.stderr}"
    return False


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda path: path.name)
def test_ingress_nginx_ci_values_render_or_name_refused_keys(values: Path, tmp_path: Path) -> None:
    """As it is, and without its controller.image (ingress-nginx's image, which is refused whatever the rest)."""
    assert not _check_renders_or_refuses(values)  # every one names ingress-nginx's test image
    stripped = _load(values)
    stripped["controller"].pop("image")
    without_image = tmp_path / values.name
    without_image.write_text(yaml.safe_dump(stripped))
    _check_renders_or_refuses(without_image)


def test_ingress_nginx_defaults_file_names_only_refused_keys() -> None:
    """ingress-nginx's whole values.yaml (what `helm show values` prints) fails naming only refused keys: its
    defaults (a webhook, httpGet probes, user 101...) are not twingress's, so a file keeps only what its user changed."""
    assert not _check_renders_or_refuses(INGRESS_NGINX / "values.yaml")


def test_most_ingress_nginx_ci_values_render_without_the_image(tmp_path: Path) -> None:
    """The ci files that ask only for what twingress does render: kind, metrics, config, headers, annotations, Service."""
    rendered = []
    for values in CI_VALUES:
        stripped = _load(values)
        stripped["controller"].pop("image")
        path = tmp_path / values.name
        path.write_text(yaml.safe_dump(stripped))
        if helm.run(*helm.template_args("twingress", "twingress", [path], [])).returncode == 0:
            rendered.append(values.name)
    assert set(rendered) == {
        "controller-configmap-addheaders-values.yaml",
        "controller-configmap-proxyheaders-values.yaml",
        "controller-configmap-values.yaml",
        "controller-daemonset-metrics-values.yaml",
        "controller-daemonset-podannotations-values.yaml",
        "controller-daemonset-values.yaml",
        "controller-deployment-metrics-values.yaml",
        "controller-deployment-podannotations-values.yaml",
        "controller-deployment-values.yaml",
    }


def test_extra_args_lists_cover_every_twingress_option() -> None:
    """Every option of twistd ingress is either passed as it is or set by the chart (never both); no listed name is made up."""
    table = helm.keys()["extraArgs"]
    options = {parameter[0] for parameter in Options().optParameters}
    passed, chart = set(table["twingress"]), set(table["chart"])
    assert passed & chart == set()
    assert options - passed - chart == set()
    assert passed - options == set()
    assert chart - options == set()
    assert set(table["renamed"].values()) <= passed


@pytest.mark.parametrize("header", list(helm_docs.TABLES), ids=["values", "refused", "extraArgs"])
def test_docs_tables_are_the_table(header: str) -> None:
    """docs/helm.md's tables, row for row, are those made from keys.yaml (python -m tests.chart.helm_docs rewrites them)."""
    assert helm_docs.page_rows(helm_docs.PAGE.read_text(), header) == helm_docs.TABLES[header]()


def test_docs_tables_list_each_entry_once() -> None:
    """Between them, the values and refused tables name each entry of keys.yaml once."""
    page = helm_docs.PAGE
    documented = [spans(row[0])[0] for header in [helm_docs.VALUES_HEADER, helm_docs.REFUSED_HEADER] for row in table_rows(page, header)]
    assert sorted(documented) == sorted(set(_table()))
