"""L{ingress.observe.exposition}: counters named the Go client's way keep their name on the TYPE line."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from ingress.observe.exposition import exposition


def _counter(name: str, sample: str, value: float) -> Metric:
    family = Metric(name, "help", "counter")
    family.add_sample(sample, {"a": "b"}, value)
    return family


def test_a_counter_without_total_is_typed_under_its_own_name() -> None:
    text = exposition([_counter("nginx_ingress_controller_requests", "nginx_ingress_controller_requests", 2)]).decode()
    assert text == (
        "# HELP nginx_ingress_controller_requests help\n"
        "# TYPE nginx_ingress_controller_requests counter\n"
        'nginx_ingress_controller_requests{a="b"} 2.0\n'
    )
    (family,) = text_string_to_metric_families(text)
    assert (family.name, family.type, len(family.samples)) == ("nginx_ingress_controller_requests", "counter", 1)


def test_other_families_are_prometheus_client_s_in_their_order() -> None:
    registry = CollectorRegistry()
    Counter("twingress_things", "things", ["kind"], registry=registry).labels("x").inc()
    Counter("twingress_none", "none yet", ["kind"], registry=registry)  # no label set: HELP and TYPE only
    families = [*registry.collect(), _counter("go_named", "go_named", 1), _counter("x_requests", "x_requests_total", 3)]
    text = exposition(families).decode()
    assert [line for line in text.splitlines() if line.startswith("# TYPE") and "_created" not in line] == [
        "# TYPE twingress_things_total counter", "# TYPE twingress_none_total counter", "# TYPE go_named counter", "# TYPE x_requests_total counter",
    ]
    assert 'x_requests_total{a="b"} 3.0' in text.splitlines()
