"""
Gateway listeners on ports of their own against a real kube-apiserver with the release's CRDs
(sigs.k8s.io/gateway-api v1.6.3): the status the Lease holder writes for a listener served on its
own port, for listeners that conflict on a port (apis/v1/gateway_types.go:
ListenerConditionConflicted, ListenerReasonProtocolConflict), and for a port another process holds
(ListenerReasonPortUnavailable), and the traffic on the port that is served.
"""

from __future__ import annotations

import socket
from typing import Any, Optional

import pytest

from tests.kube.api import Kube
from tests.kube.gateway_support import GatewayAPI, conditions, gateway_body, route_body, start
from tests.kube.twingress import get, host_for, wait_until
from tests.support import free_port

pytestmark = pytest.mark.kube


def test_listener_ports_conflicts_and_bind_failures(kube: Kube, namespace: str, echo: Any, twingress: Any, gateway_api: GatewayAPI, gateway_class: str) -> None:
    """
    One Gateway: HTTP on a free port (served there), TCP on the same port (Conflicted: ProtocolConflict),
    HTTP on a port another process holds (PortUnavailable once binding failed).
    """
    taken = socket.socket()
    taken.bind(("0.0.0.0", 0))
    taken.listen()
    try:
        proxy = start(twingress, namespace)
        kube.backend(namespace, "web", [echo("pod-alt")])
        host = host_for(namespace, "alt")
        alt_port, taken_port = free_port(), taken.getsockname()[1]
        listeners = [
            {"name": "alt", "port": alt_port, "protocol": "HTTP"},
            {"name": "raw", "port": alt_port, "protocol": "TCP"},
            {"name": "taken", "port": taken_port, "protocol": "HTTP"},
        ]
        gateway_api.create("gateways", gateway_body("gw", gateway_class, 0, listeners), namespace)
        gateway_api.create("httproutes", route_body("web", [host], [{"backendRefs": [{"name": "web", "port": 80}]}], [{"name": "gw", "sectionName": "alt"}]), namespace)

        def served() -> Optional[bool]:
            response = get(alt_port, host)
            assert response.status == 200 and response.backend == "pod-alt", response
            return True

        wait_until(served, what=f"the route served on port {alt_port}")
        assert proxy.get(host).status == 404  # not on --http

        def written() -> Optional[dict[str, dict[str, tuple[str, str, int]]]]:
            status = gateway_api.read("gateways", "gw", namespace).get("status") or {}
            found = {listener["name"]: conditions(listener["conditions"]) for listener in status.get("listeners") or []}
            return found if found.get("taken", {}).get("Accepted", ("",))[0] == "False" else None

        found = wait_until(written, what="the listeners' status")
        assert found["alt"] == {
            "Accepted": ("True", "Accepted", 1), "Programmed": ("True", "Programmed", 1), "ResolvedRefs": ("True", "ResolvedRefs", 1),
            "Conflicted": ("False", "NoConflicts", 1),
        }
        assert found["raw"]["Conflicted"] == ("True", "ProtocolConflict", 1)
        assert found["raw"]["Accepted"] == ("False", "PortUnavailable", 1)
        assert found["taken"]["Accepted"] == ("False", "PortUnavailable", 1)
        assert found["taken"]["Programmed"] == ("False", "Invalid", 1)
        gateway = conditions(gateway_api.read("gateways", "gw", namespace)["status"]["conditions"])
        assert gateway["Accepted"] == ("True", "ListenersNotValid", 1)
    finally:
        taken.close()
