"""
The upstream Gateway API conformance suite against twingress: what it needs around the test
cluster, the run itself, and its report.

- L{suite_binaries}: conformance.test, echo-basic and dnswhoami from testenv/gateway-conformance.sh.
- L{run_suite}: C{conformance.test -test.run TestConformance} with our profiles and features; the
  report it writes (C{--report-output}) is read back by L{Report}.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support import ROOT

SCRIPT = ROOT / "testenv" / "gateway-conformance.sh"
BINARIES = ("conformance.test", "echo-basic", "dnswhoami")
GATEWAY_CLASS = "twingress-conformance"
GATEWAY_ADDRESS = "10.244.0.1"
"""What twingress publishes in Gateway status for a Gateway without an address of its own."""

GATEWAY_POOL = tuple(f"10.244.2.{n}" for n in range(1, 33))
"""The addresses twingress gives Gateways (--gateway-addresses), added to the test namespace's lo for the run."""

PROFILES = ("GATEWAY-HTTP", "GATEWAY-TLS", "GATEWAY-GRPC", "GATEWAY-TCP", "GATEWAY-UDP")
"""The conformance profiles claimed."""

FEATURES = (
    # core of the profiles
    "Gateway", "ReferenceGrant", "HTTPRoute", "TLSRoute", "GRPCRoute", "TCPRoute", "UDPRoute",
    # extended, implemented
    "GatewayPort8080",
    "HTTPRouteMethodMatching", "HTTPRouteQueryParamMatching", "HTTPRouteResponseHeaderModification",
    "HTTPRouteHostRewrite", "HTTPRoutePathRewrite",
    "HTTPRouteSchemeRedirect", "HTTPRoutePortRedirect", "HTTPRoutePathRedirect",
    "HTTPRoute303RedirectStatusCode", "HTTPRoute307RedirectStatusCode", "HTTPRoute308RedirectStatusCode",
    "HTTPRouteParentRefPort", "HTTPRouteRequestMirror", "HTTPRouteRequestMultipleMirrors", "HTTPRouteRequestPercentageMirror",
    "HTTPRouteRequestTimeout", "HTTPRouteBackendTimeout", "HTTPRouteBackendProtocolWebSocket", "HTTPRouteBackendProtocolH2C",
    "HTTPRouteRetry",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteCORS", "HTTPRouteBackendRequestHeaderModification",
    "GatewayHTTPListenerIsolation", "GatewayHTTPSListenerDetectMisdirectedRequests",
    "GRPCRouteNamedRouteRule",
    "TLSRouteModeTerminate", "TLSRouteModeMixed",
)
"""
The features claimed: each one's tests run, and must pass (docs/gateway-api.md lists those not claimed, and why).
Two are of v1.6.3's experimental channel (pkg/features: FeatureChannelExperimental): TLSRouteModeMixed, and
HTTPRouteRetry, whose rules[].retry only the experimental HTTPRoute CRD has (standard from v1.7.0): the run
installs the experimental channel's CRDs (testenv/gateway-api.sh); with the standard ones the apiserver
pruned the field and the suite's retries never reached twingress. The channel's other experimental
features are not claimed: HTTPRouteRetryBackendTimeout and HTTPRouteRetryConnectionError (not implemented;
no v1.6.3 test) and HTTPRouteDestinationPortMatching (not implemented).
"""

TIMEOUT_OVERRIDES = {
    # The suite's defaults (conformance/utils/config/timeout.go) wait minutes for things that
    # twingress does in about a second; a failure should not cost three minutes of CI.
    "GatewayMustHaveAddress": 30,
    "GatewayMustHaveCondition": 30,
    "GWCMustBeAccepted": 30,
    "NamespacesMustBeReady": 120,
}

SUITE_TIMEOUT = 1500.0
"""The whole run, as go test's own -test.timeout too (its panic names the test that hung)."""


def suite_binaries() -> Path:
    """The directory testenv/gateway-conformance.sh builds into (not building anything here)."""
    out = subprocess.run([str(SCRIPT), "--print-bin-dir"], check=True, capture_output=True, text=True).stdout
    return Path(out.strip().splitlines()[-1])


def missing(bin_dir: Path) -> list[str]:
    return [b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]


@dataclass
class Run:
    returncode: int
    seconds: float
    output_path: Path


def run_suite(bin_dir: Path, kubeconfig: Path, report_path: Path, output_path: Path, version: str) -> Run:
    """The suite, to the end: its output goes to C{output_path}, its report to C{report_path}."""
    overrides = ";".join(f"{name}:{seconds}" for name, seconds in TIMEOUT_OVERRIDES.items())
    argv = [
        str(bin_dir / "conformance.test"),
        "-test.run", "^TestConformance$",
        "-test.v",
        f"-test.timeout={int(SUITE_TIMEOUT)}s",
        f"--gateway-class={GATEWAY_CLASS}",
        f"--conformance-profiles={','.join(PROFILES)}",
        f"--supported-features={','.join(FEATURES)}",
        f"--report-output={report_path}",
        "--organization=twingress",
        "--project=twingress",
        "--url=https://github.com/twingress/twingress",
        f"--version={version}",
        "--contact=https://github.com/twingress/twingress/issues",
        "--mode=default",
        "--cleanup-base-resources=true",
        f"--timeout-config-overrides={overrides}",
    ]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    start = time.monotonic()
    with open(output_path, "wb") as output:
        process = subprocess.run(argv, env=env, cwd=bin_dir, stdout=output, stderr=subprocess.STDOUT, timeout=SUITE_TIMEOUT + 60)
    return Run(process.returncode, time.monotonic() - start, output_path)


class Report:
    """The report the suite wrote (apis/v1/conformancereport.go in the conformance module)."""

    def __init__(self, path: Path) -> None:
        self.data: dict[str, Any] = yaml.safe_load(path.read_text())

    def profiles(self) -> dict[str, dict[str, Any]]:
        return {p["name"]: p for p in self.data.get("profiles") or []}

    def counts(self) -> dict[str, dict[str, int]]:
        """{profile: {"Passed": n, "Failed": n, "Skipped": n}} over core and extended."""
        found: dict[str, dict[str, int]] = {}
        for name, profile in self.profiles().items():
            total = {"Passed": 0, "Failed": 0, "Skipped": 0}
            for part in ("core", "extended"):
                stats = (profile.get(part) or {}).get("statistics") or {}
                for key in total:
                    total[key] += int(stats.get(key, 0))
            found[name] = total
        return found

    def failed(self) -> dict[str, list[str]]:
        """{profile: the names of its failed tests}."""
        return {
            name: [t for part in ("core", "extended") for t in (profile.get(part) or {}).get("failedTests") or []]
            for name, profile in self.profiles().items()
        }


def add_addresses(addresses: tuple[str, ...]) -> None:
    """Put C{addresses} on lo (in the test's network namespace: the node's addresses for Gateways)."""
    for address in addresses:
        subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", "lo"], check=True, capture_output=True)


def remove_addresses(addresses: tuple[str, ...]) -> None:
    for address in addresses:
        subprocess.run(["ip", "addr", "del", f"{address}/32", "dev", "lo"], check=False, capture_output=True)
