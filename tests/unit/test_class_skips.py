"""
Why an Ingress of another class is not served, counted in the table (L{ingress.routing.selection.select_and_skip}).

Spec: networking.k8s.io/v1 IngressClass (spec.controller decides; the legacy kubernetes.io/ingress.class
annotation; the ingressclass.kubernetes.io/is-default-class annotation) and ingress-nginx's Helm chart,
whose IngressClass "nginx" has controller k8s.io/ingress-nginx: kept as it is, twingress serves none
of its Ingresses, and must say so.
"""

from __future__ import annotations

from ingress.routing.selection import CLAIMED, LEGACY_CLASS, NO_CLASS, NO_SUCH_CLASS
from tests.unit.objects import ingress, ingress_class, path, rule, table


def test_each_skipped_ingress_has_its_reason() -> None:
    legacy = ingress("legacy", rule("legacy.test", path("/")), cls=None, annotations={"kubernetes.io/ingress.class": "nginx"})
    routes = table(
        ingress_class("nginx", "k8s.io/ingress-nginx", default=True),
        ingress("chart", rule("chart.test", path("/")), cls="nginx"),
        ingress("chart2", rule("chart2.test", path("/")), cls="nginx"),
        ingress("typo", rule("typo.test", path("/")), cls="twingres"),
        ingress("none", rule("none.test", path("/")), cls=None),
        legacy,
        ingress("ours", rule("ours.test", path("/"))),
    )
    assert set(routes.table.hosts) == {"ours.test"}
    summary = routes.report.skipped_summary()
    assert summary == {
        (CLAIMED, "IngressClass nginx is claimed by controller k8s.io/ingress-nginx; twingress is twingress.io/ingress-controller (--controller-name)"): 2,
        (NO_SUCH_CLASS, "IngressClass twingres does not exist; twingress serves class twingress (--ingress-class)"): 1,
        (LEGACY_CLASS, "kubernetes.io/ingress.class nginx is not twingress's class twingress (--ingress-class)"): 1,
        (NO_CLASS, "no class, and the default IngressClass nginx is claimed by controller k8s.io/ingress-nginx; twingress is twingress.io/ingress-controller"): 1,
    }
    shown = routes.to_json()["skippedIngresses"]
    assert shown["count"] == 5 and {r["reason"]: r["ingresses"] for r in shown["reasons"]}[CLAIMED] == 2
    assert {r["reason"]: r["names"] for r in shown["reasons"]}[CLAIMED] == ["default/chart", "default/chart2"]


def test_taking_over_the_class_by_controller_name_serves_them() -> None:
    """docs/migration.md "Taking over the IngressClass": --controller-name k8s.io/ingress-nginx makes the chart's class ours."""
    routes = table(
        ingress_class("nginx", "k8s.io/ingress-nginx"),
        ingress("chart", rule("chart.test", path("/")), cls="nginx"),
        controller_name="k8s.io/ingress-nginx",
        class_name="nginx",
    )
    assert set(routes.table.hosts) == {"chart.test"} and routes.report.class_skipped == {}
