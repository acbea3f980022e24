"""
Pebble (Let's Encrypt's ACME test server) and pebble-challtestsrv (its DNS) as real processes, for the
ACME issuer's tests.

testenv/pebble.sh builds both (make testenv); without them a test is skipped, or fails with
TWINGRESS_REQUIRE_KUBE=1.  The DNS answers every name with the address the test chooses (A records
only), Pebble validates HTTP-01 on the port the test names (twingress's --http listener: Pebble's
C{httpPort}) and TLS-ALPN-01 on C{tlsPort}, without its random validation delay
(C{PEBBLE_VA_NOSLEEP=1}) and without rejecting nonces (C{PEBBLE_WFE_NONCEREJECT=0}: the badNonce
retry is a test of its own, not noise in every one).  Pebble's own HTTPS uses a certificate of a
test CA, whose PEM is the C{--acme-ca-file}; its issuing root comes from its management API.
"""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import urllib.request
from pathlib import Path
from typing import Any, Optional

from tests.proxy.certs import CertificateAuthority
from tests.support import ROOT, free_port, unavailable, wait_for_port
from tests.waiting import eventually

SCRIPT = ROOT / "testenv" / "pebble.sh"


def pebble_binaries() -> Path:
    """The directory testenv/pebble.sh built into (nothing is built here: the test run has no network)."""
    found = Path(subprocess.run([str(SCRIPT), "--print-path"], capture_output=True, text=True, check=True).stdout.strip())
    for name in ("pebble", "pebble-challtestsrv"):
        if not (found / name).exists():
            unavailable(f"Pebble is not built ({found / name} is missing): run make testenv or testenv/pebble.sh")
    return found


class Pebble:
    """
    pebble-challtestsrv and Pebble on loopback.  Made in two steps, because twingress needs Pebble's
    directory URL and CA file at its start and Pebble needs twingress's --http port: the constructor
    writes the CA and picks the ports, L{start} runs both and returns when the directory answers.
    """

    def __init__(self, work: Path) -> None:
        self.binaries = pebble_binaries()
        work.mkdir(parents=True, exist_ok=True)
        self.work = work
        self.authority = CertificateAuthority("pebble's own TLS")
        leaf = self.authority.issue(["localhost", "127.0.0.1"])
        (work / "cert.pem").write_bytes(leaf.fullchain_pem())
        (work / "key.pem").write_bytes(leaf.key_pem())
        self.ca_file = self.authority.write(work / "pebble-ca.pem")
        self.dns_port, self.dns_management_port = free_port(), free_port()
        self.port, self.management_port = free_port(), free_port()
        self.processes: list[subprocess.Popen[bytes]] = []
        self._log = open(work / "pebble.log", "wb")

    def start(self, http_port: int, tls_port: int, address: str = "127.0.0.1", env: Optional[dict[str, str]] = None, validity: int = 7776000,
              config: Optional[dict[str, Any]] = None) -> Pebble:
        """
        Run the DNS (every name: C{address}) and Pebble (validating on C{http_port}, C{tls_port}), until its directory answers.
        C{validity}: the seconds its certificates last (its only profile's C{validityPeriod}; a renewal test's are short).
        C{config}: more keys of Pebble's own (C{externalAccountBindingRequired}, C{externalAccountMACKeys}).
        """
        binaries, work = self.binaries, self.work
        self._start([str(binaries / "pebble-challtestsrv"), "-dnsserver", f"127.0.0.1:{self.dns_port}", "-management", f"127.0.0.1:{self.dns_management_port}",
                     "-defaultIPv4", address, "-defaultIPv6", "", "-http01", "", "-https01", "", "-doh", "", "-tlsalpn01", ""], {})
        wait_for_port("127.0.0.1", self.dns_management_port, self.processes[-1])
        config = {"pebble": {
            "listenAddress": f"127.0.0.1:{self.port}", "managementListenAddress": f"127.0.0.1:{self.management_port}",
            "certificate": str(work / "cert.pem"), "privateKey": str(work / "key.pem"),
            "httpPort": http_port, "tlsPort": tls_port, "ocspResponderURL": "", "externalAccountBindingRequired": False,
            "retryAfter": {"authz": 1, "order": 1},
            "profiles": {"default": {"description": "the default", "validityPeriod": validity}},
            **(config or {}),
        }}
        (work / "pebble-config.json").write_text(json.dumps(config))
        pebble_env = {"PEBBLE_VA_NOSLEEP": "1", "PEBBLE_WFE_NONCEREJECT": "0", **(env or {})}
        self._pebble_command = ([str(binaries / "pebble"), "-config", str(work / "pebble-config.json"), "-dnsserver", f"127.0.0.1:{self.dns_port}"], pebble_env)
        self._start(*self._pebble_command)
        self._wait_directory()
        return self

    def stop_server(self) -> None:
        """Stop Pebble itself (the DNS stays): an outage of the ACME server.  Its state (accounts, orders, root) is gone with it."""
        process = self.processes.pop()
        process.terminate()
        process.wait(timeout=10)

    def start_server(self) -> None:
        """Start Pebble again after L{stop_server}, with the same configuration, until its directory answers."""
        self._start(*self._pebble_command)
        self._wait_directory()

    @property
    def directory(self) -> str:
        return f"https://127.0.0.1:{self.port}/dir"

    def _start(self, command: list[str], env: dict[str, str]) -> None:
        self.processes.append(subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=self.work))

    def _context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _get(self, url: str) -> bytes:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=self._context()))
        with opener.open(url, timeout=5) as response:
            data: bytes = response.read()
            return data

    def _wait_directory(self, timeout: float = 20.0) -> None:
        """Until the directory answers with its newOrder URL (an event: Pebble's listener and its state are up)."""

        def answers() -> bool:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"pebble exited ({process.returncode}):\n{self.log()[-3000:]}")
            return "newOrder" in json.loads(self._get(self.directory))

        eventually(answers, "pebble's directory to answer", timeout=timeout, interval=0.1, fatal=(RuntimeError,), context=lambda: self.log()[-3000:])

    def resolve_to(self, address: str) -> None:
        """Every name from now on resolves to C{address} (pebble-challtestsrv's management API)."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.dns_management_port}/set-default-ipv4", data=json.dumps({"ip": address}).encode(), method="POST")
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=5) as response:
            assert response.status == 200, response.status

    def requests(self) -> int:
        """How many ACME requests Pebble served (its log's C{METHOD /path -> calling handler()} lines)."""
        return len(re.findall(r"^Pebble \S+ \S+ (?:GET|POST|HEAD) \S+ -> calling handler", self.log(), re.MULTILINE))

    def new_accounts(self) -> int:
        """How many accounts Pebble made (its log's C{There are now N accounts in memory}, said for each new one)."""
        return len(re.findall(r"There are now \d+ accounts in memory", self.log()))

    def root_pem(self) -> bytes:
        """The root Pebble issues under (made anew at each start), from its management API."""
        return self._get(f"https://127.0.0.1:{self.management_port}/roots/0")

    def log(self) -> str:
        self._log.flush()
        return (self.work / "pebble.log").read_text(errors="replace")

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._log.close()
