"""
When the ACME issuer orders again (issue 64, Renewal), without a cluster, against the real Pebble.

- Renewal: Pebble's only profile lasts 60 s; its renewalInfo (RFC 9773) suggests a window, the
  issuer renews inside it (at most at 5/6 of the lifetime) and a TLS client handshaking all along
  gets the new serial by SNI, never a failed handshake (the old certificate is served until the new
  one is written).
- A C{rateLimited} problem with C{Retry-After: 35} (a fault-injecting proxy in front of Pebble:
  Pebble has no rate limits), longer than the first backoff's 30 s, so the server's word is what
  is waited: no request to the newOrder URL before 35 s, then the certificate.
- Pebble stopped: one failed order (one request, refused), then nothing for its 30 s backoff (the
  attempts counted) although the process is restarted in it (the backoff is kept in the storage
  directory beside the order's URL: the restarted one waits what is left), and the certificate
  comes from the next order once Pebble is back.  The
  doubling after that (60 s, ... an hour) is the arithmetic of L{ingress.acme.schedule.Backoff},
  proven with a fake clock in tests/unit/test_acme_schedule.py; here one real wait.
- An order that failed after it was placed (the challenge's answer refused once, by the proxy) is
  resumed by the restarted process from the URL kept in the storage directory: one newOrder in all.
"""

from __future__ import annotations

import json
import re
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509

from tests.acme_faults import RATE_LIMITED, Fault, FaultProxy
from tests.acme_support import Pebble
from tests.kube.twingress import wait_until
from tests.proxy.test_acme import _acme_args, _acme_ingress, _served_certificate
from tests.support import EchoBackend, Manifests, Twingress, free_port

ISSUED = re.compile(r"acme: certificate for (.+?) issued into Secret (\S+) in ([\d.]+)s, (\d+) requests to the ACME server; renewal at (\S+) \((.+?)\)")
RETRY_AFTER = 35  # seconds: more than the first backoff (30 s), or the backoff alone would be waited
ORDERING = "acme: ordering a certificate for app.example.com from"
FAILED = re.compile(r"acme: ordering a certificate for (.+?) failed: .*?; trying again in (\d+)s.*?, (\d+) requests to the ACME server")


@pytest.fixture
def pebble(tmp_path: Path) -> Iterator[Pebble]:
    made = Pebble(tmp_path / "pebble")
    yield made
    made.stop()


def _issued(proxy: Twingress, pebble: Pebble, count: int = 1, timeout: float = 60) -> list[re.Match[str]]:
    try:
        found: list[re.Match[str]] = wait_until(lambda: (m := list(ISSUED.finditer(proxy.log()))) and len(m) >= count and m, timeout=timeout, what=f"{count} certificate(s) issued")
    except AssertionError as error:
        raise AssertionError(f"{error}\ntwingress:\n{proxy.log()[-4000:]}\npebble:\n{pebble.log()[-2000:]}") from None
    return found


def _start(tmp_path: Path, manifests: Manifests, twingress: Callable[..., Twingress], directory: str, pebble: Pebble, echo: EchoBackend) -> tuple[Twingress, int]:
    https_port = free_port()
    manifests.write("app.yaml", *manifests.service("app", [echo.address]))
    proxy = twingress(*_acme_args(directory, pebble.ca_file, tmp_path / "acme"), "--https", f"tcp:{https_port}:interface=127.0.0.1")
    return proxy, https_port


def test_a_short_lived_certificate_is_renewed_in_the_renewal_window_without_a_failed_handshake(
    tmp_path: Path, manifests: Manifests, twingress: Callable[..., Twingress], pebble: Pebble, echo_pair: tuple[EchoBackend, EchoBackend],
) -> None:
    proxy, https_port = _start(tmp_path, manifests, twingress, pebble.directory, pebble, echo_pair[0])
    pebble.start(proxy.http_port, https_port, validity=60)
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pebble.root_pem())
    manifests.write("app-ingress.yaml", _acme_ingress("app", ["app.example.com"], "app"))
    first = _issued(proxy, pebble)[0]
    assert first.group(6) == "renewalInfo", first.group(0)  # Pebble's directory offers renewalInfo: its window, not two thirds
    old = wait_until(lambda: _served_certificate(https_port, "app.example.com", root), timeout=20, what="the first certificate by SNI")
    lifetime = (old.not_valid_after_utc - old.not_valid_before_utc).total_seconds()
    assert lifetime < 61, lifetime

    handshakes, failures, new = 0, [], old
    deadline = time.monotonic() + 70
    while new.serial_number == old.serial_number:  # a TLS client all along: each handshake verified (chain and dates)
        assert time.monotonic() < deadline, f"not renewed in 70s:\n{proxy.log()[-3000:]}"
        try:
            new = _served_certificate(https_port, "app.example.com", root)
            handshakes += 1
        except (OSError, ssl.SSLError) as error:
            failures.append(repr(error))
        time.sleep(0.2)  # not a wait: the pace of the TLS client that handshakes all along (the wait is the loop's deadline)
    assert not failures, failures[:5]
    assert new.not_valid_before_utc < old.not_valid_after_utc, "renewed before the old one expired"
    renewal = _issued(proxy, pebble, count=2)[1]
    assert "is due for renewal" in proxy.log()
    print(f"renewed {(new.not_valid_before_utc - old.not_valid_before_utc).total_seconds():.0f}s into a {lifetime:.0f}s lifetime, "
          f"{renewal.group(4)} requests to Pebble, {handshakes} handshakes meanwhile, none failed")


def test_a_rate_limited_order_waits_the_servers_retry_after_then_gets_its_certificate(
    tmp_path: Path, manifests: Manifests, twingress: Callable[..., Twingress], pebble: Pebble, echo_pair: tuple[EchoBackend, EchoBackend],
) -> None:
    faults = FaultProxy(pebble, tmp_path)
    try:
        faults.faults.append(Fault("POST", "/order-plz", 429, RATE_LIMITED, "too many new orders recently", {"Retry-After": str(RETRY_AFTER)}))
        proxy, https_port = _start(tmp_path, manifests, twingress, faults.directory, pebble, echo_pair[0])
        pebble.start(proxy.http_port, https_port)
        manifests.write("app-ingress.yaml", _acme_ingress("app", ["app.example.com"], "app"))
        failed = wait_until(lambda: FAILED.search(proxy.log()), timeout=30, what="the rate-limited order")
        assert failed.group(2) == str(RETRY_AFTER) and f"(the server asked for {RETRY_AFTER}s)" in failed.group(0) + proxy.log(), failed.group(0)
        _issued(proxy, pebble, timeout=90)
        orders = faults.times("POST", "/order-plz")
        assert len(orders) == 2, orders
        assert orders[1] - orders[0] >= RETRY_AFTER, f"the next new-order request came {orders[1] - orders[0]:.1f}s after the rateLimited answer"
        print(f"new-order requests: 2, {orders[1] - orders[0]:.1f}s apart (Retry-After: {RETRY_AFTER})")
    finally:
        faults.stop()


def test_an_outage_of_the_acme_server_backs_off_and_the_certificate_comes_when_it_is_back(
    tmp_path: Path, manifests: Manifests, twingress: Callable[..., Twingress], pebble: Pebble, echo_pair: tuple[EchoBackend, EchoBackend],
) -> None:
    proxy, https_port = _start(tmp_path, manifests, twingress, pebble.directory, pebble, echo_pair[0])
    pebble.start(proxy.http_port, https_port)
    pebble.stop_server()
    manifests.write("app-ingress.yaml", _acme_ingress("app", ["app.example.com"], "app"))
    wait_until(lambda: FAILED.search(proxy.log()), timeout=30, what="the failed order")
    failed_at = time.monotonic()
    waits = [int(wait) for _, wait, _ in FAILED.findall(proxy.log())]
    requests = [int(sent) for _, _, sent in FAILED.findall(proxy.log())]
    assert waits == [30] and requests == [1], (waits, requests)  # the directory, refused; then the first backoff
    kept = json.loads((tmp_path / "acme" / "order-default.app-tls.backoff").read_text())
    assert kept["hosts"] == "app.example.com" and kept["failures"] == 1, kept
    proxy.stop()  # a restart in the backoff: the new process reads it rather than order at once
    proxy = twingress(*_acme_args(pebble.directory, pebble.ca_file, tmp_path / "acme"), "--https", f"tcp:{https_port}:interface=127.0.0.1",
                      "--http", f"tcp:{proxy.http_port}:interface=127.0.0.1")
    pebble.start_server()  # back at once: only the backoff holds the next order up
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pebble.root_pem())  # a new Pebble, a new root
    wait_until(lambda: "waits the backoff kept from before (1 failed orders)" in proxy.log(), timeout=30, what="the restarted process reading the backoff")
    wait_until(lambda: ORDERING in proxy.log(), timeout=60, what="the next order")
    waited = time.monotonic() - failed_at  # both lines seen within a poll (0.1 s) of their writing
    assert waited >= 29, f"the next order came {waited:.0f}s after the failure, inside its 30 s backoff"
    found = _issued(proxy, pebble, timeout=90)[0]
    assert proxy.log().count(ORDERING) == 1  # no storm: nothing in the 30 s (nor at the restart), then the order that gets it
    assert not (tmp_path / "acme" / "order-default.app-tls.backoff").exists(), "a certificate issued forgets its backoff"
    served = wait_until(lambda: _served_certificate(https_port, "app.example.com", root), timeout=20, what="the certificate by SNI")
    assert served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName) == ["app.example.com"]
    print(f"outage: 1 order failed (1 request, refused), the process restarted, the next order {waited:.0f}s after the failure (its 30 s backoff),"
          f" {found.group(4)} requests to Pebble")


def test_a_restarted_issuer_resumes_the_order_it_placed_instead_of_placing_another(
    tmp_path: Path, manifests: Manifests, twingress: Callable[..., Twingress], pebble: Pebble, echo_pair: tuple[EchoBackend, EchoBackend],
) -> None:
    faults = FaultProxy(pebble, tmp_path)
    try:
        faults.faults.append(Fault("POST", "/chalZ/", 500, "urn:ietf:params:acme:error:serverInternal", "the challenge is not taken now"))
        proxy, https_port = _start(tmp_path, manifests, twingress, faults.directory, pebble, echo_pair[0])
        pebble.start(proxy.http_port, https_port)
        manifests.write("app-ingress.yaml", _acme_ingress("app", ["app.example.com"], "app"))
        wait_until(lambda: FAILED.search(proxy.log()), timeout=30, what="the order failing after it was placed")
        kept = (tmp_path / "acme" / "order-default.app-tls.url").read_text()
        assert kept.startswith(faults.directory.rsplit("/", 1)[0]), kept
        proxy.stop()
        again = twingress(*_acme_args(faults.directory, pebble.ca_file, tmp_path / "acme"), "--https", f"tcp:{https_port}:interface=127.0.0.1",
                          "--http", f"tcp:{proxy.http_port}:interface=127.0.0.1")
        _issued(again, pebble)
        assert f"acme: resuming the order {kept} (pending)" in again.log(), again.log()[-3000:]
        assert len(faults.times("POST", "/order-plz")) == 1, faults.seen
        assert not (tmp_path / "acme" / "order-default.app-tls.url").exists(), "a finished order is forgotten"
    finally:
        faults.stop()
