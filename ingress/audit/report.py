# -*- test-case-name: tests.unit.test_audit -*-
"""
The audit report: the table built from a snapshot as C{twistd ingress} builds it, and every object's
fate in it, as plain JSON values (docs/audit.schema.json is their contract; the renderers read only these).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from ingress import __version__
from ingress.audit.differences import differences
from ingress.audit.fates import APPLIED, DENIED, REPORTED, Fate, RouteSeen, annotation_fates, config_map_fates, counts, routes_by_ingress, skipped_fates
from ingress.model import ClusterState, Ingress, ObjectRef, Problem
from ingress.model.gateway import GRPCRoute, HTTPRoute, L4Route
from ingress.routing import build
from ingress.routing.annotations import read_annotations
from ingress.routing.build_options import BuildOptions
from ingress.routing.report import BuildReport
from ingress.routing.table import problem_json

SCHEMA_VERSION = 1


def audit(state: ClusterState, options: BuildOptions, source: Mapping[str, Any]) -> dict[str, Any]:
    """
    The report of C{state} built with C{options} (L{ingress.options.build_arguments}, as the proxy's):
    C{source} says where the snapshot came from (its kind, where, the kinds it could not list).
    """
    built = build(state, options)
    table, found = built.table, built.report
    problems: dict[ObjectRef, list[Problem]] = {}
    for problem in found.problems:
        problems.setdefault(problem.ref, []).append(problem)
    routes = routes_by_ingress(table)
    ingresses = [
        _ingress(ingress, found.class_skipped, problems.pop(ingress.ref, []), routes.get(ingress.ref, []), options.nginx_annotations)
        for ingress in state.ingresses
    ]
    ingresses += [_unreadable(ref, problems.pop(ref)) for ref in list(problems) if ref.kind == "Ingress" and any(p.left_out for p in problems[ref])]
    ingresses.sort(key=lambda i: tuple(i["object"].split("/")))
    gateway_routes = _gateway_routes(state, found)
    config_map = _config_map(state, options.nginx_configmap, problems)
    report: dict[str, Any] = {
        "schemaVersion": SCHEMA_VERSION,
        "twingress": __version__,
        "source": dict(source),
        "options": {
            "ingressClass": options.class_name,
            "controllerName": options.controller_name,
            "nginxConfigmap": "/".join(options.nginx_configmap) if options.nginx_configmap else None,
            "nginxAnnotations": options.nginx_annotations,
        },
        "ingresses": ingresses,
        "gatewayRoutes": gateway_routes,
        "configmap": config_map,
        "differences": differences(state, built, options),
        "problems": [problem_json(p) for found in problems.values() for p in found if p.ref.kind not in ("HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute")],
    }
    report["summary"] = _summary(report)
    return report


def _ingress(ingress: Ingress, class_skipped: Mapping[ObjectRef, tuple[str, str]], problems: list[Problem], routes: list[RouteSeen], nginx: bool) -> dict[str, Any]:
    name = f"{ingress.meta.namespace}/{ingress.meta.name}"
    skipped = class_skipped.get(ingress.ref)
    shown: dict[str, Any] = {"object": name, "class": ingress.ingress_class_name or ingress.meta.annotations.get("kubernetes.io/ingress.class")}
    if skipped is not None:
        reason, message = skipped
        fates: list[Fate] = skipped_fates(ingress, reason)
        return {
            **shown, "served": False, "skippedBy": reason, "reason": f"{reason}: {message}", "routes": [], "annotations": [f.to_json() for f in fates], "problems": [],
        }
    read = read_annotations(ingress, nginx)  # what the build read them as: the same call
    fates, left = annotation_fates(ingress, read, problems, nginx, routes)
    served = bool(routes)
    closed = [r for r in routes if r.deny_status is not None]
    if not served:
        why = "; ".join(f"{p.reason}: {p.message}" for p in problems) or "no rule of it made a route"
        reason = f"not served: {why}"
    elif closed:
        reason = f"served: {_routes(len(routes))}, {len(closed)} of them answer {closed[0].deny_status} ({closed[0].deny_reason})"
    else:
        reason = f"served: {_routes(len(routes))}"
    return {
        **shown,
        "served": served,
        "skippedBy": None,
        "reason": reason,
        "routes": [r.to_json() for r in routes],
        "annotations": [f.to_json() for f in fates],
        "problems": [problem_json(p) for p in left],
    }


def _unreadable(ref: ObjectRef, problems: list[Problem]) -> dict[str, Any]:
    """An Ingress that does not parse (the apiserver would refuse it too): nothing of it is served, nothing of it is read."""
    why = "; ".join(f"{p.reason}: {p.message}" for p in problems)
    return {
        "object": f"{ref.namespace}/{ref.name}", "class": None, "served": False, "skippedBy": None, "reason": f"not served: {why}",
        "routes": [], "annotations": [], "problems": [problem_json(p) for p in problems],
    }


def _routes(count: int) -> str:
    return f"{count} route" + ("s" if count != 1 else "")


def _gateway_routes(state: ClusterState, report: BuildReport) -> list[dict[str, Any]]:
    """Each Gateway API route with its parents' conditions as the build judged them (served: Accepted by one of ours)."""
    status = report.gateway_status.routes if report.gateway_status is not None else {}
    problems = {p.ref: p for p in report.problems}
    found = []
    every: list[HTTPRoute | GRPCRoute | L4Route] = [*state.http_routes, *state.grpc_routes, *state.l4_routes]
    for route in every:
        ref = route.ref
        parents = status.get(ref, ())
        accepted = [parent for parent, conditions in parents if any(c.type == "Accepted" and c.status == "True" for c in conditions)]
        if accepted:
            reason = "served: accepted by " + ", ".join(f"{p.namespace}/{p.name}" for p in accepted)
        elif parents:
            reason = "not served: " + "; ".join(f"{c.reason}: {c.message}" for _, conditions in parents for c in conditions if c.status != "True")
        else:
            reason = "not served: " + (problems[ref].message if ref in problems else "no parent is a Gateway of ours")
        found.append({
            "object": f"{ref.namespace}/{ref.name}",
            "kind": ref.kind,
            "served": bool(accepted),
            "reason": reason,
            "parents": [
                {"parent": f"{p.namespace}/{p.name}" + (f"/{p.section_name}" if p.section_name else ""),
                 "conditions": [{"type": c.type, "status": c.status, "reason": c.reason} for c in conditions]}
                for p, conditions in parents
            ],
        })
    return sorted(found, key=lambda r: (r["kind"], r["object"]))


def _config_map(state: ClusterState, named: Optional[tuple[str, str]], problems: dict[ObjectRef, list[Problem]]) -> Optional[dict[str, Any]]:
    if not named:
        return None
    ref = ObjectRef("ConfigMap", *named)
    found = problems.pop(ref, [])
    config_map = state.config_maps.get(named)
    if config_map is None:
        return {"object": "/".join(named), "found": False, "keys": [], "problems": [problem_json(p) for p in found]}
    fates, left = config_map_fates(config_map, found)
    return {"object": "/".join(named), "found": True, "keys": [f.to_json() for f in fates], "problems": [problem_json(p) for p in left]}


def _summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """Counts per fate, and the objects that need attention: denied before reported, each with its keys."""
    annotations = [Fate(a["key"], a["fate"], a["message"]) for i in report["ingresses"] for a in i["annotations"]]
    keys = [Fate(k["key"], k["fate"], k["message"]) for k in (report["configmap"] or {}).get("keys", [])]
    attention: list[dict[str, Any]] = []
    for fate in (DENIED, REPORTED):
        cm = report["configmap"]
        if cm is not None and (named := [k["key"] for k in cm["keys"] if k["fate"] == fate]):
            attention.append({"object": f"ConfigMap/{cm['object']}", "fate": fate, "keys": named})
        for ingress in report["ingresses"]:
            if ingress["skippedBy"]:
                continue  # another controller's: its annotations are not read (the skip is the news, counted above)
            named = [a["key"] for a in ingress["annotations"] if a["fate"] == fate]
            closed = fate == DENIED and any("denied" in r for r in ingress["routes"])
            if named or closed:
                attention.append({"object": f"Ingress/{ingress['object']}", "fate": fate, "keys": named})
    return {
        "ingresses": _served(report["ingresses"]),
        "gatewayRoutes": _served(report["gatewayRoutes"]),
        "annotations": counts(annotations),
        "configmap": counts(keys),
        "differences": len(report["differences"]),
        "attention": attention,
    }


def _served(objects: list[dict[str, Any]]) -> dict[str, int]:
    served = sum(1 for o in objects if o["served"])
    return {"served": served, "skipped": len(objects) - served}


__all__ = ["APPLIED", "DENIED", "REPORTED", "audit"]
