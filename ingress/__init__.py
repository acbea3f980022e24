"""twingress: a Kubernetes ingress proxy with an embedded controller, on Twisted."""

__version__ = "0.1.0"
