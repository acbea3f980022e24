# -*- test-case-name: tests.proxy.test_first_minutes -*-
"""
The options of C{twistd ingress}, by topic, and the --help that shows them that way.

Twisted's usage.Options prints every option in one alphabetical list (about sixty of
them here), so an operator looking for the TLS options had to read them all.  Each
option is declared here in the group --help shows it in; L{ingress.tap.Options}
takes the flattened list, and a test fails when an option is in no group.

A boolean is always a parameter that takes C{true} or C{false}: C{--http2 false},
C{--h2c true}.  C{--http2-cleartext}, a flag before, stays accepted as the old
spelling of C{--h2c true} (L{ingress.tap.Options.opt_http2_cleartext}).
"""

from __future__ import annotations

import getopt
import ipaddress
import os
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from twisted.python import usage

from ingress.acme.options import ACME_PARAMETERS
from ingress.controllers.options import CONTROLLER_PARAMETERS
from ingress.model import CONTROLLER_NAME, DEFAULT_CLASS_NAME
from ingress.proxy.options import HTTP2_PARAMETERS, LIMIT_PARAMETERS
from ingress.proxy.tls.termination import MODERN_CIPHERS
from ingress.sources.kube.client import in_cluster_available
from ingress.sources.kube.kubeconfig import in_cluster_problem, kubeconfig_problem

Parameter = list[Any]  # [long name, short name, default, help], as usage.Options reads optParameters

LISTENERS: list[Parameter] = [
    ["http", None, "tcp:80", "Endpoint of the plain HTTP listener ('' turns it off)."],
    ["https", None, "tcp:443", "Endpoint of the TLS listener, SNI-selected certificates ('' turns it off)."],
    ["admin", None, "tcp:10254:interface=127.0.0.1", "Endpoint of the admin listener: / lists /healthz /readyz /metrics /debug/routes ('' turns it off)."],
    [
        "metrics", None, "",
        "Endpoint of a second listener that serves /metrics alone, as --admin does (every other path 404), for a scraper ('' turns it off).",
    ],
    ["stream-interface", None, "", "Address the TCP/UDP stream listeners bind ('' = every IPv4 address, :: = IPv6 and IPv4)."],
    [
        "gateway-interface", None, "",
        "Address the Gateway API listeners on ports other than --http/--https bind ('' = every IPv4 address, :: = IPv6 and IPv4).",
    ],
    [
        "gateway-addresses", None, "",
        "Comma-separated IP addresses of this node for Gateways: each Gateway of ours gets one of its own (spec.addresses picks one),"
        " served and reported there. ('' = every Gateway shares the node's addresses).",
    ],
]

SOURCE: list[Parameter] = [
    ["manifests", None, None, "Directory of Kubernetes manifests (YAML/JSON) to route by, instead of a cluster."],
    ["poll-interval", None, 1.0, "Seconds between scans of the manifests directory."],
    ["kubeconfig", None, None, "kubeconfig file of the cluster to watch. [default: in-cluster service account]"],
    ["watch-namespace", None, "", "Watch only this namespace ('' = all namespaces)."],
    ["ingress-class", None, DEFAULT_CLASS_NAME, "IngressClass name this controller serves."],
    ["controller-name", None, CONTROLLER_NAME, "spec.controller value of IngressClasses this controller serves."],
]

TLS: list[Parameter] = [
    ["default-certificate", None, None, "NAMESPACE/NAME of the TLS Secret served when no host matches. [default: self-signed, made at start]"],
    ["tls-min-version", None, "1.2", "Lowest TLS version accepted: 1.2 or 1.3."],
    ["tls-ciphers", None, MODERN_CIPHERS, "OpenSSL cipher list for TLS 1.2 (TLS 1.3 suites are OpenSSL's)."],
    ["https-redirect-port", None, None, "Port in the Location of HTTP to HTTPS redirects (omitted when 443). [default: the --https listener's port]"],
]

WORKERS: list[Parameter] = [
    ["workers", None, "1", "Worker processes serving HTTP, HTTPS and the stream ports: a number, or auto (the CPUs this process may use). 1: one process does everything."],
    ["shutdown-delay", None, 5.0, "Seconds between SIGTERM (/readyz turns 503) and the listeners closing."],
    ["drain-timeout", None, 30.0, "Seconds open requests and streams get after the listeners close."],
    ["stream-drain-timeout", None, 30.0, "Seconds a removed stream's open connections are kept before they are closed."],
    [
        "handover", None, "",
        "Unix socket path (or @NAME: a Linux abstract name, no file) for upgrades: take the listening sockets from the twingress"
        " serving there, then offer them there to the next one ('' = off: bind, and close at exit, as usual).",
    ],
    ["handover-key-file", None, None, "File holding the key (16 bytes or more) both processes of a hand-over must prove they hold; --handover needs it or --handover-key-secret."],
    [
        "handover-key-secret", None, None,
        "NAMESPACE/NAME of a Secret holding the hand-over key (data key 'key'), read from the cluster at start, made (32 random bytes)"
        " when absent; instead of --handover-key-file.",
    ],
    [
        "after-handover", None, "exit",
        "What a twingress does once it has handed its sockets over and drained, when no SIGTERM came first: exit (0), or wait"
        " (holding nothing, /readyz 503) for a SIGTERM; wait in a pod, whose exit the kubelet would restart.",
    ],
    [
        "handover-wait", None, None,
        "Seconds a SIGTERM'd twingress with --handover serves on, waiting for a successor to take its sockets, before it drains"
        " (0: drain at once; a second SIGTERM ends the wait). [default: 30 with --handover]",
    ],
]

MIGRATION: list[Parameter] = [
    [
        "take-over-ingress-nginx", None, "false",
        "The drop-in for a running ingress-nginx (true|false): true sets --controller-name k8s.io/ingress-nginx, --ingress-class nginx,"
        " --nginx-configmap ingress-nginx/ingress-nginx-controller and --update-status false (ingress-nginx still writes the status),"
        " each unless given on the line (then the given one holds).",
    ],
    ["nginx-configmap", None, None, "NAMESPACE/NAME of an ingress-nginx controller ConfigMap: its keys are every route's defaults (ingress-nginx's for keys it lacks)."],
    ["nginx-annotations", None, "true", "Read nginx.ingress.kubernetes.io/ annotations on Ingresses too (true|false); twingress.io/ ones win."],
    ["nginx-metrics", None, "false", "Also expose ingress-nginx's metric names and labels on /metrics, for its dashboards and alerts (true|false)."],
    ["tcp-services-configmap", None, None, "NAMESPACE/NAME of an ingress-nginx tcp-services ConfigMap (\"<port>\": \"<ns>/<svc>:<port>[::PROXY]\") to serve as TCP streams."],
    ["udp-services-configmap", None, None, "NAMESPACE/NAME of an ingress-nginx udp-services ConfigMap (\"<port>\": \"<ns>/<svc>:<port>\") to serve as UDP streams."],
]

LOGS: list[Parameter] = [
    ["log-format", None, "text", "Process log: text (twistd's) or json (one object per line, on stdout)."],
    ["access-log", None, "-", "Access log: '-' (stdout), a file path (reopened on SIGUSR1) or 'off'."],
    ["access-log-format", None, "text", "Access log lines: text (combined log format + fields) or json."],
    ["metrics-created", None, "false", "Also expose the _created series of counters and histograms on /metrics (true|false)."],
]

GROUPS: list[tuple[str, list[Parameter]]] = [
    ("Listeners (Twisted endpoint descriptions: tcp:80, tcp:8080:interface=127.0.0.1, haproxy:tcp:80)", LISTENERS),
    ("Source: a manifests directory, or a cluster", SOURCE),
    ("Cluster controllers (the replica holding the leader Lease)", CONTROLLER_PARAMETERS),
    ("Limits and timeouts", LIMIT_PARAMETERS),
    ("TLS", TLS),
    ("Automatic certificates (ACME, RFC 8555)", ACME_PARAMETERS),
    ("HTTP/2", HTTP2_PARAMETERS),
    ("Workers and shutdown", WORKERS),
    ("Migration from ingress-nginx", MIGRATION),
    ("Logs and metrics", LOGS),
]

# Options that are methods of the Options class (flags without a value), and the group they show in.
HANDLERS = {
    "http2-cleartext": "HTTP/2",
    "version": "General",
    "help": "General",
}

TAKE_OVER = "take-over-ingress-nginx"
TAKE_OVER_SETS: Mapping[str, str] = {
    "controller-name": "k8s.io/ingress-nginx",
    "ingress-class": "nginx",
    # The controller ConfigMap of ingress-nginx's Helm chart and static manifests (deploy/static/provider/*/deploy.yaml)
    "nginx-configmap": "ingress-nginx/ingress-nginx-controller",
    "update-status": "false",
}
"""What --take-over-ingress-nginx sets, option by option, unless the option is given too."""

TABLE_OPTIONS = (
    TAKE_OVER, "manifests", "kubeconfig", "watch-namespace", "ingress-class", "controller-name", "default-certificate",
    "nginx-configmap", "nginx-annotations", "tcp-services-configmap", "udp-services-configmap",
    "gateway-addresses", "h2c", "http", "https", "admin", "metrics",
)
"""The options of C{twistd ingress} that change the routing table (the listeners: their ports are kept from streams), which C{twingress audit} takes too."""

PARAMETERS: list[Parameter] = [parameter for _, parameters in GROUPS for parameter in parameters]


def grouped_usage(options: usage.Options, width: Optional[int] = None) -> str:
    """
    What usage.Options.getUsage prints, one section per topic of L{GROUPS} (in that order), the
    options of a section alphabetical; an option declared but in no group is shown under "Other".
    """
    width = width or int(os.environ.get("COLUMNS", "80"))
    entries = {name: _entry(options, name) for name in _names(options)}
    sections: dict[str, list[str]] = {title: [p[0] for p in group] for title, group in GROUPS}
    for name, title in HANDLERS.items():
        sections.setdefault(title, []).append(name)
    shown = {name for names in sections.values() for name in names}
    sections["Other"] = [name for name in entries if name not in shown]
    text = "\n" + "\n".join(textwrap.wrap(getattr(options, "longdesc", ""), width)) + "\n"
    for title, names in sections.items():
        present = [entries[name] for name in names if name in entries]
        if present:
            text += f"\n{title}:\n" + "".join(usage.docMakeChunks(present, width))
    return text


def group_of(name: str) -> Optional[str]:
    """The topic an option is shown under (None: in no group, so under "Other")."""
    for title, group in GROUPS:
        if any(parameter[0] == name for parameter in group):
            return title
    return HANDLERS.get(name)


def _names(options: usage.Options) -> list[str]:
    return [opt.rstrip("=") for opt in options.longOpt]


def _entry(options: usage.Options, name: str) -> dict[str, Any]:
    """One option as usage.docMakeChunks takes it."""
    parameter = f"{name}=" in options.longOpt
    return {
        "long": name,
        "short": None,
        "doc": options.docs[name],
        "optType": "parameter" if parameter else "flag",
        "default": shown_default(options.defaults.get(name)) if parameter else None,
    }


def shown_default(default: Any) -> Optional[str]:
    """
    A default as --help shows it, written as one would give it (as docs/configuration.md
    writes it): C{1} and C{30}, not C{1.0} and C{30.0}; C{''} for the empty string, which
    usage.Options showed as nothing at all ("[default: ]").
    """
    if default is None:
        return None
    if isinstance(default, float):
        return f"{default:g}"
    return "''" if default == "" else str(default)


def given_once(options: usage.Options, arguments: list[str], names: Sequence[str]) -> None:
    """
    Refuse an option of C{names} given twice (the sources: one directory, one cluster).
    usage.Options keeps the last value, so C{--manifests a --manifests b} served b alone and
    said nothing of a.  Read with getopt, as usage.Options reads the line: C{--manifests=DIR}
    and abbreviations count too.
    """
    try:
        given, _ = getopt.getopt(arguments, options.shortOpt, options.longOpt)
    except getopt.error:
        return  # usage.Options says what is wrong with the line
    for name in names:
        values = [value for option, value in given if option == f"--{name}"]
        if len(values) > 1:
            raise usage.UsageError(f"--{name} given {len(values)} times ({', '.join(map(repr, values))}): give one")


def given_options(options: usage.Options, arguments: list[str]) -> frozenset[str]:
    """The long names of the options given on the line (read with getopt, as usage.Options reads it: abbreviations count)."""
    try:
        given, _ = getopt.getopt(arguments, options.shortOpt, options.longOpt)
    except getopt.error:
        return frozenset()  # usage.Options says what is wrong with the line
    return frozenset(option[2:] for option, _ in given if option.startswith("--"))


def take_over(options: usage.Options, given: frozenset[str]) -> None:
    """
    --take-over-ingress-nginx: each option of L{TAKE_OVER_SETS} the line does not give takes the preset's
    value; one given explicitly wins (C{--take-over-ingress-nginx true --ingress-class internal}: class internal).
    """
    if options[TAKE_OVER] not in ("true", "false"):
        raise usage.UsageError(f"--{TAKE_OVER} must be true or false")
    if options[TAKE_OVER] == "false":
        return
    for name, value in TAKE_OVER_SETS.items():
        if name in options and name not in given:
            options[name] = value


def table_options(options: usage.Options) -> None:
    """
    Check and convert the options that change the table (L{TABLE_OPTIONS}), for C{twistd ingress} and
    C{twingress audit} alike: the source, the NAMESPACE/NAME options, the ports the listeners keep, the Gateway pool.
    """
    options["source"] = source_of(options)
    for option in ("nginx-annotations", "h2c"):
        if options[option] not in ("true", "false"):
            raise usage.UsageError(f"--{option} must be true or false")
    for option in ("default-certificate", "tcp-services-configmap", "udp-services-configmap", "nginx-configmap"):
        options[f"{option}-key"] = namespaced_name(options[option], option)
    options["reserved-ports"] = {port: name for name in ("http", "https", "admin", "metrics") if (port := listener_port(options[name] or "")) is not None}
    options["gateway-address-pool"] = gateway_addresses(options["gateway-addresses"])


def build_arguments(options: Mapping[str, Any]) -> dict[str, Any]:
    """L{ingress.routing.build}'s keyword arguments from the checked options: the proxy's and the audit's, the same."""
    return {
        "class_name": options["ingress-class"],
        "controller_name": options["controller-name"],
        "default_certificate": options["default-certificate-key"],
        "tcp_services": options["tcp-services-configmap-key"],
        "udp_services": options["udp-services-configmap-key"],
        "reserved_ports": options["reserved-ports"],
        "nginx_annotations": options["nginx-annotations"] == "true",
        "nginx_configmap": options["nginx-configmap-key"],
        "cleartext_http2": options["h2c"] == "true",
        "gateway_addresses": options["gateway-address-pool"],
    }


def source_of(options: Mapping[str, Any]) -> str:
    """Which configuration source: "manifests", "kubeconfig" or "in-cluster"; exactly one."""
    if options["manifests"] and options["kubeconfig"]:
        raise usage.UsageError("give either --manifests or --kubeconfig, not both")
    if options["manifests"]:
        if not os.path.isdir(options["manifests"]):
            raise usage.UsageError(f"--manifests {options['manifests']!r} is not a directory")
        return "manifests"
    if options["kubeconfig"]:
        if (problem := kubeconfig_problem(options["kubeconfig"])) is not None:  # loaded now: a bad one fails here, before any listener opens
            raise usage.UsageError(f"--kubeconfig {options['kubeconfig']!r} {problem}")
        return "kubeconfig"
    if in_cluster_available():
        if (problem := in_cluster_problem()) is not None:  # loaded now, as a kubeconfig is
            raise usage.UsageError(problem)
        return "in-cluster"
    raise usage.UsageError(
        "no configuration source: give --manifests DIR (a directory of manifests) or "
        "--kubeconfig PATH, or run in a pod with a service-account token"
    )


def namespaced_name(value: Optional[str], option: str) -> Optional[tuple[str, str]]:
    """An option's NAMESPACE/NAME as a (namespace, name) key; None when not given."""
    if not value:
        return None
    if value.count("/") != 1 or not all(value.split("/")):
        raise usage.UsageError(f"--{option} takes NAMESPACE/NAME")
    namespace, name = value.split("/")
    return (namespace, name)


def gateway_addresses(value: str) -> tuple[str, ...]:
    """--gateway-addresses: IP addresses, each once."""
    found: list[str] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        try:
            address = str(ipaddress.ip_address(item))
        except ValueError:
            raise usage.UsageError(f"--gateway-addresses: {item!r} is not an IP address") from None
        if address not in found:
            found.append(address)
    return tuple(found)


def listener_port(description: str) -> Optional[int]:
    """
    The TCP port of a tcp, tcp6 or ssl endpoint description ("tcp:80", "tcp:port=80:interface=::1"),
    also behind the PROXY-protocol wrapper ("haproxy:tcp:80").

    Stream listeners must not take our own listeners' ports; other endpoint
    types (unix sockets, systemd) hold none.
    """
    kind, _, rest = description.partition(":")
    if kind == "haproxy":
        return listener_port(rest)
    if kind not in ("tcp", "tcp6", "ssl") or not rest:
        return None
    arguments = rest.split(":")
    for argument in arguments:
        key, equals, value = argument.partition("=")
        if equals and key == "port" and value.isdigit():
            return int(value)
    return int(arguments[0]) if arguments[0].isdigit() else None
