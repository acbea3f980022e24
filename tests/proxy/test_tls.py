"""
TLS termination on C{--https}: certificates from C{kubernetes.io/tls} Secrets
chosen per connection by SNI, the default certificate, protocol versions,
ALPN, hot swap of a changed Secret, invalid Secrets and bad input.

Everything is checked with real clients: C{openssl s_client} (which
certificate and chain the server sent, which protocol was negotiated),
C{curl --resolve --cacert} (full verification against our test root, and the
echo backend's view of the request), and Python's C{ssl} module.

Two twingress processes serve the whole module (module-scoped fixtures): one
with the generated self-signed default certificate, one started with
C{--default-certificate default/fallback-tls}.
"""

from __future__ import annotations

import json
import random
import re
import socket
import ssl
import subprocess
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
from cryptography import x509
from prometheus_client.parser import text_string_to_metric_families

from tests.proxy.certs import CertificateAuthority, Leaf, common_name, dns_names, load_pem_chain, tls_secret
from tests.proxy.clients import RawClient, request
from tests.support import EchoBackend, Manifests, Twingress, free_port, raw_exchange, wait_for_port
from tests.waiting import eventually

GENERATED_DEFAULT_CN = "twingress default certificate"
ERRORS_METRIC = "twingress_tls_certificate_errors_total"
NOT_AFTER_METRIC = "twingress_tls_certificate_not_after_seconds"
# Generous: the contract is ~2 s for a changed Secret; this only bounds a hang.
CONVERGENCE_TIMEOUT = 15.0
CLIENT_TIMEOUT = 20.0
# Lets the local OpenSSL client offer TLS 1.0/1.1 (Debian's default security level
# refuses them client-side), so a refusal can only come from the server.
LEGACY_CIPHERS = "DEFAULT:@SECLEVEL=0"


# -- fixtures -----------------------------------------------------------------


@dataclass
class PKI:
    root: CertificateAuthority
    intermediate: CertificateAuthority
    root_file: Path
    leaves: dict[str, Leaf]


@dataclass
class TLSProxy:
    process: Twingress
    manifests: Manifests
    https_port: int
    pki: PKI

    @property
    def cafile(self) -> Path:
        return self.pki.root_file


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    root = CertificateAuthority("twingress test root")
    intermediate = root.intermediate("twingress test intermediate")
    leaves = {
        # leaf + intermediate in tls.crt: the chain must be sent whole
        "exact": intermediate.issue(["exact.example.test"], "rsa"),
        "wild": root.issue(["*.wild.test"], "ec"),
        "exact-wild": root.issue(["exact.wild.test"], "rsa"),
        "rsa-pkcs1": root.issue(["rsa-pkcs1.keys.test"], "rsa"),
        "rsa-pkcs8": root.issue(["rsa-pkcs8.keys.test"], "rsa"),
        "ec-pkcs1": root.issue(["ec-pkcs1.keys.test"], "ec"),
        "ec-pkcs8": root.issue(["ec-pkcs8.keys.test"], "ec"),
        "string-data": intermediate.issue(["string-data.example.test"], "ec"),
        "mismatch": root.issue(["mismatch.bad.test"]).with_other_key(),
        "expired": root.issue_expired(["expired.bad.test"]),
        "swap": root.issue(["swap.example.test"], "rsa"),
        "fallback": root.issue(["fallback.invalid"], "rsa", common_name="named fallback certificate"),
        "uncovered": root.issue(["other.example.test"], "rsa"),
        "removed": root.issue(["removed.example.test"], "ec"),
    }
    directory = tmp_path_factory.mktemp("pki")
    return PKI(root, intermediate, root.write(directory / "root.pem"), leaves)


def tls_ingress(name: str, host: str, secret: str, namespace: str = "default", service: str = "echo") -> dict:
    """An Ingress routing C{host} to the echo Service, with C{spec.tls} naming C{secret} for that host."""
    return Manifests.ingress(name, host, service, namespace=namespace, tls=[{"hosts": [host], "secretName": secret}])


def start(manifests: Manifests, *args: str) -> tuple[Twingress, int]:
    https_port = free_port()
    process = Twingress(manifests.path, "--https", f"tcp:{https_port}:interface=127.0.0.1", *args)
    try:
        wait_for_port("127.0.0.1", https_port, process.process)
    except Exception as error:
        log = process.log()
        process.stop()
        raise RuntimeError(f"no TLS listener on {https_port}:\n{log[-4000:]}") from error
    return process, https_port


@pytest.fixture(scope="module")
def tls_proxy(
    tmp_path_factory: pytest.TempPathFactory, pki: PKI, echo_pair: tuple[EchoBackend, EchoBackend]
) -> Iterator[TLSProxy]:
    """twingress with the generated default certificate and one Secret per case below."""
    pod_a, _ = echo_pair
    path = tmp_path_factory.mktemp("tls-manifests")
    manifests = Manifests(path)
    leaves = pki.leaves
    manifests.write("echo.yaml", *manifests.service("echo", [pod_a.address]))
    manifests.write("exact.yaml", tls_secret("exact-tls", leaves["exact"], key_format="pkcs1"), tls_ingress("exact", "exact.example.test", "exact-tls"))
    manifests.write("wild.yaml", tls_secret("wild-tls", leaves["wild"]), tls_ingress("wild", "*.wild.test", "wild-tls"))
    manifests.write(
        "exact-wild.yaml", tls_secret("exact-wild-tls", leaves["exact-wild"]), tls_ingress("exact-wild", "exact.wild.test", "exact-wild-tls")
    )
    for case in ("rsa-pkcs1", "rsa-pkcs8", "ec-pkcs1", "ec-pkcs8"):
        key_format = case.split("-")[1]
        manifests.write(
            f"{case}.yaml",
            tls_secret(f"{case}-tls", leaves[case], key_format=key_format),  # type: ignore[arg-type]
            tls_ingress(case, f"{case}.keys.test", f"{case}-tls"),
        )
    manifests.write(
        "string-data.yaml",
        tls_secret("string-data-tls", leaves["string-data"], string_data=True),
        tls_ingress("string-data", "string-data.example.test", "string-data-tls"),
    )
    # Invalid Secrets: each host falls back to the default certificate.
    manifests.write("mismatch.yaml", tls_secret("mismatch-tls", leaves["mismatch"]), tls_ingress("mismatch", "mismatch.bad.test", "mismatch-tls"))
    manifests.write("expired.yaml", tls_secret("expired-tls", leaves["expired"]), tls_ingress("expired", "expired.bad.test", "expired-tls"))
    manifests.write(
        "garbage.yaml",
        tls_secret("garbage-tls", crt=b"-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n", key=b"junk\n"),
        tls_ingress("garbage", "garbage.bad.test", "garbage-tls"),
    )
    # A Secret is looked up in the Ingress's own namespace only: "exact-tls" lives in "default".
    manifests.write(
        "crossns.yaml",
        *manifests.service("echo", [pod_a.address], namespace="other"),
        tls_ingress("crossns", "crossns.example.test", "exact-tls", namespace="other"),
    )
    # spec.tls names a host the certificate does not cover: that host gets the default
    manifests.write(
        "uncovered.yaml", tls_secret("uncovered-tls", leaves["uncovered"]), tls_ingress("uncovered", "uncovered.example.test", "uncovered-tls")
    )
    manifests.write("removed.yaml", tls_secret("removed-tls", leaves["removed"]), tls_ingress("removed", "removed.example.test", "removed-tls"))
    manifests.write("plain.yaml", manifests.ingress("plain", "plain.example.test", "echo"))
    manifests.write("swap-ingress.yaml", tls_ingress("swap", "swap.example.test", "swap-tls"))
    manifests.write("swap-secret.yaml", tls_secret("swap-tls", leaves["swap"]))
    process, https_port = start(manifests)
    yield TLSProxy(process, manifests, https_port, pki)
    process.stop()


@pytest.fixture(scope="module")
def named_default_proxy(
    tmp_path_factory: pytest.TempPathFactory, pki: PKI, echo_pair: tuple[EchoBackend, EchoBackend]
) -> Iterator[TLSProxy]:
    """twingress started with C{--default-certificate default/fallback-tls}."""
    pod_a, _ = echo_pair
    manifests = Manifests(tmp_path_factory.mktemp("tls-default-manifests"))
    leaves = pki.leaves
    manifests.write("echo.yaml", *manifests.service("echo", [pod_a.address]))
    manifests.write("fallback.yaml", tls_secret("fallback-tls", leaves["fallback"]))
    manifests.write("exact.yaml", tls_secret("exact-tls", leaves["exact"]), tls_ingress("exact", "exact.example.test", "exact-tls"))
    manifests.write("mismatch.yaml", tls_secret("mismatch-tls", leaves["mismatch"]), tls_ingress("mismatch", "mismatch.bad.test", "mismatch-tls"))
    process, https_port = start(manifests, "--default-certificate", "default/fallback-tls")
    yield TLSProxy(process, manifests, https_port, pki)
    process.stop()


# -- clients ------------------------------------------------------------------


@dataclass
class SClient:
    returncode: int
    output: str
    chain: list[x509.Certificate]

    @property
    def leaf(self) -> x509.Certificate:
        assert self.chain, f"no certificate in s_client output:\n{self.output[-3000:]}"
        return self.chain[0]

    @property
    def protocol(self) -> Optional[str]:
        match = re.search(r"^New, (TLSv[\d.]+), Cipher is (\S+)", self.output, re.M)
        return match.group(1) if match and match.group(2) != "(NONE)" else None

    @property
    def alpn(self) -> Optional[str]:
        match = re.search(r"^ALPN protocol: (\S+)", self.output, re.M)
        return match.group(1) if match else None


def s_client(port: int, servername: Optional[str], *extra: str) -> SClient:
    """C{openssl s_client -showcerts} with SNI C{servername} (None: no SNI at all), stdin closed."""
    command = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-showcerts"]
    command += ["-servername", servername] if servername is not None else ["-noservername"]
    command += list(extra)
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, timeout=CLIENT_TIMEOUT)
    output = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    return SClient(done.returncode, output, load_pem_chain(done.stdout))


def served_chain(port: int, servername: Optional[str]) -> list[x509.Certificate]:
    result = s_client(port, servername)
    assert result.returncode == 0, result.output[-3000:]
    return result.chain


def served_leaf(port: int, servername: Optional[str]) -> x509.Certificate:
    return served_chain(port, servername)[0]


def curl(proxy: TLSProxy, host: str, path: str = "/", *extra: str) -> subprocess.CompletedProcess[bytes]:
    """curl https://HOST:PORT/PATH resolved to loopback, verified against the test root only."""
    port = proxy.https_port
    command = [
        "curl", "-sS", "--max-time", "15",
        "--resolve", f"{host}:{port}:127.0.0.1",
        "--cacert", str(proxy.cafile),
        *extra,
        f"https://{host}:{port}{path}",
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, timeout=CLIENT_TIMEOUT)


def curl_json(proxy: TLSProxy, host: str, path: str = "/", *extra: str) -> dict:
    done = curl(proxy, host, path, *extra)
    assert done.returncode == 0, f"curl exited {done.returncode}: {done.stderr.decode(errors='replace')}"
    return json.loads(done.stdout)


def header_values(echoed: dict, name: str) -> list[str]:
    return [v for k, vs in echoed["headers"].items() if k.lower() == name.lower() for v in vs]


def client_context(cafile: Optional[Path] = None) -> ssl.SSLContext:
    """A verifying context trusting only C{cafile}; without it, no verification at all."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if cafile is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.load_verify_locations(cafile=str(cafile))
    return context


def tls_socket(port: int, servername: Optional[str], context: ssl.SSLContext) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT)
    try:
        return context.wrap_socket(sock, server_hostname=servername)
    except BaseException:
        sock.close()
        raise


def python_leaf(port: int, servername: Optional[str]) -> x509.Certificate:
    """The served leaf, as Python's ssl module sees it (no verification)."""
    with tls_socket(port, servername, client_context()) as s:
        der = s.getpeercert(binary_form=True)
    assert der
    return x509.load_der_x509_certificate(der)


def tls_raw_client(port: int, servername: str, cafile: Path) -> RawClient:
    """A L{RawClient} whose socket is a verified TLS connection (keep-alive requests over it)."""
    client = RawClient(port, timeout=CLIENT_TIMEOUT)
    client.sock = client_context(cafile).wrap_socket(client.sock, server_hostname=servername)
    return client


def metric_samples(process: Twingress, name: str) -> list[tuple[dict[str, str], float]]:
    status, body = process.admin("/metrics")
    assert status == 200
    return [
        (dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name == name
    ]


def error_total(process: Twingress) -> float:
    return sum(value for _, value in metric_samples(process, ERRORS_METRIC))


def is_generated_default(cert: x509.Certificate) -> bool:
    return common_name(cert) == GENERATED_DEFAULT_CN


def assert_listener_serves(proxy: TLSProxy) -> None:
    """A good TLS request still gets through (the listener survived whatever came before)."""
    assert proxy.process.process.poll() is None, "twingress exited"
    echoed = curl_json(proxy, "exact.example.test", "/after")
    assert echoed["path"] == "/after"
    assert header_values(echoed, "X-Forwarded-Proto") == ["https"]


# -- certificate selection ----------------------------------------------------


def test_exact_host_gets_its_certificate(tls_proxy: TLSProxy, pki: PKI) -> None:
    leaf = served_leaf(tls_proxy.https_port, "exact.example.test")
    assert leaf.serial_number == pki.leaves["exact"].serial
    assert common_name(leaf) == "exact.example.test"
    assert dns_names(leaf) == ["exact.example.test"]


def test_sni_is_case_insensitive(tls_proxy: TLSProxy, pki: PKI) -> None:
    assert served_leaf(tls_proxy.https_port, "EXACT.Example.TEST").serial_number == pki.leaves["exact"].serial
    assert served_leaf(tls_proxy.https_port, "Some.WILD.test").serial_number == pki.leaves["wild"].serial


def test_chain_is_complete(tls_proxy: TLSProxy, pki: PKI) -> None:
    """tls.crt holds leaf + intermediate: both are sent, in order, and the root is not needed from the server."""
    chain = served_chain(tls_proxy.https_port, "exact.example.test")
    assert [c.serial_number for c in chain] == [pki.leaves["exact"].serial, pki.intermediate.cert.serial_number]
    assert chain[0].issuer == chain[1].subject
    # curl trusts only the root: verification succeeds only with the intermediate sent.
    assert curl_json(tls_proxy, "exact.example.test")["host"] == f"exact.example.test:{tls_proxy.https_port}"


def test_https_proxies_with_forwarded_proto(tls_proxy: TLSProxy, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    echoed = curl_json(tls_proxy, "exact.example.test", "/some/path?x=1", "-H", "X-Forwarded-Proto: http")
    assert echoed["name"] == echo_pair[0].name
    assert echoed["path"] == "/some/path"
    assert echoed["uri"] == "/some/path?x=1"
    # set by the proxy, whatever the client claimed
    assert header_values(echoed, "X-Forwarded-Proto") == ["https"]


def test_forwarded_port_is_the_tls_port(tls_proxy: TLSProxy) -> None:
    echoed = curl_json(tls_proxy, "exact.example.test")
    assert header_values(echoed, "X-Forwarded-Port") == [str(tls_proxy.https_port)]


def test_wildcard_covers_one_label(tls_proxy: TLSProxy, pki: PKI) -> None:
    for host in ("a.wild.test", "other-name.wild.test"):
        leaf = served_leaf(tls_proxy.https_port, host)
        assert leaf.serial_number == pki.leaves["wild"].serial, host
        assert dns_names(leaf) == ["*.wild.test"]
    echoed = curl_json(tls_proxy, "a.wild.test")
    assert header_values(echoed, "X-Forwarded-Proto") == ["https"]


@pytest.mark.parametrize("host", ["a.b.wild.test", "wild.test"])
def test_wildcard_does_not_cover_two_or_zero_labels(tls_proxy: TLSProxy, host: str) -> None:
    leaf = served_leaf(tls_proxy.https_port, host)
    assert is_generated_default(leaf), (host, leaf.subject)


def test_exact_host_wins_over_wildcard(tls_proxy: TLSProxy, pki: PKI) -> None:
    leaf = served_leaf(tls_proxy.https_port, "exact.wild.test")
    assert leaf.serial_number == pki.leaves["exact-wild"].serial
    assert served_leaf(tls_proxy.https_port, "inexact.wild.test").serial_number == pki.leaves["wild"].serial


def test_unknown_sni_gets_generated_default(tls_proxy: TLSProxy, pki: PKI) -> None:
    leaf = served_leaf(tls_proxy.https_port, "unknown.example.test")
    assert common_name(leaf) == GENERATED_DEFAULT_CN
    assert leaf.issuer == leaf.subject  # self-signed
    assert leaf.serial_number not in {leaf.serial for leaf in pki.leaves.values()}
    # curl, trusting only our root, refuses it
    done = curl(tls_proxy, "unknown.example.test")
    assert done.returncode != 0
    assert b'"name"' not in done.stdout


def test_missing_sni_gets_generated_default(tls_proxy: TLSProxy) -> None:
    by_openssl = served_leaf(tls_proxy.https_port, None)
    by_python = python_leaf(tls_proxy.https_port, None)
    assert common_name(by_openssl) == GENERATED_DEFAULT_CN
    assert by_python.serial_number == by_openssl.serial_number
    # the same certificate as for an unknown name
    assert served_leaf(tls_proxy.https_port, "unknown.example.test").serial_number == by_openssl.serial_number


def test_host_without_tls_section_is_routed_with_default_certificate(tls_proxy: TLSProxy) -> None:
    """A host routed by an Ingress without spec.tls: the default certificate, and the same routing as on :80."""
    assert is_generated_default(served_leaf(tls_proxy.https_port, "plain.example.test"))
    done = curl(tls_proxy, "plain.example.test", "/insecure", "--insecure")
    assert done.returncode == 0, done.stderr
    echoed = json.loads(done.stdout)
    assert echoed["path"] == "/insecure"
    assert header_values(echoed, "X-Forwarded-Proto") == ["https"]


def test_unrouted_host_gets_404_over_tls(tls_proxy: TLSProxy) -> None:
    done = curl(tls_proxy, "unknown.example.test", "/", "--insecure", "-o", "/dev/null", "-w", "%{http_code}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"404"


@pytest.mark.parametrize("case", ["rsa-pkcs1", "rsa-pkcs8", "ec-pkcs1", "ec-pkcs8"])
def test_key_types_and_encodings(tls_proxy: TLSProxy, pki: PKI, case: str) -> None:
    """RSA and ECDSA keys, each as PKCS#1/SEC1 ("traditional") and as PKCS#8 PEM."""
    host = f"{case}.keys.test"
    leaf = served_leaf(tls_proxy.https_port, host)
    assert leaf.serial_number == pki.leaves[case].serial
    assert type(leaf.public_key()) is type(pki.leaves[case].cert.public_key())
    # a full handshake with verification proves the server signs with the matching key
    echoed = curl_json(tls_proxy, host)
    assert header_values(echoed, "X-Forwarded-Proto") == ["https"]


def test_secret_with_string_data(tls_proxy: TLSProxy, pki: PKI) -> None:
    chain = served_chain(tls_proxy.https_port, "string-data.example.test")
    assert [c.serial_number for c in chain] == [pki.leaves["string-data"].serial, pki.intermediate.cert.serial_number]
    assert curl_json(tls_proxy, "string-data.example.test")["path"] == "/"


def test_secret_from_another_namespace_is_not_used(tls_proxy: TLSProxy, pki: PKI) -> None:
    leaf = served_leaf(tls_proxy.https_port, "crossns.example.test")
    assert leaf.serial_number != pki.leaves["exact"].serial
    assert is_generated_default(leaf)


def test_not_after_metric(tls_proxy: TLSProxy, pki: PKI) -> None:
    samples = metric_samples(tls_proxy.process, NOT_AFTER_METRIC)
    by_secret = {(labels.get("namespace"), labels.get("secret")): value for labels, value in samples}
    for name in ("exact", "wild", "ec-pkcs8"):
        key = ("default", f"{name}-tls")
        assert key in by_secret, (key, sorted(by_secret))
        assert by_secret[key] == pytest.approx(pki.leaves[name].not_after.timestamp(), abs=1)


# -- default certificate named by --default-certificate -----------------------


def test_named_default_for_unknown_and_missing_sni(named_default_proxy: TLSProxy, pki: PKI) -> None:
    fallback = pki.leaves["fallback"].serial
    assert served_leaf(named_default_proxy.https_port, "unknown.example.test").serial_number == fallback
    assert served_leaf(named_default_proxy.https_port, None).serial_number == fallback
    assert python_leaf(named_default_proxy.https_port, None).serial_number == fallback


def test_named_default_does_not_replace_matching_certificates(named_default_proxy: TLSProxy, pki: PKI) -> None:
    assert served_leaf(named_default_proxy.https_port, "exact.example.test").serial_number == pki.leaves["exact"].serial
    echoed = curl_json(named_default_proxy, "exact.example.test")
    assert header_values(echoed, "X-Forwarded-Proto") == ["https"]


def test_named_default_for_invalid_secret(named_default_proxy: TLSProxy, pki: PKI) -> None:
    leaf = served_leaf(named_default_proxy.https_port, "mismatch.bad.test")
    assert leaf.serial_number == pki.leaves["fallback"].serial
    assert error_total(named_default_proxy.process) >= 1


# -- invalid Secrets ----------------------------------------------------------


@pytest.mark.parametrize("case", ["mismatch", "expired", "garbage"])
def test_invalid_secret_at_start_falls_back_to_default(tls_proxy: TLSProxy, case: str) -> None:
    leaf = served_leaf(tls_proxy.https_port, f"{case}.bad.test")
    assert is_generated_default(leaf), leaf.subject
    # the host is still routed: only its certificate fell back
    done = curl(tls_proxy, f"{case}.bad.test", "/", "--insecure")
    assert done.returncode == 0, done.stderr
    assert header_values(json.loads(done.stdout), "X-Forwarded-Proto") == ["https"]
    assert f"{case}-tls" in tls_proxy.process.log()


def test_tls_host_not_covered_by_certificate(tls_proxy: TLSProxy, pki: PKI) -> None:
    """spec.tls lists a host the certificate's SANs do not cover: that host is served the default, and it is counted."""
    leaf = served_leaf(tls_proxy.https_port, "uncovered.example.test")
    assert leaf.serial_number != pki.leaves["uncovered"].serial
    assert is_generated_default(leaf)
    assert "uncovered-tls" in tls_proxy.process.log()
    assert sum(value for labels, value in metric_samples(tls_proxy.process, ERRORS_METRIC) if "cover" in labels.get("reason", "")) >= 1


def test_invalid_secrets_at_start_are_counted(tls_proxy: TLSProxy) -> None:
    samples = metric_samples(tls_proxy.process, ERRORS_METRIC)
    assert sum(value for _, value in samples) >= 3, samples  # mismatch, expired, garbage
    assert all("reason" in labels for labels, _ in samples), samples


@pytest.mark.parametrize("case", ["mismatch", "expired"])
def test_invalid_secret_written_later(tls_proxy: TLSProxy, pki: PKI, case: str) -> None:
    """A new Ingress whose Secret is bad: its host gets the default, the error counter goes up, others unaffected."""
    host = f"late-{case}.bad.test"
    leaf = pki.root.issue([host]).with_other_key() if case == "mismatch" else pki.root.issue_expired([host])
    before = error_total(tls_proxy.process)
    generation = tls_proxy.process.generation()
    tls_proxy.manifests.write(f"late-{case}.yaml", tls_secret(f"late-{case}-tls", leaf), tls_ingress(f"late-{case}", host, f"late-{case}-tls"))
    tls_proxy.process.wait_generation_above(generation, timeout=CONVERGENCE_TIMEOUT)
    eventually(lambda: error_total(tls_proxy.process) > before, f"{ERRORS_METRIC} above {before}", timeout=CONVERGENCE_TIMEOUT)
    served = served_leaf(tls_proxy.https_port, host)
    assert served.serial_number != leaf.serial
    assert is_generated_default(served)
    assert f"late-{case}-tls" in tls_proxy.process.log()
    assert served_leaf(tls_proxy.https_port, "exact.example.test").serial_number == pki.leaves["exact"].serial


# -- protocol versions and ALPN -----------------------------------------------


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_tls_12_and_13_accepted_python(tls_proxy: TLSProxy, version: ssl.TLSVersion) -> None:
    context = client_context(tls_proxy.cafile)
    context.minimum_version = context.maximum_version = version
    with tls_socket(tls_proxy.https_port, "exact.example.test", context) as s:
        assert s.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
        s.sendall(request("GET", "/v", host="exact.example.test", headers=[("Connection", "close")]))
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("flag,expected", [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")])
def test_tls_12_and_13_accepted_openssl(tls_proxy: TLSProxy, flag: str, expected: str) -> None:
    result = s_client(tls_proxy.https_port, "exact.example.test", flag)
    assert result.returncode == 0, result.output[-3000:]
    assert result.protocol == expected, result.output[-3000:]


@pytest.mark.parametrize("flag", ["-tls1", "-tls1_1"])
def test_tls_10_and_11_refused_openssl(tls_proxy: TLSProxy, flag: str) -> None:
    result = s_client(tls_proxy.https_port, "exact.example.test", flag, "-cipher", LEGACY_CIPHERS)
    assert "no protocols available" not in result.output, "the client refused by itself; the test proves nothing"
    assert result.returncode != 0, result.output[-3000:]
    assert result.protocol is None, result.output[-3000:]
    assert result.chain == []


@pytest.mark.parametrize("version", ["TLSv1", "TLSv1_1"])
def test_tls_10_and_11_refused_python(tls_proxy: TLSProxy, version: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context = client_context()
        context.set_ciphers(LEGACY_CIPHERS)
        context.minimum_version = context.maximum_version = getattr(ssl.TLSVersion, version)
    with pytest.raises(ssl.SSLError) as caught:
        with tls_socket(tls_proxy.https_port, "exact.example.test", context) as s:
            s.version()
    assert "NO_PROTOCOLS_AVAILABLE" not in str(caught.value), "the client refused by itself"
    assert_listener_serves(tls_proxy)


@pytest.mark.parametrize(("offered", "chosen"), [(["h2", "http/1.1"], "h2"), (["http/1.1", "h2"], "h2"), (["http/1.1"], "http/1.1")])
def test_alpn_prefers_h2_then_http11(tls_proxy: TLSProxy, offered: list[str], chosen: str) -> None:
    """The server's preference decides (RFC 7301 3.2): h2 whenever the client offers it."""
    context = client_context(tls_proxy.cafile)
    context.set_alpn_protocols(offered)
    with tls_socket(tls_proxy.https_port, "exact.example.test", context) as s:
        assert s.selected_alpn_protocol() == chosen
    result = s_client(tls_proxy.https_port, "exact.example.test", "-alpn", ",".join(offered))
    assert result.returncode == 0, result.output[-3000:]
    assert result.alpn == chosen, result.output[-3000:]


# -- hot swap -----------------------------------------------------------------


def test_secret_update_switches_certificate_keepalive_survives(tls_proxy: TLSProxy, pki: PKI) -> None:
    old = pki.leaves["swap"]
    port = tls_proxy.https_port
    assert served_leaf(port, "swap.example.test").serial_number == old.serial
    with tls_raw_client(port, "swap.example.test", tls_proxy.cafile) as kept:
        first = kept.exchange("GET", "/before", host="swap.example.test")
        assert first.status == 200
        assert first.json()["path"] == "/before"
        assert not first.has("Connection") or "close" not in first.connection_tokens

        new = pki.root.issue(["swap.example.test"], "ec")
        tls_proxy.manifests.write("swap-secret.yaml", tls_secret("swap-tls", new, key_format="pkcs1"))
        eventually(
            lambda: python_leaf(port, "swap.example.test").serial_number == new.serial,
            "the new certificate on new handshakes",
            timeout=CONVERGENCE_TIMEOUT,
        )
        assert served_leaf(port, "swap.example.test").serial_number == new.serial
        assert curl_json(tls_proxy, "swap.example.test", "/new")["path"] == "/new"

        # the connection opened before the swap still works, on its old session
        for path in ("/after-1", "/after-2"):
            answer = kept.exchange("GET", path, host="swap.example.test")
            assert answer.status == 200
            assert answer.json()["path"] == path
            assert header_values(answer.json(), "X-Forwarded-Proto") == ["https"]
        der = kept.sock.getpeercert(binary_form=True)  # type: ignore[attr-defined]
        assert x509.load_der_x509_certificate(der).serial_number == old.serial


def test_removed_secret_falls_back_to_default(tls_proxy: TLSProxy, pki: PKI) -> None:
    """Removing the Ingress and Secret: new handshakes get the default, and the expiry sample goes away."""
    port = tls_proxy.https_port
    assert served_leaf(port, "removed.example.test").serial_number == pki.leaves["removed"].serial
    key = ("default", "removed-tls")
    assert key in {(labels.get("namespace"), labels.get("secret")) for labels, _ in metric_samples(tls_proxy.process, NOT_AFTER_METRIC)}
    tls_proxy.manifests.remove("removed.yaml")
    eventually(lambda: is_generated_default(python_leaf(port, "removed.example.test")), "the default certificate after removal", timeout=CONVERGENCE_TIMEOUT)
    assert key not in {(labels.get("namespace"), labels.get("secret")) for labels, _ in metric_samples(tls_proxy.process, NOT_AFTER_METRIC)}
    assert served_leaf(port, "exact.example.test").serial_number == pki.leaves["exact"].serial


# -- bad input on the TLS port ------------------------------------------------


def _closed_cleanly(answer: bytes) -> None:
    assert not answer.endswith(b"<timeout>"), f"the server kept the connection open: {answer[:200]!r}"
    assert b"HTTP/1.1 200" not in answer
    assert b'"name"' not in answer


def test_plain_http_on_tls_port(tls_proxy: TLSProxy) -> None:
    answer = raw_exchange(tls_proxy.https_port, request("GET", "/", host="exact.example.test"), timeout=CLIENT_TIMEOUT)
    _closed_cleanly(answer)
    assert_listener_serves(tls_proxy)


def test_random_bytes_on_tls_port(tls_proxy: TLSProxy) -> None:
    noise = random.Random(4).randbytes(4096)
    # Not a handshake record header, so a server has no reason to wait for more.
    answer = raw_exchange(tls_proxy.https_port, b"\x00\xff" + noise, timeout=CLIENT_TIMEOUT)
    _closed_cleanly(answer)
    assert_listener_serves(tls_proxy)


def client_hello(servername: str) -> bytes:
    """A real ClientHello from Python's ssl module, captured from a memory BIO."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_context().wrap_bio(incoming, outgoing, server_hostname=servername)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    assert hello[:1] == b"\x16" and len(hello) > 100
    return hello


@pytest.mark.parametrize("keep", [5, 60, "half"])
def test_truncated_client_hello(tls_proxy: TLSProxy, keep: int | str) -> None:
    """The first bytes of a ClientHello, then end of stream: the server closes, and goes on serving."""
    hello = client_hello("exact.example.test")
    cut = len(hello) // 2 if keep == "half" else int(keep)
    with socket.create_connection(("127.0.0.1", tls_proxy.https_port), timeout=CLIENT_TIMEOUT) as s:
        s.sendall(hello[:cut])
        s.shutdown(socket.SHUT_WR)
        received = b""
        try:
            while chunk := s.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
        except TimeoutError:
            pytest.fail(f"connection still open {CLIENT_TIMEOUT}s after a truncated ClientHello (received {received[:100]!r})")
    # no ServerHello for half a ClientHello: nothing, or an alert record (0x15)
    assert received == b"" or received[:1] == b"\x15", received[:100]
    assert_listener_serves(tls_proxy)


def test_sni_with_invalid_characters(tls_proxy: TLSProxy, pki: PKI) -> None:
    """A name no certificate can match: either refused or the default, never another host's certificate."""
    result = s_client(tls_proxy.https_port, "bad_name!.exact.example.test")
    if result.chain:
        assert is_generated_default(result.leaf), result.leaf.subject
    else:
        assert result.protocol is None
    assert_listener_serves(tls_proxy)


def test_many_bad_connections_then_good(tls_proxy: TLSProxy, pki: PKI) -> None:
    """A burst of junk and abandoned handshakes leaves the listener serving."""
    hello = client_hello("exact.example.test")
    for i in range(20):
        with socket.create_connection(("127.0.0.1", tls_proxy.https_port), timeout=CLIENT_TIMEOUT) as s:
            s.sendall([b"GET / HTTP/1.0\r\n\r\n", hello[:30], b"\x00" * 64, hello][i % 4])
    assert_listener_serves(tls_proxy)
    assert served_leaf(tls_proxy.https_port, "a.wild.test").serial_number == pki.leaves["wild"].serial
