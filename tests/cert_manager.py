"""
cert-manager's HTTP-01 solver objects, as cert-manager writes them, for the tests that serve them
(tests/proxy/test_cert_manager_solver.py, tests/kube/test_cert_manager_solver.py).

Cited from cert-manager/cert-manager at commit 2d0d7f7f74241a9cbf79f0e2a7bb247238ee09fd ("@CM"):
pkg/issuer/acme/http/ingress.go buildIngressResource (GenerateName C{cm-acme-http-solver-}, the
annotation C{nginx.ingress.kubernetes.io/whitelist-source-range: 0.0.0.0/0,::/0}, the class from the
Issuer's C{http01.ingress.class} as the C{kubernetes.io/ingress.class} annotation or from
C{http01.ingress.ingressClassName} as C{spec.ingressClassName}, never both) and ingressPath (the path
C{/.well-known/acme-challenge/TOKEN}, pkg/issuer/acme/http/solver/constants.go HTTPChallengePath;
C{pathType: ImplementationSpecific}, or Exact behind the ACMEHTTP01IngressPathTypeExact gate; the
backend port 8089, http.go acmeSolverListenPort, which service.go's Service also listens on); the
labels of pod.go podLabels (adler32 of the domain and of the token, pkg/apis/acme/v1/types.go keys).
"""

from __future__ import annotations

import zlib
from typing import Any

HOST = "shop.example.com"
TOKEN = "rSoaUjIgDrpD3pQ6oSmKLQ2dvTV6KK1R5zeR1zVJS5E"  # base64url, as an ACME server's tokens are
SOLVER = "cm-acme-http-solver-x7k2q"  # GenerateName "cm-acme-http-solver-" and the apiserver's five characters
SOLVER_PORT = 8089  # @CM http.go acmeSolverListenPort
CHALLENGE_OWNER = {
    "apiVersion": "acme.cert-manager.io/v1", "kind": "Challenge", "name": "shop-tls-1-2345-678", "uid": "0b6c1c2e-6f0e-4a0e-9b1a-1f6f3c1d2e3f",
    "controller": True, "blockOwnerDeletion": True,
}


def solver_ingress(class_by: str, path_type: str = "ImplementationSpecific", namespace: str = "default", owned: bool = True) -> dict[str, Any]:
    """
    The solver's Ingress as @CM buildIngressResource writes it for TOKEN on HOST.  C{owned}: with the
    ownerReference to its Challenge (an apiserver's garbage collector would delete it there: no Challenge exists).
    """
    annotations = {"nginx.ingress.kubernetes.io/whitelist-source-range": "0.0.0.0/0,::/0"}
    spec: dict[str, Any] = {}
    if class_by == "annotation":  # http01.ingress.class
        annotations["kubernetes.io/ingress.class"] = "twingress"
    else:  # http01.ingress.ingressClassName
        spec["ingressClassName"] = "twingress"
    path = {"path": f"/.well-known/acme-challenge/{TOKEN}", "pathType": path_type,
            "backend": {"service": {"name": SOLVER, "port": {"number": SOLVER_PORT}}}}
    ingress: dict[str, Any] = {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {
            "name": SOLVER, "namespace": namespace, "annotations": annotations,
            "labels": {
                "acme.cert-manager.io/http-domain": str(zlib.adler32(HOST.encode())),
                "acme.cert-manager.io/http-token": str(zlib.adler32(TOKEN.encode())),
                "acme.cert-manager.io/http01-solver": "true",
            },
        },
        "spec": {**spec, "rules": [{"host": HOST, "http": {"paths": [path]}}]},
    }
    if owned:
        ingress["metadata"]["ownerReferences"] = [CHALLENGE_OWNER]
    return ingress
