"""The twistd plugin "ingress": a declaration only; everything lives in L{ingress.tap}."""

from twisted.application.service import ServiceMaker

twingress = ServiceMaker(
    "twingress",
    "ingress.tap",
    "Kubernetes ingress proxy with an embedded controller",
    "ingress",
)
