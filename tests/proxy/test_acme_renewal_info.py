"""
The renewal window asked for again (issue 64, Renewal; RFC 9773 4.3.3), without a cluster, against the real Pebble.

A certificate's renewalInfo is fetched again at the C{Retry-After} of the last answer, bounded to
between a minute and a day (L{ingress.acme.schedule.next_renewal_poll}, its bounds proven with a fake
clock in tests/unit/test_acme_schedule.py), so that a window the server moves is acted upon.  Pebble
moves it when a certificate is revoked (its renewalInfo then says: renew now).  Pebble's answers say
C{Retry-After: 21600}; the fault-injecting proxy in front of it says 1 instead, which the issuer
takes as the floor's minute.  So: a 90-day certificate, its renewal weeks away; revoked; within
about a minute the issuer asks again, sees the moved window and orders a new certificate, which a
TLS client then gets by SNI.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from ingress.acme.storage import directory_digest
from tests.acme_faults import FaultProxy, revoke
from tests.acme_support import Pebble
from tests.kube.twingress import wait_until
from tests.proxy.test_acme import _acme_args, _acme_ingress, _served_certificate
from tests.support import EchoBackend, Manifests, Twingress, free_port

RENEWAL_INFO = "/draft-ietf-acme-ari-03/renewalInfo/"
ISSUED = re.compile(r"acme: certificate for app\.example\.com issued into Secret \S+ in [\d.]+s, \d+ requests to the ACME server; renewal at (\S+) \((.+?)\)")
ASKED = "acme: renewalInfo of the certificate in Secret default/app-tls asked for again: renewal at "


@pytest.fixture
def pebble(tmp_path: Path) -> Iterator[Pebble]:
    made = Pebble(tmp_path / "pebble")
    yield made
    made.stop()


def _annotations(storage: Path) -> dict[str, str]:
    secret = yaml.safe_load((storage / "manifests" / "secret-default.app-tls.yaml").read_text())
    return dict(secret["metadata"]["annotations"])


def test_a_revoked_certificate_s_moved_window_is_seen_at_the_next_renewal_info_check_and_it_is_renewed(
    tmp_path: Path, manifests: Manifests, twingress: Callable[..., Twingress], pebble: Pebble, echo_pair: tuple[EchoBackend, EchoBackend],
) -> None:
    faults = FaultProxy(pebble, tmp_path)
    try:
        faults.answer_headers.append(("GET", RENEWAL_INFO, {"Retry-After": "1"}))
        https_port, storage = free_port(), tmp_path / "acme"
        manifests.write("app.yaml", *manifests.service("app", [echo_pair[0].address]))
        proxy = twingress(*_acme_args(faults.directory, pebble.ca_file, storage), "--https", f"tcp:{https_port}:interface=127.0.0.1")
        pebble.start(proxy.http_port, https_port)
        root = tmp_path / "pebble-root.pem"
        root.write_bytes(pebble.root_pem())
        manifests.write("app-ingress.yaml", _acme_ingress("app", ["app.example.com"], "app"))
        first = wait_until(lambda: ISSUED.search(proxy.log()), timeout=60, what="the first certificate")
        issued_at = time.monotonic()
        assert first.group(2) == "renewalInfo", first.group(0)
        renew_at = datetime.datetime.fromisoformat(first.group(1))
        assert renew_at - datetime.datetime.now(datetime.UTC) > datetime.timedelta(days=7), renew_at  # weeks away: only a moved window renews it now
        check_at = datetime.datetime.fromisoformat(_annotations(storage)["acme.twingress.io/renewal-info-at"])
        left = (check_at - datetime.datetime.now(datetime.UTC)).total_seconds()
        assert 30 < left <= 61, f"the next renewalInfo check {left:.0f}s from now: Retry-After 1, floored to a minute"
        old = wait_until(lambda: _served_certificate(https_port, "app.example.com", root), timeout=20, what="the first certificate by SNI")

        revoke(faults.directory, pebble.ca_file, (storage / f"account-{directory_digest(faults.directory)}.pem").read_bytes(), old)
        asked = wait_until(lambda: ASKED in proxy.log(), timeout=90, what="the renewalInfo asked for again")
        assert asked and time.monotonic() - issued_at >= 55, "asked for again before the minute's floor"
        renewed = wait_until(lambda: len(ISSUED.findall(proxy.log())) >= 2, timeout=60, what="the certificate renewed after the moved window")
        assert renewed and "is due for renewal" in proxy.log()
        new = wait_until(lambda: (served := _served_certificate(https_port, "app.example.com", root)).serial_number != old.serial_number and served,
                         timeout=20, what="the new certificate by SNI")
        checks = [at for at, method, path, _ in faults.seen if method == "GET" and path.startswith(RENEWAL_INFO)]
        assert len(checks) >= 2, checks  # the first answer's, and the check again
        print(f"revoked: the renewalInfo asked for again {checks[1] - checks[0]:.0f}s after the first (Retry-After 1, a minute's floor),"
              f" renewed into serial {new.serial_number:x}")
    finally:
        faults.stop()
