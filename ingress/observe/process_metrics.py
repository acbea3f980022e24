# -*- test-case-name: tests.proxy.test_exposition -*-
"""
The process's own series, in every mode: C{process_*} and C{twingress_build_info}.

Operators alert on C{process_start_time_seconds} (a restart), C{process_resident_memory_bytes}
(a leak), C{rate(process_cpu_seconds_total[5m])} and C{process_open_fds / process_max_fds}, and
read versions from a build-info gauge; they are exposed whatever C{--nginx-metrics} says.

Each series describes one process, as the C{process_} families are defined: with worker
processes (C{--workers N}) the primary's series carry no extra label and each worker's carry
C{worker="<index>"} (the label of C{twingress_worker_up}), so nothing is summed or hidden: the
primary's start time is the pod's, and the workers (which do the serving) show their own memory
and CPU.  C{sum(rate(process_cpu_seconds_total[5m]))} is then the whole pod's CPU.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from typing import Optional

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ingress import __version__


class ProcessMetrics(Collector):
    """prometheus_client's C{ProcessCollector} for this process, labelled with its worker index in a worker."""

    def __init__(self, worker: Optional[int] = None) -> None:
        self._process = ProcessCollector(registry=None)
        self._labels = {} if worker is None else {"worker": str(worker)}

    def collect(self) -> Iterator[Metric]:
        for family in self._process.collect():
            if not self._labels:
                yield family
                continue
            labelled = Metric(family.name, family.documentation, family.type, family.unit)
            for sample in family.samples:
                labelled.add_sample(sample.name, {**sample.labels, **self._labels}, sample.value, sample.timestamp)
            yield labelled


def register_build_info(registry: CollectorRegistry) -> Gauge:
    """C{twingress_build_info{version, python, implementation} 1}: which twingress runs on which interpreter."""
    info = Gauge(
        "twingress_build_info",
        "Always 1: the twingress version and the Python it runs on (version, implementation)",
        ["version", "python", "implementation"],
        registry=registry,
    )
    info.labels(__version__, platform.python_version(), platform.python_implementation()).set(1)
    return info
