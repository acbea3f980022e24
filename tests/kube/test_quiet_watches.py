"""
A watch of a kind nobody changes gets no events and, from kube-apiserver, no bookmarks either (it
sends one only when it has a resourceVersion newer than the watch's: for a quiet kind that comes with
etcd's progress notifications, ten minutes apart by default).  Its read timeout must therefore start
a new watch at once, not count as a failure: before, every quiet timeout marked the informer
disconnected and doubled a backoff that only a relist reset, so after a few quiet periods a change
could wait up to 30 s to be seen.  A Reflector against the real apiserver, with a short read timeout.
"""

from __future__ import annotations

import threading
import time

from ingress.sources.kube.client import KubeClient
from ingress.sources.kube.reflector import Reflector, Resource
from tests.kube.twingress import wait_until


def test_a_quiet_watch_is_watched_again_without_a_failure(kube_cluster, kube) -> None:
    changes = threading.Event()
    reflector = Reflector(
        lambda: KubeClient(str(kube_cluster.kubeconfig)),
        Resource("IngressClass", "networking.k8s.io/v1", "ingressclasses", namespaced=False),
        on_change=changes.set,
        on_status=lambda r: None,
        read_timeout=1.0,
    )
    reflector.start()
    try:
        wait_until(lambda: reflector.synced, 30, "the first list")
        wait_until(lambda: reflector.watch_restarts >= 4, 30, "four quiet read timeouts")
        assert reflector.connected and reflector.last_error == "", reflector.last_error  # never reported as a failure
        assert reflector.relists == 1
        changes.clear()
        name = f"quiet-{int(time.monotonic() * 1000)}"
        kube.put_ingress_class(name, controller="example.com/quiet")
        started = time.monotonic()
        wait_until(lambda: reflector.store.get(("", name)) is not None, 10, "the new IngressClass in the store")
        assert time.monotonic() - started < 2.5  # the next watch is at most one read timeout away, no backoff
    finally:
        reflector.stop()
        kube.delete_ingress_class(name) if "name" in locals() else None
