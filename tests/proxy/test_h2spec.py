"""
h2spec, the HTTP/2 conformance suite (github.com/summerwind/h2spec), as it is, against twistd's
HTTP/2 listeners: TLS with h2 by ALPN, and cleartext h2 by prior knowledge (C{--h2c true}).

h2spec's cases (generic, RFC 7540 and RFC 7541 sections: frames, streams, flow control, errors,
HPACK) each open a connection, send frames, and judge what comes back; the requests among them are
C{GET /} (some with a body) on C{127.0.0.1:<port>}, routed by a catch-all Ingress to an echo
backend.  Every case passes on both listeners but one on h2c, by design (EXPECTED_FAILURES says
why).  testenv/h2spec.sh builds the binary (make testenv); without it the test is skipped, or
fails under TWINGRESS_REQUIRE_KUBE=1.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import ROOT, EchoBackend, Manifests, Twingress, free_port, unavailable

SCRIPT = ROOT / "testenv" / "h2spec.sh"
# Every case h2spec v2.2.1 runs without --strict (`h2spec --dryrun` lists them).
CASES = 145
# The cases a listener fails by design, each with the reason; every other case must pass, and these
# must fail as described (if one passes, the listener changed: drop it here).
#
# The h2c listener is the HTTP/1.1 listener, which turns HTTP/2 (prior knowledge) when a connection
# opens with the preface's request line, "PRI * HTTP/2.0". h2spec's http2/3.5/2 sends
# "INVALID CONNECTION PREFACE\r\n\r\n" and expects the connection closed, as from a port that speaks
# only HTTP/2 (RFC 9113 3.4); here those bytes are a malformed HTTP/1.1 request line, answered 400 and
# closed (RFC 9112 3), so h2spec reads "HTTP/1.1 400" where it expects frames.  A connection that
# does open with the preface's request line and then breaks the preface is closed as RFC 9113 asks:
# test_a_broken_preface_on_the_h2c_listener_closes_the_connection.
EXPECTED_FAILURES = {
    "tls": {},
    "h2c": {"http2/3.5/2": "note that the frame header looked like an HTTP/1.1 header"},
}
SUMMARY = re.compile(r"^(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed$", re.MULTILINE)


@dataclass(frozen=True)
class Listener:
    port: int
    tls: bool


@dataclass(frozen=True)
class Outcome:
    """What one h2spec run reported: its summary's counts and each failed case as C{"id desc: why"}."""

    tests: int
    passed: int
    skipped: int
    failed: int
    failures: list[str]
    output: str


@pytest.fixture(scope="module")
def h2spec() -> Path:
    """The binary testenv/h2spec.sh built (nothing is built here: the test run has no network)."""
    printed = subprocess.run([str(SCRIPT), "--print-path"], check=True, capture_output=True, text=True).stdout
    path = Path(printed.strip().splitlines()[-1])
    if not os.access(path, os.X_OK):
        unavailable(f"h2spec is not built ({path} is missing): run make testenv or testenv/h2spec.sh")
    return path


@pytest.fixture(scope="module")
def listeners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Listener]]:
    """One twistd with both HTTP/2 listeners, every host routed to an echo backend."""
    echo = EchoBackend("pod-h2spec")
    manifests = Manifests(tmp_path_factory.mktemp("h2spec"))
    manifests.write("all.yaml", *manifests.service("echo", [echo.address]), Manifests.ingress("any", "", "echo"))
    https_port = free_port()
    twingress = Twingress(manifests.path, "--https", f"tcp:{https_port}:interface=127.0.0.1", "--h2c", "true")
    yield {"tls": Listener(https_port, tls=True), "h2c": Listener(twingress.http_port, tls=False)}
    twingress.stop()
    echo.stop()


def run_h2spec(binary: Path, listener: Listener, report: Path) -> Outcome:
    """h2spec's default run (every case but the --strict ones) against C{listener}, 2 s per case."""
    command = [str(binary), "-h", "127.0.0.1", "-p", str(listener.port), "-o", "2", "-j", str(report)]
    if listener.tls:
        command += ["-t", "-k"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    found = SUMMARY.search(output)
    assert found, f"h2spec printed no summary (exit {result.returncode}):\n{output[-4000:]}"
    tests, passed, skipped, failed = (int(n) for n in found.groups())
    return Outcome(tests, passed, skipped, failed, failures(report) if report.exists() else [], output)


def failures(report: Path) -> list[str]:
    """Each failed case of h2spec's JUnit report, as C{"http2/3.5/2 Sends invalid connection preface: <what h2spec expected and met>"}."""
    found = []
    for suite in ElementTree.parse(report).getroot().iter("testsuite"):
        # A suite's cases are in h2spec's order, so the position is the case's number in its id.
        for number, case in enumerate(suite.iter("testcase"), start=1):
            problem = case.find("failure")
            if problem is None:
                problem = case.find("error")
            if problem is not None:
                why = " ".join((problem.text or "").split())
                found.append(f"{suite.get('package')}/{number} {case.get('classname')}: {why}")
    return found


@pytest.mark.parametrize("kind", ["tls", "h2c"])
def test_h2spec_on_each_http2_listener(kind: str, h2spec: Path, listeners: dict[str, Listener], tmp_path: Path) -> None:
    outcome = run_h2spec(h2spec, listeners[kind], tmp_path / "report.xml")
    print(f"h2spec on the {kind} listener: {outcome.tests} tests, {outcome.passed} passed, {outcome.skipped} skipped, {outcome.failed} failed")
    expected = EXPECTED_FAILURES[kind]
    failed = {failure.split(" ", 1)[0]: failure for failure in outcome.failures}
    unexpected = [failure for case, failure in failed.items() if case not in expected or expected[case] not in failure]
    assert not unexpected, "h2spec failures:\n" + "\n".join(unexpected)
    assert sorted(failed) == sorted(expected), f"expected to fail: {sorted(expected)}\n" + outcome.output[-6000:]
    assert (outcome.tests, outcome.passed, outcome.failed) == (CASES, CASES - len(expected), len(expected)), outcome.output[-6000:]


def test_a_broken_preface_on_the_h2c_listener_closes_the_connection(listeners: dict[str, Listener]) -> None:
    """
    What h2spec's http2/3.5/2 asks, for a connection that opened as HTTP/2: an invalid preface is a
    connection error, the connection closed (the GOAWAY may be omitted, RFC 9113 3.4), never an
    HTTP/1.1 answer.  Bytes that are not the preface's request line stay HTTP/1.1's: a 400.
    """
    port = listeners["h2c"].port
    answer = read_all(port, b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n")
    assert answer[3:4] == b"\x04" and b"HTTP/1.1" not in answer  # the server's preface (SETTINGS), then closed
    assert read_all(port, b"INVALID CONNECTION PREFACE\r\n\r\n").startswith(b"HTTP/1.1 400 ")


def read_all(port: int, data: bytes) -> bytes:
    """What 127.0.0.1:C{port} sends after C{data} until it closes the connection (within 5 s, or the test fails)."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(data)
        while chunk := connection.recv(65536):
            received += chunk
    return received
