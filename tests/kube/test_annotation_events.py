"""
Unknown or unreadable twingress annotations become Warning Events on their Ingress, written by
the Lease holder to the real apiserver (issue "Trust at the edge": never silently ignored).
"""

from __future__ import annotations

from tests.kube.api import Kube
from tests.kube.controller_support import events_about, start_controller, wait_event
from tests.kube.twingress import host_for, wait_until


def test_unknown_and_unreadable_annotations_become_warning_events(kube: Kube, namespace: str, twingress) -> None:
    proxy = start_controller(twingress, namespace, "--publish-status-address", "192.0.2.70")
    body = kube.ingress_body(namespace, "typo", host_for(namespace, "typo"), "web")
    body["metadata"]["annotations"] = {"twingress.io/ssl-redirekt": "false", "twingress.io/hsts-max-age": "forever"}
    kube.networking.create_namespaced_ingress(namespace, body)

    unknown = wait_event(kube, namespace, "typo", "UnknownAnnotation")
    invalid = wait_event(kube, namespace, "typo", "InvalidAnnotation")
    assert (unknown["type"], unknown["regarding"]["kind"]) == ("Warning", "Ingress")
    assert "twingress.io/ssl-redirekt" in unknown["note"]
    assert "twingress.io/hsts-max-age" in invalid["note"] and "'forever'" in invalid["note"]
    problems = [(p["object"], p["reason"]) for p in proxy.routes()["problems"]]
    assert (f"Ingress/{namespace}/typo", "UnknownAnnotation") in problems

    # A live change: another typo is a new Warning; the earlier ones are not repeated for it.
    kube.networking.patch_namespaced_ingress("typo", namespace, {"metadata": {"annotations": {"twingress.io/oops": "1"}}})
    wait_until(
        lambda: any("twingress.io/oops" in e["note"] for e in events_about(kube, namespace, "typo", "UnknownAnnotation")),
        what="a Warning naming the new unknown annotation",
    )
    invalid_events = events_about(kube, namespace, "typo", "InvalidAnnotation")
    assert len(invalid_events) == 1, invalid_events
