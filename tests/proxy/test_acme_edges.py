"""
The ACME issuer's edges without a cluster (issue 64), against the real Pebble (tests/acme_support.py):
external account binding (Pebble's C{externalAccountBindingRequired} and C{externalAccountMACKeys},
the keys of its v2.10.3 config and test/config/pebble-config-external-account-bindings.json), badNonce
answers (C{PEBBLE_WFE_NONCEREJECT}), and ACME directories that are not one, or not trusted: each a
line of its own, and the rest of the table keeps serving.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.acme_support import Pebble
from tests.kube.twingress import wait_until
from tests.proxy.certs import CertificateAuthority
from tests.proxy.test_acme import _acme_args, _acme_ingress, _issued, _served_certificate
from tests.support import EchoBackend, Manifests, Twingress, free_port, http_status

EAB_KID = "kid-1"
EAB_KEY = base64.urlsafe_b64encode(b"twingress's external account HMAC key, 48 bytes!").decode().rstrip("=")  # base64url, as a CA gives it
EAB_CONFIG = {"externalAccountBindingRequired": True, "externalAccountMACKeys": {EAB_KID: EAB_KEY}}
BAD_NONCES = re.compile(r"acme: (\d+) badNonce answers retried")


@pytest.fixture
def pebble(tmp_path: Path) -> Iterator[Pebble]:
    made = Pebble(tmp_path / "pebble")
    yield made
    made.stop()


def _failure(proxy: Twingress, host: str) -> str:
    """The one line of the failed order for C{host}."""
    marker = f"ordering a certificate for {host} failed: "
    wait_until(lambda: marker in proxy.log(), timeout=40, what=f"the failed order for {host}")
    lines = [line for line in proxy.log().splitlines() if marker in line]
    assert len(lines) == 1, lines
    return lines[0]


def test_external_account_binding_the_right_key_issues_a_wrong_one_or_none_is_refused(
    tmp_path: Path, manifests: Manifests, twingress: Callable[..., Twingress], pebble: Pebble, echo_pair: tuple[EchoBackend, EchoBackend],
) -> None:
    right, wrong = tmp_path / "eab.key", tmp_path / "wrong.key"
    right.write_text(EAB_KEY + "\n")
    wrong.write_text(base64.urlsafe_b64encode(b"not the key the CA gave").decode().rstrip("=") + "\n")
    manifests.write("app.yaml", *manifests.service("app", [echo_pair[0].address]), Manifests.ingress("plain", "plain.example.com", "app"))
    https_port = free_port()
    bound = twingress(*_acme_args(pebble.directory, pebble.ca_file, tmp_path / "bound"), "--https", f"tcp:{https_port}:interface=127.0.0.1",
                      "--acme-eab-kid", EAB_KID, "--acme-eab-hmac-key-file", str(right))
    pebble.start(bound.http_port, https_port, config=EAB_CONFIG)
    assert pebble._get(pebble.directory).count(b'"externalAccountRequired": true') == 1  # the server says it requires EAB
    refused = twingress(*_acme_args(pebble.directory, pebble.ca_file, tmp_path / "refused"), "--https", f"tcp:{free_port()}:interface=127.0.0.1",
                        "--acme-eab-kid", EAB_KID, "--acme-eab-hmac-key-file", str(wrong))
    unbound = twingress(*_acme_args(pebble.directory, pebble.ca_file, tmp_path / "unbound"), "--https", f"tcp:{free_port()}:interface=127.0.0.1")
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pebble.root_pem())
    manifests.write("site.yaml", _acme_ingress("site", ["site.example.com"], "app"))

    _issued(bound, pebble)
    assert "Successful newAccount Binding with CA using kid \"kid-1\"" in pebble.log()
    served = wait_until(lambda: _served_certificate(https_port, "site.example.com", root), timeout=20, what="the bound account's certificate by SNI")
    assert served.issuer != served.subject
    line = _failure(refused, "site.example.com")
    assert "urn:ietf:params:acme:error:unauthorized" in line and "external account binding JWS verification error" in line, line
    line = _failure(unbound, "site.example.com")
    assert "urn:ietf:params:acme:error:externalAccountRequired" in line and "externalAccountBinding" in line, line
    for proxy in (bound, refused, unbound):
        assert http_status(proxy.http_port, "plain.example.com") == 200
        assert "Traceback" not in proxy.log()
    assert EAB_KEY not in bound.log(), "the HMAC key is a secret: never logged"
    assert pebble.new_accounts() == 1, "only the bound account was made"


def test_bad_nonces_are_retried_and_the_order_succeeds(
    tmp_path: Path, manifests: Manifests, twingress: Callable[..., Twingress], pebble: Pebble, echo_pair: tuple[EchoBackend, EchoBackend],
) -> None:
    """Pebble rejects half of the nonces (PEBBLE_WFE_NONCEREJECT=50): each answer carries a fresh one to retry with (RFC 8555 6.5)."""
    https_port = free_port()
    manifests.write("app.yaml", *manifests.service("app", [echo_pair[0].address]))
    proxy = twingress(*_acme_args(pebble.directory, pebble.ca_file, tmp_path / "acme"), "--https", f"tcp:{https_port}:interface=127.0.0.1")
    pebble.start(proxy.http_port, https_port, env={"PEBBLE_WFE_NONCEREJECT": "50"})
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pebble.root_pem())
    manifests.write("site.yaml", _acme_ingress("site", ["site.example.com", "www.site.example.com"], "app"))
    found = _issued(proxy, pebble)
    wait_until(lambda: _served_certificate(https_port, "www.site.example.com", root), timeout=20, what="the certificate by SNI")
    retried = BAD_NONCES.search(proxy.log())
    assert retried is not None and int(retried.group(1)) > 0, proxy.log()[-3000:]  # Pebble logs no badNonce: the client counts them
    print(f"with half the nonces rejected: {retried.group(1)} badNonce answers retried, {found.group(4)} requests, {pebble.requests()} in Pebble's log")


@pytest.mark.parametrize(
    ("case", "mentions"),
    [
        ("not-a-directory", ["is not an ACME directory (RFC 8555 7.1.1): no newNonce, newAccount, newOrder"]),
        ("http-404", ["does not answer as one: HTTP 404"]),
        ("untrusted", ["its TLS certificate is not trusted (certificate verify failed", "--acme-ca-file"]),
    ],
)
def test_a_directory_that_is_not_one_or_not_trusted_is_one_line_and_the_table_serves(
    tmp_path: Path, manifests: Manifests, twingress: Callable[..., Twingress], pebble: Pebble, echo_pair: tuple[EchoBackend, EchoBackend],
    case: str, mentions: list[str],
) -> None:
    echo = f"http://{echo_pair[0].host}:{echo_pair[0].port}"
    ca = tmp_path / "ca.pem"
    ca.write_bytes(CertificateAuthority("not pebble's").pem())
    if case == "untrusted":
        pebble.start(free_port(), free_port())
    directory = {"not-a-directory": f"{echo}/directory", "http-404": f"{echo}/directory?status=404", "untrusted": pebble.directory}[case]
    manifests.write("all.yaml", *manifests.service("app", [echo_pair[0].address]), Manifests.ingress("plain", "plain.example.com", "app"),
                    _acme_ingress("site", ["site.example.com"], "app"))
    proxy = twingress(*_acme_args(directory, ca, tmp_path / "acme"))
    line = _failure(proxy, "site.example.com")
    assert all(mention in line for mention in mentions) and "trying again in 30s" in line, line
    assert http_status(proxy.http_port, "plain.example.com") == 200
    assert "Traceback" not in proxy.log()
