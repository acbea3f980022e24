"""
The hand-over key from the cluster (C{--handover-key-secret NAMESPACE/NAME}), against the real apiserver:
the first twingress makes the Secret, its successor reads it and takes the sockets; two that race to make it
agree; a Secret without a usable key is one log line and no hand-over (the listeners bind fresh).
"""

from __future__ import annotations

import base64
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.python import usage

from ingress.sources.kube.client import KubeClient
from ingress.sources.kube.handoverkey import KEY_BYTES, handover_key
from ingress.tap import Options
from tests.kube.api import Kube
from tests.kube.twingress import WORKERS_ENV, KubeTwingress, wait_until
from tests.support import free_port, http_status

SECRET = "twingress-handover"


def _handing(namespace: str, port: int) -> tuple[str, ...]:
    return ("--handover", f"@twingress-key-test-{secrets.token_hex(6)}", "--handover-key-secret", f"{namespace}/{SECRET}", "--http", f"tcp:{port}:interface=127.0.0.1")


def _stored_key(kube: Kube, namespace: str) -> bytes:
    return base64.b64decode(kube.core.read_namespaced_secret(SECRET, namespace).data["key"])


def test_the_first_makes_the_key_and_its_successor_takes_the_sockets_with_it(kube: Kube, namespace: str, twingress: Callable[..., KubeTwingress]) -> None:
    port = free_port()
    args = _handing(namespace, port)
    old = twingress(*args)
    assert len(_stored_key(kube, namespace)) == KEY_BYTES
    assert "made the hand-over key in Secret" in old.log()
    new = twingress(*args)
    assert old.process.wait(30) == 0, old.log()[-3000:]
    sockets = int(os.environ.get(WORKERS_ENV) or 1)  # one per worker process (the kube tests' workers run has 2)
    assert f"handover: received {sockets} listening sockets" in new.log() and "handed over: no new connections here" in old.log()
    assert "made the hand-over key" not in new.log()  # it read the first one's
    assert http_status(port, "nothing.test") == 404 and new.process.poll() is None


def _race(kubeconfig: Path, namespace: str, name: str) -> list[bytes]:
    """Two clients asking for the same absent Secret at the same moment: the keys each got."""
    found: list[bytes] = []
    gate = threading.Barrier(2)

    def make() -> None:
        client = KubeClient(str(kubeconfig))
        gate.wait()
        found.append(handover_key(client, namespace, name))
        client.close()

    threads = [threading.Thread(target=make) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return found


def test_two_that_race_to_make_it_agree(kube_cluster: Any, namespace: str) -> None:
    for round_ in range(3):
        found = _race(kube_cluster.kubeconfig, namespace, f"{SECRET}-{round_}")
        assert len(found) == 2 and found[0] == found[1] and len(found[0]) == KEY_BYTES


@pytest.mark.parametrize("data", [{"key": base64.b64encode(b"short").decode()}, {"other": base64.b64encode(b"x" * 32).decode()}])
def test_a_secret_without_a_usable_key_is_one_line_and_no_hand_over(kube: Kube, namespace: str, twingress: Callable[..., KubeTwingress], data: dict[str, str]) -> None:
    kube.core.create_namespaced_secret(namespace, {"metadata": {"name": SECRET}, "data": data})
    port = free_port()
    process = twingress(*_handing(namespace, port))
    lines = [line for line in process.log().splitlines() if "no hand-over key from Secret" in line]
    assert len(lines) == 1 and "no hand-over, binding fresh" in lines[0], process.log()[-3000:]
    assert "Traceback" not in process.log() and "a successor may take" not in process.log()
    wait_until(lambda: http_status(port, "nothing.test") == 404, 10, "the fresh listener answering")


def test_the_key_file_and_the_secret_are_exclusive(kube_cluster: Any, tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_bytes(b"k" * 32)
    base = ["--kubeconfig", str(kube_cluster.kubeconfig), "--handover", "@x"]
    with pytest.raises(usage.UsageError, match="either --handover-key-file or --handover-key-secret"):
        Options().parseOptions([*base, "--handover-key-file", str(key), "--handover-key-secret", "a/b"])
    with pytest.raises(usage.UsageError, match="takes NAMESPACE/NAME"):
        Options().parseOptions([*base, "--handover-key-secret", "nonamespace"])
    with pytest.raises(usage.UsageError, match="needs --handover"):
        Options().parseOptions(["--kubeconfig", str(kube_cluster.kubeconfig), "--handover-key-secret", "a/b"])
