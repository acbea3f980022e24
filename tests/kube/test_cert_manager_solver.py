"""
cert-manager's HTTP-01 solver Ingress through the real apiserver (issue 64): created as cert-manager
creates it (tests/cert_manager.py cites its source) beside the host's own Ingress that forces HTTPS,
the token path answers over plain HTTP from the solver's backend and every other path redirects; the
solver's removal (cert-manager deletes it after the validation) ends its exemption with it.  The
ownerReference to the Challenge is left out: no Challenge exists here, and the garbage collector
would be free to delete the Ingress it owns.
"""

from __future__ import annotations

import pytest

from tests.cert_manager import HOST, SOLVER, SOLVER_PORT, TOKEN, solver_ingress
from tests.proxy.certs import CertificateAuthority, tls_secret

pytestmark = pytest.mark.kube

CHALLENGE = f"/.well-known/acme-challenge/{TOKEN}"


def test_the_solvers_token_answers_over_http_beside_a_forced_redirect(kube, namespace, echo, twingress):
    site, solver = echo("pod-site"), echo("pod-solver")
    kube.backend(namespace, "shop", [site])
    kube.backend(namespace, SOLVER, [solver], port=SOLVER_PORT)
    kube.core.create_namespaced_secret(namespace, tls_secret("shop-tls", CertificateAuthority("shop-ca").issue([HOST]), namespace=namespace))
    own = kube.ingress_body(namespace, "shop", HOST, "shop")
    own["metadata"]["annotations"] = {"nginx.ingress.kubernetes.io/force-ssl-redirect": "true"}
    own["spec"]["tls"] = [{"hosts": [HOST], "secretName": "shop-tls"}]
    kube.networking.create_namespaced_ingress(namespace, own)
    kube.networking.create_namespaced_ingress(namespace, solver_ingress("ingressClassName", namespace=namespace, owned=False))
    proxy = twingress()

    answered = proxy.wait_status(HOST, 200, CHALLENGE, backend=solver.name)
    assert answered.json is not None and answered.json["path"] == CHALLENGE
    for target in ("/", "/cart", "/.well-known/acme-challenge/another-token"):
        redirected = proxy.wait_status(HOST, 308, target)
        assert redirected.headers["location"] == f"https://{HOST}{target}", redirected.headers

    kube.networking.delete_namespaced_ingress(SOLVER, namespace)  # the challenge is done: cert-manager deletes its Ingress
    assert proxy.wait_status(HOST, 308, CHALLENGE).headers["location"] == f"https://{HOST}{CHALLENGE}"
