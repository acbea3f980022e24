"""
The collector kept off the routing table (ingress.speedups.heap): a table and its model make no
reference cycles, so freezing them leaks nothing when a newer table replaces them; a build freezes
what is alive and only that; the watch thaws for one full collection when the frozen objects have
doubled; the collector's pauses are counted.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet.task import Clock

from ingress.model.parse import state_from_objects
from ingress.observe.collector import CollectorMetrics
from ingress.routing import build
from ingress.routing.build_options import BuildOptions
from ingress.sources.files import load_documents
from ingress.speedups import ENABLED
from ingress.speedups.heap import FrozenWatch, frozen_after

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    """Each test starts and ends with nothing frozen and the collector on (the test process's own state)."""
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.set_debug(0)
    gc.enable()


class _Cycle:
    """Two of these holding each other: garbage only the collector finds."""

    def __init__(self) -> None:
        self.other: Any = None


def _cycle() -> weakref.ref[_Cycle]:
    a, b = _Cycle(), _Cycle()
    a.other, b.other = b, a
    return weakref.ref(a)


def _type_names(values: list[Any]) -> dict[str, int]:
    found: dict[str, int] = {}
    for value in values:
        name = f"{type(value).__module__}.{type(value).__qualname__}"
        found[name] = found.get(name, 0) + 1
    return found


def test_a_table_and_its_model_make_no_reference_cycles() -> None:
    """Every example (Ingresses with ingress-nginx annotations and a ConfigMap, the Gateway API) built, then dropped."""
    documents = [document for path in sorted(EXAMPLES.glob("*/*.yaml")) for document in load_documents(str(path))]
    assert len(documents) > 20
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    table = build(state_from_objects(documents), BuildOptions(nginx_configmap=("ingress-nginx", "ingress-nginx-controller"), reserved_ports={80: "http", 8080: "http"}))
    assert {"echo.example.com", "shop.example.com", "www.example.com"} <= set(table.table.hosts)  # Ingresses and HTTPRoutes
    del table
    gc.collect()
    found = _type_names(gc.garbage)
    gc.set_debug(0)
    gc.garbage.clear()
    assert not {name: count for name, count in found.items() if name.startswith("ingress.")}, found


def test_a_build_freezes_what_is_alive_and_collects_the_young_garbage_first() -> None:
    """With the speed-ups off (TWINGRESS_SPEEDUPS=0, make test's pure rerun) nothing is frozen: the collector as CPython runs it."""
    kept = [_Cycle() for _ in range(1000)]
    garbage = _cycle()
    before = gc.get_freeze_count()
    assert frozen_after(lambda: "table") == "table"
    assert gc.isenabled()
    if ENABLED:
        assert garbage() is None  # collected, not frozen: a frozen cycle would never be
        assert gc.get_freeze_count() >= before + len(kept)
    else:
        assert gc.get_freeze_count() == before


def test_a_failed_build_still_turns_the_collector_back_on() -> None:
    def failing() -> None:
        raise ValueError("bad snapshot")

    with pytest.raises(ValueError):
        frozen_after(failing)
    assert gc.isenabled()


def test_the_watch_thaws_for_one_full_collection_once_the_frozen_objects_doubled() -> None:
    registry, clock = CollectorRegistry(), Clock()
    metrics = CollectorMetrics(registry)
    watch = FrozenWatch(clock, metrics, interval=60.0, small_heap=0)
    watch.startService()
    try:
        gc.freeze()
        clock.advance(60)  # the first look: the baseline
        baseline = watch.baseline
        assert baseline > 1000  # this process's modules, at least
        leaked = _cycle()  # a cycle frozen by mistake, and then as much again alive
        grown = [_Cycle() for _ in range(baseline)]
        gc.freeze()
        clock.advance(60)
        assert registry.get_sample_value("twingress_gc_thaws_total") == 1
        assert leaked() is None  # the full collection found it
        assert watch.baseline > len(grown)  # what is alive is frozen again
        clock.advance(60)  # no growth since: no thaw
        assert registry.get_sample_value("twingress_gc_thaws_total") == 1
    finally:
        watch.stopService()


def test_collections_are_timed_and_their_findings_counted_by_generation() -> None:
    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry)
    metrics.install()
    try:
        _cycle()
        gc.collect()
    finally:
        metrics.uninstall()
    assert registry.get_sample_value("twingress_gc_pause_seconds_count", {"generation": "2"}) == 1
    assert registry.get_sample_value("twingress_gc_collected_objects_total", {"generation": "2"}) >= 2
    gc.collect()  # uninstalled: not counted
    assert registry.get_sample_value("twingress_gc_pause_seconds_count", {"generation": "2"}) == 1
