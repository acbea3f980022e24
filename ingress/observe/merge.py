# -*- test-case-name: tests.unit.test_merge -*-
"""
One /metrics from several processes: the primary's families and every worker's, combined.

Counters and histograms (and their sums and counts) add up: N requests through
four workers read N.  Gauges of how many things are open add up too; other
gauges (a certificate's expiry, the table generation) are the same fact seen by
every process, so the largest value stands.  A counter's C{_created} timestamp
is the earliest.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import Metric

from ingress.observe import nginx_metrics

SUMMED_GAUGES = frozenset({"twingress_open_connections", "twingress_stream_active", "twingress_gc_frozen_objects", "twingress_upstream_idle_connections"}) | nginx_metrics.SUMMED_GAUGES


def merge(sources: Iterable[Iterable[Metric]]) -> list[Metric]:
    """Families by name, samples combined by (sample name, labels)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for source in sources:
        for family in source:
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                values[family.name] = {}
            summed = family.type != "gauge" or family.name in SUMMED_GAUGES
            found = values[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                old = found.get(key)
                if old is None:
                    found[key] = sample.value
                elif sample.name.endswith("_created"):
                    found[key] = min(old, sample.value)
                else:
                    found[key] = old + sample.value if summed else max(old, sample.value)
    for name, family in families.items():
        for (sample_name, labels), value in values[name].items():
            family.add_sample(sample_name, dict(labels), value)
    return list(families.values())


class Merged:
    """What C{generate_latest} reads: a C{collect()} of already merged families."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)
