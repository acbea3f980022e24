# -*- test-case-name: tests.proxy.test_audit_command -*-
"""
C{twingress audit} (and C{python -m ingress audit}): read the cluster once, build the table as
C{twistd ingress} would with the same options, and print every object's fate.  Read-only: it lists
(RBAC get/list, docs/migration.md names them) and writes nothing.  Exit status 0 when the report was
made, whatever it says; 1, with one line on stderr, when the command line or the source is wrong.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from twisted.python import usage

from ingress import __version__
from ingress.audit.cluster import SourceError, read_cluster, read_manifests
from ingress.audit.render import FORMATS
from ingress.audit.report import audit
from ingress.model import ClusterState
from ingress.options import PARAMETERS, TABLE_OPTIONS, build_arguments, given_options, table_options, take_over
from ingress.sources.kube.client import KubeClient

NAME = "twingress audit"


class AuditOptions(usage.Options):
    """The command line of C{twingress audit}: C{twistd ingress}'s options that change the table, shared with it, and --format."""

    synopsis = "Usage: twingress audit [options]"
    longdesc = (
        "What twingress would do with a cluster's Ingresses, Gateway API routes, annotations and ingress-nginx ConfigMap,"
        " before it serves them: the table is built by the code that serves traffic, from one read of the cluster"
        " (--kubeconfig, in a pod its service account, or --manifests DIR). Read-only."
    )
    optParameters: list[list[Any]] = [p for p in PARAMETERS if p[0] in TABLE_OPTIONS] + [
        ["format", None, "text", f"The report: {', '.join(FORMATS)}."],
    ]
    given: frozenset[str] = frozenset()

    def parseOptions(self, options: Optional[list[str]] = None) -> None:
        arguments = sys.argv[1:] if options is None else options
        self.given = given_options(self, arguments)
        super().parseOptions(arguments)

    def opt_version(self) -> None:
        """Print the version and exit."""
        print(f"twingress {__version__}")
        raise SystemExit(0)

    def postOptions(self) -> None:
        take_over(self, self.given)
        if self["format"] not in FORMATS:
            raise usage.UsageError(f"--format must be one of: {', '.join(FORMATS)}")
        table_options(self)


def snapshot(options: AuditOptions) -> tuple[ClusterState, dict[str, Any]]:
    """The cluster read once, and where from (for the report's C{source})."""
    if options["source"] == "manifests":
        return read_manifests(options["manifests"]), {"kind": "manifests", "where": options["manifests"], "refused": []}
    client = KubeClient(options["kubeconfig"])
    try:
        nginx = options["nginx-configmap-key"]
        maps = [key for key in (options["tcp-services-configmap-key"], options["udp-services-configmap-key"], nginx) if key]
        state, refused = read_cluster(client, options["watch-namespace"], maps, [nginx[0]] if nginx else [])
        return state, {"kind": options["source"], "where": client.server, "refused": refused}
    finally:
        client.close()


def main(argv: Optional[list[str]] = None) -> int:
    """The console script: the report on stdout; a wrong line or an unreadable source is one line on stderr and 1."""
    options = AuditOptions()
    try:
        options.parseOptions(sys.argv[1:] if argv is None else argv)
        state, source = snapshot(options)
    except usage.UsageError as error:
        print(f"{NAME}: {error} (see {NAME} --help)", file=sys.stderr)
        return 1
    except SourceError as error:
        print(f"{NAME}: {error}", file=sys.stderr)
        return 1
    report = audit(state, build_arguments(options), source)
    sys.stdout.write(FORMATS[options["format"]](report))
    return 0


def console() -> None:
    """The C{twingress} console script's entry point: C{twingress audit [options]}."""
    arguments = sys.argv[1:]
    if not arguments or arguments[0] != "audit":
        print("usage: twingress audit [options] (see twingress audit --help); the proxy is twistd ingress", file=sys.stderr)
        raise SystemExit(1)
    raise SystemExit(main(arguments[1:]))
