# -*- test-case-name: tests.unit.test_audit -*-
"""
The audit report written out: JSON (the contract, docs/audit.schema.json), text (for a terminal),
Markdown (for an issue or a wiki) and HTML (one self-contained page, no script: readable anywhere).
All four read the same report value; only JSON carries every field.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ingress.audit.fates import FATES

Report = Mapping[str, Any]


def as_json(report: Report) -> str:
    return json.dumps(report, indent=2, sort_keys=False) + "\n"


def _counts(found: Mapping[str, int]) -> str:
    return ", ".join(f"{found[fate]} {fate}" for fate in FATES)


def _headline(report: Report) -> list[str]:
    summary, options = report["summary"], report["options"]
    ingresses, routes = summary["ingresses"], summary["gatewayRoutes"]
    lines = [
        f"twingress audit: class {options['ingressClass']} (controller {options['controllerName']})"
        + (f", ConfigMap {options['nginxConfigmap']}" if options["nginxConfigmap"] else ""),
        f"Ingresses: {ingresses['served']} served, {ingresses['skipped']} skipped",
        f"Gateway API routes: {routes['served']} served, {routes['skipped']} skipped",
        f"annotations: {_counts(summary['annotations'])}",
        f"ConfigMap keys: {_counts(summary['configmap'])}",
        f"differences without a key: {summary['differences']}",
    ]
    lines += [f"not listed ({line})" for line in report["source"].get("refused", [])]
    return lines


def as_text(report: Report) -> str:
    out = _headline(report)
    if report["summary"]["attention"]:
        out += ["", "needs attention (denied first):"]
        out += [f"  {a['fate']:8} {a['object']}" + (f": {', '.join(a['keys'])}" if a["keys"] else "") for a in report["summary"]["attention"]]
    for ingress in report["ingresses"]:
        out += ["", f"Ingress {ingress['object']}: {ingress['reason']}"]
        out += [f"  route {_route(r)}" for r in ingress["routes"]]
        for annotation in ingress["annotations"]:
            out.append(f"  {annotation['fate']:8} {annotation['key']}: {annotation['message']}")
            out += [f"           snippet: {line}" for line in annotation.get("snippet", "").splitlines()]
        out += [f"  problem  {p['reason']}: {p['message']}" for p in ingress["problems"]]
    for route in report["gatewayRoutes"]:
        out += ["", f"{route['kind']} {route['object']}: {route['reason']}"]
    config_map = report["configmap"]
    if config_map is not None:
        out += ["", f"ConfigMap {config_map['object']}" + ("" if config_map["found"] else ": not found, ingress-nginx's defaults apply")]
        out += [f"  {k['fate']:8} {k['key']}: {k['message']}" for k in config_map["keys"]]
        out += [f"  problem  {p['reason']}: {p['message']}" for p in config_map["problems"]]
    if report["differences"]:
        out += ["", "differences without a key:"] + [f"  {d['object']}: {d['behaviour']}: {d['message']}" for d in report["differences"]]
    if report["problems"]:
        out += ["", "other problems:"] + [f"  {p['object']}: {p['reason']}: {p['message']}" for p in report["problems"]]
    return "\n".join(out) + "\n"


def _route(route: Mapping[str, Any]) -> str:
    shown = f"{route['host']} {route['path'] or '(every path)'} ({route['pathType'] or 'no path type'})"
    if "denied" in route:
        shown += f": answers {route['denied']['status']} ({route['denied']['reason']})"
    if "canaryOf" in route:
        shown += f": canary of {route['canaryOf']}"
    return shown


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def as_markdown(report: Report) -> str:
    out = ["# twingress audit", ""] + [f"- {line}" for line in _headline(report)]
    if report["summary"]["attention"]:
        out += ["", "## Needs attention", "", "| fate | object | keys |", "|---|---|---|"]
        out += [f"| {a['fate']} | {a['object']} | {_cell(', '.join(a['keys']))} |" for a in report["summary"]["attention"]]
    out += ["", "## Ingresses", "", "| Ingress | served | reason |", "|---|---|---|"]
    out += [f"| {i['object']} | {'yes' if i['served'] else 'no'} | {_cell(i['reason'])} |" for i in report["ingresses"]]
    rows = [(i["object"], a) for i in report["ingresses"] for a in i["annotations"]]
    if rows:
        out += ["", "## Annotations", "", "| Ingress | annotation | fate | message |", "|---|---|---|---|"]
        out += [f"| {name} | `{a['key']}` | {a['fate']} | {_cell(a['message'])} |" for name, a in rows]
    if report["gatewayRoutes"]:
        out += ["", "## Gateway API routes", "", "| route | served | reason |", "|---|---|---|"]
        out += [f"| {r['kind']} {r['object']} | {'yes' if r['served'] else 'no'} | {_cell(r['reason'])} |" for r in report["gatewayRoutes"]]
    config_map = report["configmap"]
    if config_map is not None:
        out += ["", f"## ConfigMap {config_map['object']}", ""]
        if not config_map["found"]:
            out += ["Not found: ingress-nginx's defaults apply."]
        if config_map["keys"]:
            out += ["| key | fate | message |", "|---|---|---|"] + [f"| `{k['key']}` | {k['fate']} | {_cell(k['message'])} |" for k in config_map["keys"]]
    if report["differences"]:
        out += ["", "## Differences without a key", "", "| object | behaviour | what happens |", "|---|---|---|"]
        out += [f"| {d['object']} | {d['behaviour']} | {_cell(d['message'])} |" for d in report["differences"]]
    return "\n".join(out) + "\n"


def as_html(report: Report) -> str:
    """One page, every object named, styled inline; no script and nothing fetched."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>twingress audit</title>',
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}"
        ".denied{background:#fdd}.reported{background:#ffd}.applied{background:#dfd}</style></head><body>",
        "<h1>twingress audit</h1><ul>",
        *(f"<li>{html.escape(line)}</li>" for line in _headline(report)),
        "</ul>",
    ]
    if report["summary"]["attention"]:
        parts += ["<h2>Needs attention</h2>", *_table(("fate", "object", "keys"), ((a["fate"], a["object"], ", ".join(a["keys"])) for a in report["summary"]["attention"]), 0)]
    parts += ["<h2>Ingresses</h2>", *_table(("Ingress", "served", "reason"), ((i["object"], "yes" if i["served"] else "no", i["reason"]) for i in report["ingresses"]))]
    rows = [(i["object"], a["key"], a["fate"], a["message"]) for i in report["ingresses"] for a in i["annotations"]]
    if rows:
        parts += ["<h2>Annotations</h2>", *_table(("Ingress", "annotation", "fate", "message"), rows, 2)]
    if report["gatewayRoutes"]:
        gateway_rows = ((f"{r['kind']} {r['object']}", "yes" if r["served"] else "no", r["reason"]) for r in report["gatewayRoutes"])
        parts += ["<h2>Gateway API routes</h2>", *_table(("route", "served", "reason"), gateway_rows)]
    config_map = report["configmap"]
    if config_map is not None:
        parts += [f"<h2>ConfigMap {html.escape(config_map['object'])}</h2>"]
        if not config_map["found"]:
            parts += ["<p>Not found: ingress-nginx's defaults apply.</p>"]
        parts += _table(("key", "fate", "message"), ((k["key"], k["fate"], k["message"]) for k in config_map["keys"]), 1)
    if report["differences"]:
        parts += ["<h2>Differences without a key</h2>", *_table(("object", "behaviour", "what happens"), ((d["object"], d["behaviour"], d["message"]) for d in report["differences"]))]
    parts += ["</body></html>"]
    return "\n".join(parts) + "\n"


def _table(heads: tuple[str, ...], rows: Any, fate_column: int = -1) -> Iterator[str]:
    yield "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in heads) + "</tr>"
    for row in rows:
        style = f' class="{html.escape(row[fate_column])}"' if fate_column >= 0 else ""
        yield f"<tr{style}>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>"
    yield "</table>"


FORMATS: Mapping[str, Callable[[Report], str]] = {"text": as_text, "json": as_json, "markdown": as_markdown, "html": as_html}
