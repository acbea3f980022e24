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


def test_nginx_annotations_become_warning_events_and_apply_live(kube: Kube, namespace: str, twingress) -> None:
    """Issue 13: unsupported ingress-nginx keys and snippets are Warnings; a supported one applies live; an invalid one takes the Ingress out."""
    proxy = start_controller(twingress, namespace, "--publish-status-address", "192.0.2.71")
    host = host_for(namespace, "moved")
    body = kube.ingress_body(namespace, "moved", host, "web")
    body["metadata"]["annotations"] = {"nginx.ingress.kubernetes.io/proxy-buffering": "on", "nginx.ingress.kubernetes.io/server-snippet": "more_set_headers 'X-Edge: 1';"}
    kube.networking.create_namespaced_ingress(namespace, body)
    wait_until(
        lambda: len(events_about(kube, namespace, "moved", "UnsupportedAnnotation")) == 2,
        what="a Warning for the unsupported key and one for the snippet",
    )
    notes = sorted(e["note"] for e in events_about(kube, namespace, "moved", "UnsupportedAnnotation"))
    assert "nginx.ingress.kubernetes.io/proxy-buffering is not supported" in notes[0]
    assert "nginx.ingress.kubernetes.io/server-snippet is never executed" in notes[1]

    # ingress-nginx "Permanent Redirect", added to the live Ingress
    kube.networking.patch_namespaced_ingress("moved", namespace, {"metadata": {"annotations": {"nginx.ingress.kubernetes.io/permanent-redirect": "https://new.example/"}}})
    response = proxy.wait_status(host, 301)
    assert response.headers["location"] == "https://new.example/"

    # an unreadable code: a Warning, and the Ingress's paths leave the table (never a silent default)
    kube.networking.patch_namespaced_ingress("moved", namespace, {"metadata": {"annotations": {"nginx.ingress.kubernetes.io/permanent-redirect-code": "999"}}})
    invalid = wait_event(kube, namespace, "moved", "InvalidAnnotation")
    assert "permanent-redirect-code" in invalid["note"] and "'999'" in invalid["note"]
    proxy.wait_status(host, 404)
