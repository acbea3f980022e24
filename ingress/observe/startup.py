# -*- test-case-name: tests.proxy.test_first_minutes -*-
"""
What an operator reads first: one line per listener saying what it serves and where, and
one line for the source and the processes.

Twisted's own lines say it in its terms (C{ProxyProtocolWhenAsked starting on 21080},
C{Starting factory <...Site object at 0x7f...>}); L{ingress.observe.logs} drops those
and these say it in ours::

    twingress 0.1.0: the manifests in examples/quickstart (IngressClass twingress), one process
    HTTP on 127.0.0.1:8080 (--http tcp:8080:interface=127.0.0.1)
    HTTPS on 127.0.0.1:8443 (--https tcp:8443:interface=127.0.0.1), default certificate: self-signed, made at start
    admin on 127.0.0.1:10254 (--admin tcp:10254:interface=127.0.0.1): / lists /healthz /readyz /metrics /debug/routes
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.logger import Logger

from ingress import __version__
from ingress.observe.admin import ENDPOINTS

announce = Logger(namespace="twingress")


def address_text(address: Any) -> str:
    """C{127.0.0.1:8080}, C{[::]:443}, or a UNIX socket's path: where a listener is (a Twisted address or a socket's name)."""
    if isinstance(address, tuple):
        host, port = address[0], address[1]
    elif hasattr(address, "host"):
        host, port = address.host, address.port
    else:
        return str(getattr(address, "name", address))
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listener_label(name: str, options: Mapping[str, Any]) -> str:
    """What the listener C{name} ("http", "https", "admin", "metrics") serves, as its startup line says it."""
    if name in ("admin", "metrics"):
        return name
    label = name.upper()
    if (options[name] or "").startswith("haproxy:"):
        label += " behind the PROXY protocol"
    if name == "http" and options["h2c"] == "true":
        label += " and HTTP/2 with prior knowledge (h2c)"
    return label


def listener_detail(name: str, options: Mapping[str, Any]) -> str:
    """What follows the address on a listener's startup line."""
    if name == "admin":
        return ": / lists " + " ".join(path for path, _ in ENDPOINTS)
    if name == "metrics":
        return ": /metrics only"
    if name == "https":
        certificate = options["default-certificate"] or "self-signed, made at start"
        return f", default certificate: {certificate}" + ("" if options["http2"] == "true" else ", HTTP/1.1 only (--http2 false)")
    return ""


def listening(name: str, options: Mapping[str, Any], address: Any, suffix: str = "") -> None:
    """Log the startup line of the listener C{name}, now listening on C{address}."""
    announce.info(
        "{label} on {address} (--{name} {description}){detail}{suffix}",
        label=listener_label(name, options), address=address_text(address), name=name,
        description=options[name], detail=listener_detail(name, options), suffix=suffix,
    )


def summary(options: Mapping[str, Any]) -> str:
    """The first line: the version, the source, the IngressClass and the processes."""
    source = {
        "manifests": f"the manifests in {options['manifests']}",
        "kubeconfig": f"the cluster of {options['kubeconfig']}",
        "in-cluster": "the cluster this pod runs in (its service account)",
    }[options["source"]]
    count = options["worker-count"]
    processes = "one process" if count == 1 else f"a primary process and {count} worker processes"
    return f"twingress {__version__}: {source} (IngressClass {options['ingress-class']}), {processes}"


def turned_off(options: Mapping[str, Any]) -> list[str]:
    """
    Lines for the listeners turned off (C{--http ''}): a process that serves less than the
    defaults says so, next to the lines of those that listen.
    """
    lines = []
    if not options["http"] and not options["https"]:
        lines.append("no HTTP or HTTPS listener (--http '' --https ''): only the table's stream and Gateway listeners serve")
    if not options["admin"]:
        lines.append("no admin listener (--admin ''): no /healthz, /readyz, /metrics or /debug/routes")
    return lines
