# -*- test-case-name: tests.unit.test_exposition -*-
"""
The /metrics body: prometheus_client's text format, and counters named the Go client's way.

prometheus_client models a counter as a family C{x} whose samples are C{x_total}, and writes its
HELP and TYPE lines as C{x_total}.  ingress-nginx's counters (C{--nginx-metrics true})
C{nginx_ingress_controller_requests}, C{_success} and C{_errors} have no C{_total}: client_golang
writes C{# TYPE nginx_ingress_controller_requests counter} over samples of that very name
(ingress-nginx's internal/ingress/metric/collectors/socket_test.go and controller_test.go).  Left to
prometheus_client their TYPE line would name C{..._requests_total}, and every parser (its own,
expfmt, Prometheus's scraper) would read an empty counter and an untyped family of samples.  So a
counter whose samples carry the family's own name is written here under that name, as client_golang
writes it; every other family is prometheus_client's, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric

from ingress.observe.merge import Merged


def named_as_go(family: Metric) -> bool:
    """A counter whose samples are named as the family is (C{requests}, not C{requests_total})."""
    return family.type == "counter" and bool(family.samples) and all(sample.name == family.name for sample in family.samples)


def _go_counter(family: Metric) -> bytes:
    """HELP, TYPE and samples under the family's own name (written as a gauge, which keeps the name, then typed)."""
    gauge = Metric(family.name, family.documentation, "gauge")
    gauge.samples = family.samples
    text = generate_latest(Merged([gauge]))
    return text.replace(f"# TYPE {family.name} gauge\n".encode(), f"# TYPE {family.name} counter\n".encode(), 1)


def exposition(families: Iterable[Metric]) -> bytes:
    """The text format (version 0.0.4) of C{families}, in their order."""
    out: list[bytes] = []
    run: list[Metric] = []
    for family in families:
        if named_as_go(family):
            if run:
                out.append(generate_latest(Merged(run)))
                run = []
            out.append(_go_counter(family))
        else:
            run.append(family)
    if run:
        out.append(generate_latest(Merged(run)))
    return b"".join(out)
