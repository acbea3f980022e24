"""
ACME in a cluster (issue 64): the leader orders, every replica answers, against the real apiserver and Pebble.

Two twingress replicas (two processes, each with two workers) listen on the same --http and --https
ports of two pod-like addresses, as two hostNetwork pods of a DaemonSet on two nodes; their Pods are
API objects (ready, hostIP the replica's address: no kubelet runs, the test writes their status).
pebble-challtestsrv answers every name with the NON-leader's address, so Pebble's validation reaches
the replica that placed no order: the certificate is issued only if the leader's tokens reached the
other replica's table and workers.  Then: the Secret holds the chain (verified against Pebble's root,
from its management API, by a TLS client of each replica by SNI), someone else's Secret and a
cert-manager Ingress are left alone.  Then a node whose listener does not answer (its Pod says
ready, nothing listens on its address): the leader's next order fails with an Event naming it, and
no challenge is asked of Pebble; its backoff is kept on the account Secret beside the order's URL.
The leader is killed in that backoff, after newOrder and before the certificate: the next leader
finds the account Secret (Pebble makes no new account), waits the kept backoff out (its first order
comes 30 s after the failure, not at its takeover, through its status write of the Ingress and three
changes of it, each synced by the ACME loop) and resumes that order by its URL: one newOrder in
Pebble's log for the second certificate.
"""

from __future__ import annotations

import base64
import datetime
import json
import re
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.acme_support import Pebble
from tests.kube.api import Kube
from tests.kube.controller_support import controller_args, writes
from tests.kube.test_leader import holder_process, wait_leader
from tests.kube.twingress import KubeTwingress, next_pod_ip, wait_until
from tests.support import ROOT, free_port, twistd_command

POD_LABELS = {"app.kubernetes.io/name": "twingress"}
FAILED = re.compile(r"^(\S+) .*acme: ordering a certificate for second\.example\.com failed: ", re.MULTILINE)
ISSUED = re.compile(r"acme: certificate for (.+?) issued into Secret (\S+) in ([\d.]+)s, (\d+) requests to the ACME server \((.+?)\)")
ORDER_TIMEOUT = 90.0  # an order (two hosts), with the tokens' round trip through the apiserver to both replicas, on a loaded machine


@pytest.fixture
def pebble(tmp_path: Path) -> Iterator[Pebble]:
    made = Pebble(tmp_path / "pebble")
    yield made
    made.stop()


@pytest.fixture
def node(kube: Kube, namespace: str) -> Iterator[str]:
    """A Node for the replicas' Pods to be bound to (a Pod on a Node that does not exist is collected)."""
    name = f"acme-{namespace}"[:63]
    kube.core.create_node({"metadata": {"name": name}})
    yield name
    kube.core.delete_node(name)


def acme_ingress(namespace: str, name: str, hosts: list[str], secret: str, **annotations: str) -> dict:
    body = Kube.ingress_body(namespace, name, hosts[0], "app")
    body["metadata"]["annotations"] = {"twingress.io/acme": "true", **annotations}
    body["spec"]["tls"] = [{"hosts": hosts, "secretName": secret}]
    return body


def ready_pod(kube: Kube, namespace: str, name: str, node: str, host_ip: str, ready: bool = True) -> None:
    """One replica's Pod as the status controller sees it (created once, its status written as a kubelet would)."""
    try:
        kube.core.create_namespaced_pod(namespace, {
            "metadata": {"name": name, "labels": POD_LABELS},
            "spec": {"nodeName": node, "automountServiceAccountToken": False, "containers": [{"name": "twingress", "image": "twingress:test"}]},
        })
    except ApiException as error:
        if error.status != 409:
            raise
    status = {"phase": "Running", "hostIP": host_ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    kube.core.patch_namespaced_pod_status(name, namespace, {"status": status})


def secret_or_none(kube: Kube, namespace: str, name: str) -> Any:
    try:
        return kube.core.read_namespaced_secret(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def events_of(kube: Kube, namespace: str, ingress: str) -> list[Any]:
    found = client.EventsV1Api(kube.api).list_namespaced_event(namespace).items
    return [event for event in found if event.regarding and event.regarding.kind == "Ingress" and event.regarding.name == ingress]


def event(kube: Kube, namespace: str, ingress: str, reason: str, timeout: float = 30.0) -> Any:
    return wait_until(lambda: next((e for e in events_of(kube, namespace, ingress) if e.reason == reason), None), timeout=timeout, what=f"Event {reason} on {ingress}")


def served_certificate(address: str, port: int, host: str, root: Path) -> x509.Certificate:
    """The certificate a replica's TLS listener gives C{host} by SNI, its chain verified against C{root}."""
    context = ssl.create_default_context(cafile=str(root))
    with socket.create_connection((address, port), timeout=5) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def issued_line(replica: KubeTwingress, pebble: Pebble, hosts: str) -> re.Match[str]:
    def found() -> re.Match[str] | None:
        return next((m for m in ISSUED.finditer(replica.log()) if m.group(1) == hosts), None)

    try:
        match: re.Match[str] = wait_until(found, timeout=ORDER_TIMEOUT, what=f"the certificate for {hosts} issued")
    except AssertionError as error:
        raise AssertionError(f"{error}\ntwingress:\n{replica.log()[-5000:]}\npebble:\n{pebble.log()[-3000:]}") from None
    return match


def test_the_leader_orders_every_replica_answers_and_the_next_leader_keeps_the_account(
    kube: Kube, namespace: str, twingress: Callable[..., KubeTwingress], pebble: Pebble, node: str, tmp_path: Path,
) -> None:
    try:
        kube.core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})  # the Pods need it
    except ApiException as error:
        if error.status != 409:
            raise
    kube.create_service(namespace, "app")
    http_port, https_port = free_port(), free_port()
    addresses = [next_pod_ip(), next_pod_ip()]
    acme = ("--acme-directory", pebble.directory, "--acme-ca-file", str(pebble.ca_file), "--acme-agree-tos", "true", "--acme-email", "ops@example.com")

    def replica(address: str) -> KubeTwingress:
        listeners = ("--http", f"tcp:{http_port}:interface={address}", "--https", f"tcp:{https_port}:interface={address}", "--workers", "2")
        return twingress(*controller_args(namespace, *acme, *listeners))

    replicas = [replica(address) for address in addresses]
    address_of = dict(zip((id(r) for r in replicas), addresses, strict=True))
    for index, address in enumerate(addresses):
        ready_pod(kube, namespace, f"twingress-{index}", node, address)
    leader = wait_leader(kube, namespace, replicas)
    follower = next(r for r in replicas if r is not leader)
    pebble.start(http_port, https_port, address=address_of[id(follower)])  # validation reaches the replica that placed no order
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pebble.root_pem())

    # someone else's Secret in the way, and cert-manager's Ingress: neither touched
    theirs = kube.core.create_namespaced_secret(namespace, {
        "metadata": {"name": "taken-tls"}, "type": "kubernetes.io/tls",
        "data": {"tls.crt": base64.b64encode(b"someone else's").decode(), "tls.key": base64.b64encode(b"someone else's").decode()},
    })
    kube.networking.create_namespaced_ingress(namespace, acme_ingress(namespace, "taken", ["taken.example.com"], "taken-tls"))
    kube.networking.create_namespaced_ingress(namespace, acme_ingress(namespace, "managed", ["cm.example.com"], "cm-tls", **{"cert-manager.io/cluster-issuer": "letsencrypt"}))

    # what cannot be ordered: an Event each, nothing else; an Ingress without the annotation: nothing at all
    wildcard = acme_ingress(namespace, "wild", ["*.wild.example.com"], "wild-tls")
    no_tls = acme_ingress(namespace, "notls", ["notls.example.com"], "unused")
    del no_tls["spec"]["tls"]
    plain = acme_ingress(namespace, "plain", ["plain.example.com"], "plain-tls")
    del plain["metadata"]["annotations"]
    for body in (wildcard, no_tls, plain):
        kube.networking.create_namespaced_ingress(namespace, body)

    started, requests_before = time.monotonic(), pebble.requests()
    kube.networking.create_namespaced_ingress(namespace, acme_ingress(namespace, "site", ["site.example.com", "www.site.example.com"], "site-tls"))
    line = issued_line(leader, pebble, "site.example.com, www.site.example.com")
    secret = wait_until(lambda: secret_or_none(kube, namespace, "site-tls"), what="the certificate's Secret")
    assert secret.type == "kubernetes.io/tls"
    assert secret.metadata.labels == {"app.kubernetes.io/managed-by": "twingress"}
    assert secret.metadata.annotations["acme.twingress.io/hosts"] == "site.example.com,www.site.example.com"
    assert secret.metadata.annotations["acme.twingress.io/issuer"] == pebble.directory
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret.data["tls.crt"]))
    assert secret.metadata.annotations["acme.twingress.io/not-after"] == leaf.not_valid_after_utc.isoformat()
    check_at = datetime.datetime.fromisoformat(secret.metadata.annotations["acme.twingress.io/renewal-info-at"])  # RFC 9773 4.3.3
    assert datetime.timedelta(hours=5) < check_at - datetime.datetime.now(datetime.UTC) <= datetime.timedelta(hours=6), check_at  # Pebble's Retry-After
    for each in replicas:  # both replicas serve it by SNI, the chain verified against Pebble's root
        served = wait_until(lambda each=each: served_certificate(address_of[id(each)], https_port, "www.site.example.com", root), timeout=30, what="the certificate by SNI")
        assert served.serial_number == leaf.serial_number
    first_certificate = time.monotonic() - started
    print(
        f"first certificate: {first_certificate:.1f}s from the Ingress written to served by SNI by both replicas; the order: {line.group(3)}s,"
        f" {line.group(4)} requests counted by the client, {pebble.requests() - requests_before} requests in Pebble's log"
    )
    assert "ordering a certificate" not in follower.log()
    assert writes(follower) == 0
    assert line.group(5) == "a new account" and pebble.new_accounts() == 1
    challenges = kube.core.read_namespaced_config_map("twingress-acme-challenges", namespace)
    assert not challenges.data, challenges.data  # the tokens withdrawn after the order

    refused = event(kube, namespace, "taken", "AcmeSecretNotOurs")
    assert refused.type == "Warning" and "taken-tls" in refused.note
    assert kube.core.read_namespaced_secret("taken-tls", namespace).metadata.resource_version == theirs.metadata.resource_version
    assert "Ingress taken: Secret" not in leader.log() and f"Ingress {namespace}/taken: Secret {namespace}/taken-tls exists" in leader.log()
    assert leader.metric("twingress_acme_refused_total", reason="secret-not-ours") >= 1
    assert secret_or_none(kube, namespace, "cm-tls") is None and not events_of(kube, namespace, "managed")
    assert leader.log().count(f"acme: Ingress {namespace}/managed carries cert-manager.io/cluster-issuer: cert-manager's") == 1

    assert "DNS-01" in event(kube, namespace, "wild", "AcmeWildcard").note
    assert "needs spec.tls" in event(kube, namespace, "notls", "AcmeNeedsTLS").note
    assert leader.has_host("notls.example.com") and follower.has_host("notls.example.com")  # served as any Ingress
    for name in ("wild-tls", "plain-tls", "unused"):
        assert secret_or_none(kube, namespace, name) is None, name
    assert not events_of(kube, namespace, "plain")
    assert all(f"ordering a certificate for {host}" not in leader.log() for host in ("plain.", "*.wild", "notls.", "taken.", "cm."))

    # A node that does not answer the token (its Pod ready, nothing listening): the order of "second" fails naming it, before any validation.
    accounts = [s for s in kube.core.list_namespaced_secret(namespace).items if s.metadata.name.startswith("twingress-acme-account-")]
    assert len(accounts) == 1, [s.metadata.name for s in accounts]
    account = accounts[0]
    stale = next_pod_ip()
    ready_pod(kube, namespace, "twingress-stale", node, stale)
    wait_until(lambda: stale in {entry.ip for entry in kube.networking.read_namespaced_ingress("site", namespace).status.load_balancer.ingress or ()},
               what="the leader seeing the third node's Pod (the Ingress status lists it)")
    requests_before, orders_before, answered_before = pebble.requests(), _new_orders(pebble), pebble.log().count("POST /chalZ/")
    kube.networking.create_namespaced_ingress(namespace, acme_ingress(namespace, "second", ["second.example.com"], "second-tls"))
    failed = event(kube, namespace, "second", "AcmeOrderFailed", timeout=ORDER_TIMEOUT)
    assert f"{stale}:{http_port}" in failed.note and all(address not in failed.note for address in addresses), failed.note
    assert pebble.log().count("POST /chalZ/") == answered_before, "no challenge was answered: Pebble spent no validation"
    failure = wait_until(lambda: FAILED.search(leader.log()), what="the leader's failure line")
    kept = wait_until(lambda: _kept(kube, namespace, account.metadata.name), what="the order's URL and backoff on the account Secret")
    assert json.loads(kept["backoff"])["failures"] == 1 and kept["order"].startswith(pebble.directory.rsplit("/", 1)[0]), kept

    # The leader is killed in that backoff, its order placed and not finished; the third node's Pod goes unready (its kubelet's word).
    leader.process.send_signal(signal.SIGKILL)
    leader.process.wait()
    ready_pod(kube, namespace, "twingress-stale", node, stale, ready=False)
    ready_pod(kube, namespace, "twingress-" + str(addresses.index(address_of[id(leader)])), node, address_of[id(leader)], ready=False)
    pebble.resolve_to(address_of[id(follower)])
    wait_until(lambda: holder_process(kube, namespace, [follower]), timeout=40, what="the follower taking the Lease")
    wait_until(lambda: "waits the backoff kept on the account Secret (1 failed orders)" in follower.log(), timeout=20,
               what="the next leader reading the kept backoff (it took over inside the 30 s)")
    wait_until(lambda: {entry.ip for entry in kube.networking.read_namespaced_ingress("second", namespace).status.load_balancer.ingress or ()}
               == {address_of[id(follower)]}, what="the next leader's status write of the second Ingress (a sync of it)")
    syncs = _acme_syncs(follower)
    for touch in range(3):  # each change is a sync of the ACME loop in the kept backoff, and none orders
        kube.networking.patch_namespaced_ingress("second", namespace, {"metadata": {"annotations": {"example.com/touched": str(touch)}}})
        wait_until(lambda syncs=syncs: _acme_syncs(follower) > syncs, timeout=20, what=f"the ACME loop's sync of change {touch}")
        syncs = _acme_syncs(follower)
    again = issued_line(follower, pebble, "second.example.com")
    ordered = _stamps(follower.log(), "acme: ordering a certificate for second.example.com from")
    waited = (ordered[0] - _stamp(failure.group(1))).total_seconds()
    assert len(ordered) == 1 and waited >= 29, f"the next leader ordered {waited:.0f}s after the failure, inside its 30 s backoff"  # stamps to the second
    assert f"acme: resuming the order {kept['order']} (pending)" in follower.log(), follower.log()[-4000:]
    assert _new_orders(pebble) - orders_before == 1, "one newOrder for the second certificate: the next leader resumed it"
    assert again.group(5) == "its existing account", again.group(0)
    assert pebble.new_accounts() == 1, "the next leader made no new account"
    after = kube.core.read_namespaced_secret(account.metadata.name, namespace)
    assert (after.metadata.uid, after.data) == (account.metadata.uid, account.data)  # the same key
    assert not _kept(kube, namespace, account.metadata.name), "the finished order's URL and backoff are forgotten"
    served = wait_until(lambda: served_certificate(address_of[id(follower)], https_port, "second.example.com", root), timeout=30, what="the second certificate by SNI")
    assert served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName) == ["second.example.com"]
    print(f"after the leader was killed in its backoff: the next leader ordered {waited:.0f}s after the failure, resumed the order: {again.group(3)}s,"
          f" {again.group(4)} requests counted by the client, {pebble.requests() - requests_before} in Pebble's log (with the failed one), 1 newOrder, 0 new accounts")


def _acme_syncs(replica: KubeTwingress) -> float:
    return replica.metric("twingress_controller_syncs_total", controller="acme")


def _new_orders(pebble: Pebble) -> int:
    return len(re.findall(r"^Pebble \S+ \S+ POST /order-plz -> calling handler", pebble.log(), re.MULTILINE))


def _kept(kube: Kube, namespace: str, account: str) -> dict[str, str]:
    """The order URLs and backoffs the account Secret keeps, by kind (order, backoff)."""
    annotations = kube.core.read_namespaced_secret(account, namespace).metadata.annotations or {}
    return {key.split(".", 1)[0]: value for key, value in annotations.items() if key.startswith(("order.acme.twingress.io/", "backoff.acme.twingress.io/"))}


def _stamp(line_start: str) -> datetime.datetime:
    """The time of a twistd log line (its first field, to the second)."""
    return datetime.datetime.strptime(line_start, "%Y-%m-%dT%H:%M:%S%z")


def _stamps(log: str, text: str) -> list[datetime.datetime]:
    return [_stamp(line.split(" ", 1)[0]) for line in log.splitlines() if text in line]


@pytest.mark.parametrize(
    ("extra", "mentions"),
    [
        (("--acme-storage", "/tmp"), "--acme-storage is for --manifests"),
        (("--generate-ingresses", "false", "--update-status", "false"), "needs the controllers"),
        (("--acme-challenge", "tls-alpn-01", "--https", ""), "--acme-challenge tls-alpn-01 needs the --https listener"),
        (("--acme-ca-file", str(ROOT / "README.md")), "holds no PEM certificate"),
        (("--acme-eab-kid", "kid-1"), "--acme-eab-kid needs --acme-eab-hmac-key-file"),
    ],
)
def test_a_bad_cluster_acme_option_is_one_line_and_exit_1(kube_cluster, pebble: Pebble, extra: tuple[str, ...], mentions: str) -> None:
    command = twistd_command(["--kubeconfig", str(kube_cluster.kubeconfig)], free_port(), free_port(), (
        "--acme-directory", pebble.directory, "--acme-agree-tos", "true", *extra))
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("twistd ingress: ") and mentions in lines[0], result.stderr
