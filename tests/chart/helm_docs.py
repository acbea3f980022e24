"""
docs/helm.md's three reference tables, made from charts/twingress/keys.yaml (and the defaults of
the chart's values.yaml and of ingress-nginx's, tests/chart/data/): the rows the page must hold,
which tests/chart/test_keys.py compares with it. After a change to keys.yaml or values.yaml,
C{.venv/bin/python -m tests.chart.helm_docs} rewrites the tables in place.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.chart import helm
from tests.support import ROOT

PAGE = ROOT / "docs" / "helm.md"
INGRESS_NGINX_VALUES = Path(__file__).parent / "data" / "ingress-nginx-4.15.1" / "values.yaml"
VALUES_HEADER = "| value | default | ingress-nginx's default | what the chart does |"
REFUSED_HEADER = "| refused key | accepted values | why |"
ARGS_HEADER = "| `controller.extraArgs` name | what the chart does |"

# controller.service's keys are unset in the chart's values.yaml (documented in its comments):
# these are the defaults its template applies, ingress-nginx's.
SERVICE_DEFAULTS: dict[str, Any] = {
    "enabled": None, "type": "LoadBalancer", "annotations": {}, "labels": {}, "clusterIP": "", "clusterIPs": [],
    "externalIPs": [], "loadBalancerIP": "", "loadBalancerSourceRanges": [], "loadBalancerClass": "",
    "externalTrafficPolicy": "", "sessionAffinity": "", "trafficDistribution": "", "ipFamilyPolicy": "SingleStack",
    "ipFamilies": ["IPv4"], "enableHttp": True, "enableHttps": True, "ports.http": 80, "ports.https": 443,
    "targetPorts.http": "http", "targetPorts.https": "https", "appProtocol": True, "nodePorts.http": "",
    "nodePorts.https": "", "nodePorts.tcp": {}, "nodePorts.udp": {},
}  # fmt: skip


def _paths(node: dict[str, Any], prefix: str = "", stop: dict[str, Any] | None = None) -> Iterator[tuple[str, Any]]:
    """Key paths and values; a non-empty map is walked, unless STOP has an entry for it."""
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value and not (stop and path in stop):
            yield from _paths(value, path, stop)
        else:
            yield path, value


def _cell(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, list):
        return "`[" + ", ".join(map(str, value)) + "]`"
    if value == {}:
        return "`{}`"
    if value == "":
        return '`""`'
    if isinstance(value, dict):
        return "`" + json.dumps(value, separators=(", ", ": ")).replace('"', "") + "`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str) and len(value) > 40:
        return f"`{value[:20]}...`"
    return f"`{value}`"


def _text(text: str) -> str:
    """keys.yaml's words with its placeholders spelled as the page spells them (no HTML-looking <...>)."""
    return text.replace("<fullname>", "FULLNAME").replace("<release>", "RELEASE").replace("<name>", "NAME")


def _load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def _chart_values() -> list[tuple[str, Any]]:
    """The chart's values in values.yaml's order, controller.service's keys where that map stands."""
    table = helm.keys()["values"]
    rows: list[tuple[str, Any]] = []
    for path, value in _paths(_load(helm.CHART / "values.yaml"), stop=table):
        if path == "controller.service":
            rows += [(f"controller.service.{key}", default) for key, default in SERVICE_DEFAULTS.items()]
        else:
            rows.append((path, value))
    return rows


def _nginx_default(path: str, nginx: dict[str, Any]) -> str:
    if path in nginx:
        return _cell(nginx[path])
    if path == "controller.service.enabled":
        return "`true`"
    below = {key[len(path) + 1 :]: value for key, value in nginx.items() if key.startswith(f"{path}.")}
    if below:
        return "`" + ", ".join(f"{key}: {value}" for key, value in below.items()) + "`"
    return "twingress's own"


def _what(entry: dict[str, Any]) -> str:
    honour, refuse = entry.get("honour", ""), entry.get("refuse")
    if refuse and honour:
        return _text(f"{honour}; any other value refused: {refuse}")
    if refuse:
        return _text("accepted at " + ", ".join(_cell(value) for value in entry.get("allow", [])) + f" only: {refuse}")
    return _text(honour)


def values_rows() -> list[str]:
    """The values table: every value of the chart, its default, ingress-nginx's, what the chart does."""
    table = helm.keys()["values"]
    nginx = dict(_paths(_load(INGRESS_NGINX_VALUES)))
    return [f"| `{path}` | {_cell(value)} | {_nginx_default(path, nginx)} | {_what(table[path])} |" for path, value in _chart_values()]


def refused_rows() -> list[str]:
    """The refused keys: every entry of keys.yaml that is not a value of the chart."""
    chart = {path for path, _ in _chart_values()}
    rows = []
    for path, entry in helm.keys()["values"].items():
        if path not in chart:
            allowed = ", ".join(_cell(value) for value in entry.get("allow", [])) or "none"
            rows.append(f"| `{path}` | {allowed} | {_text(entry['refuse'])} |")
    return rows


def args_rows() -> list[str]:
    """The controller.extraArgs names, by what the chart does with each."""
    table = helm.keys()["extraArgs"]
    rows = [f"| `{name}` | passed as it is: a twingress option |" for name in table["twingress"]]
    rows += [f"| `{name}` | renamed: twingress's `{target}` |" for name, target in table["renamed"].items()]
    rows += [f"| `{name}` | refused: the chart sets it ({why}) |" for name, why in table["chart"].items()]
    rows += [f"| `{name}` | refused: {why} |" for name, why in table["refused"].items()]
    return rows


TABLES = {VALUES_HEADER: values_rows, REFUSED_HEADER: refused_rows, ARGS_HEADER: args_rows}


def page_rows(text: str, header: str) -> list[str]:
    """The body rows, as written, of the table of TEXT that starts with HEADER."""
    lines = text.splitlines()
    start = lines.index(header) + 2  # the header and its |---| line
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[start:end]


def rewrite() -> None:
    """Write the tables made from keys.yaml into docs/helm.md, in place of the ones there."""
    lines = PAGE.read_text().splitlines()
    for header, rows in TABLES.items():
        start = lines.index(header) + 2
        end = start
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        lines[start:end] = rows()
    PAGE.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    rewrite()
