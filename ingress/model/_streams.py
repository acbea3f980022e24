# -*- test-case-name: tests.unit.test_streams -*-
"""
Stream objects to L{ingress.model} values: StreamIngress, and ingress-nginx's stream ConfigMaps.

L{parse_stream_ingress} checks what the CRD (C{k8s/base/streamingress-crd.yaml})
checks, with the same messages, because a manifests directory never went
through an API server.  L{parse_config_map} keeps any ConfigMap's string data
without judging it; L{parse_stream_entry} reads one entry of the two maps the
command line names, in ingress-nginx's format
C{"<port>": "<namespace>/<service>:<port>[:PROXY][:PROXY]"}, into the same
shape as a StreamIngress.  Re-exported by L{ingress.model.parse}.  Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from ingress.model import Condition, ConfigMap, ObjectMeta, ServiceBackendPort, StreamIngress
from ingress.model._fields import (
    _DNS_1035_LABEL,
    _DNS_1123_LABEL,
    _IANA_SVC_NAME,
    ParseError,
    _check_dns_subdomain,
    _int,
    _invalid,
    _is_ip,
    _list,
    _mapping,
    _port_number,
    _required,
    _str,
    _timestamp,
)

STREAM_PROTOCOLS = ("TCP", "UDP")
PROXY_PROTOCOLS = ("v1", "v2")
MAX_IDLE_TIMEOUT = 86400
PROXY = "PROXY"


def _status_conditions(status: Any) -> tuple[Condition, ...]:
    """The conditions the leader wrote last; the status writer compares before it writes again."""
    found = []
    for i, entry in enumerate(_list(_mapping(status, "status").get("conditions"), "status.conditions")):
        item = _mapping(entry, f"status.conditions[{i}]")
        found.append(
            Condition(
                type=_str(item.get("type"), f"status.conditions[{i}].type"),
                status=_str(item.get("status"), f"status.conditions[{i}].status"),
                reason=_str(item.get("reason"), f"status.conditions[{i}].reason"),
                message=_str(item.get("message"), f"status.conditions[{i}].message"),
                observed_generation=_int(item.get("observedGeneration"), f"status.conditions[{i}].observedGeneration") or 0,
                last_transition_time=_timestamp(item.get("lastTransitionTime"), f"status.conditions[{i}].lastTransitionTime"),
            )
        )
    return tuple(found)


def parse_stream_ingress(obj: Mapping[str, Any], meta: ObjectMeta) -> StreamIngress:
    """A twingress.io/v1alpha1 StreamIngress, validated as the CRD schema and its CEL rules do."""
    spec = _mapping(obj.get("spec"), "spec")
    if not spec:
        raise _required("spec")
    protocol = _str(spec.get("protocol"), "spec.protocol", "TCP")
    if protocol not in STREAM_PROTOCOLS:
        raise _invalid("spec.protocol", protocol, f"supported values: {list(STREAM_PROTOCOLS)}")
    listen = _port_number(spec.get("listen"), "spec.listen")
    external = spec.get("external", False)
    if not isinstance(external, bool):
        raise _invalid("spec.external", external, "must be a boolean")
    upstream = _mapping(spec.get("upstream"), "spec.upstream")
    if not upstream:
        raise _required("spec.upstream")
    port = _upstream_port(upstream.get("port"), "spec.upstream.port")
    proxy_protocol = _str(spec.get("proxyProtocol"), "spec.proxyProtocol") or None
    if proxy_protocol is not None and proxy_protocol not in PROXY_PROTOCOLS:
        raise _invalid("spec.proxyProtocol", proxy_protocol, f"supported values: {list(PROXY_PROTOCOLS)}")
    if proxy_protocol is not None and protocol != "TCP":
        raise _invalid("spec.proxyProtocol", proxy_protocol, "spec.proxyProtocol is only supported with protocol TCP")
    idle = _int(spec.get("idleTimeout"), "spec.idleTimeout")
    if idle is not None and not 1 <= idle <= MAX_IDLE_TIMEOUT:
        raise _invalid("spec.idleTimeout", idle, f"must be between 1 and {MAX_IDLE_TIMEOUT} seconds")
    idle_timeout = None if idle is None else float(idle)
    conditions = _status_conditions(obj.get("status"))
    if external:
        host = _external_host(upstream, port)
        return StreamIngress(
            meta, protocol, listen, port, external_host=host,
            proxy_protocol=proxy_protocol, idle_timeout=idle_timeout, status_conditions=conditions,
        )
    service, namespace = _service(upstream, meta.namespace)
    return StreamIngress(
        meta, protocol, listen, port, service, namespace,
        proxy_protocol=proxy_protocol, idle_timeout=idle_timeout, status_conditions=conditions,
    )


def _upstream_port(value: Any, path: str) -> ServiceBackendPort:
    """A port number, or a Service port name (IANA_SVC_NAME), as the CRD's int-or-string allows."""
    if isinstance(value, str):
        if not _IANA_SVC_NAME.fullmatch(value):
            raise _invalid(path, value, "must be a port number (1-65535) or a port name (IANA_SVC_NAME: at most 15 of a-z, 0-9, -)")
        return ServiceBackendPort(name=value)
    return ServiceBackendPort(number=_port_number(value, path))


def _external_host(upstream: Mapping[str, Any], port: ServiceBackendPort) -> str:
    if upstream.get("service") is not None:
        raise _invalid("spec.upstream.service", upstream["service"], "spec.upstream.service cannot be set when spec.external is true (use spec.upstream.host)")
    if upstream.get("namespace") is not None:
        raise _invalid("spec.upstream.namespace", upstream["namespace"], "spec.upstream.namespace is for Services; an external upstream has none")
    host = _str(upstream.get("host"), "spec.upstream.host")
    if not host:
        raise _required("spec.upstream.host", "spec.upstream.host is required when spec.external is true")
    if port.number is None:
        raise _invalid("spec.upstream.port", port.name, "an external upstream's port must be a number")
    if not _is_ip(host):
        _check_dns_subdomain(host, "spec.upstream.host")
    return host


def _service(upstream: Mapping[str, Any], own_namespace: str) -> tuple[str, str]:
    if upstream.get("host") is not None:
        raise _invalid("spec.upstream.host", upstream["host"], "spec.upstream.host needs spec.external: true (use spec.upstream.service for a Service)")
    service = _str(upstream.get("service"), "spec.upstream.service")
    if not service:
        raise _required("spec.upstream.service", "spec.upstream.service is required (or set spec.external: true and spec.upstream.host)")
    if len(service) > 63 or not _DNS_1035_LABEL.fullmatch(service):
        raise _invalid("spec.upstream.service", service, "must be an RFC 1035 label")
    namespace = _str(upstream.get("namespace"), "spec.upstream.namespace")
    if namespace and (len(namespace) > 63 or not _DNS_1123_LABEL.fullmatch(namespace)):
        raise _invalid("spec.upstream.namespace", namespace, "must be an RFC 1123 label")
    return service, namespace or own_namespace


# -- v1 ConfigMap, and ingress-nginx's tcp/udp-services entries


def parse_config_map(obj: Mapping[str, Any], meta: ObjectMeta) -> ConfigMap:
    """Any ConfigMap: its string data, and what is not a string (reported only if the map is ours)."""
    data = obj.get("data")
    if data is None:
        return ConfigMap(meta)
    if not isinstance(data, Mapping):
        return ConfigMap(meta, invalid=(f"data: Invalid value: {data!r}: must be an object",))
    good = tuple(sorted((k, v) for k, v in data.items() if isinstance(k, str) and isinstance(v, str)))
    bad = tuple(f"data[{k}]: Invalid value: {v!r}: must be a string" for k, v in data.items() if (k, v) not in good)
    return ConfigMap(meta, good, bad)


def parse_stream_entry(config_map: ConfigMap, protocol: str, key: str, value: str) -> StreamIngress:
    """
    One ingress-nginx entry: C{"9000": "default/example-go:8080"}, optionally C{":PROXY"} twice.

    The first PROXY makes ingress-nginx decode a PROXY header from the client,
    which twingress does not do (refused, so that a client's header is never
    forwarded as data); the second sends one to the upstream: we send v1, as
    nginx does.  Both only for TCP.

    @raise ParseError: the entry cannot be served; the message names its key.
    """
    where = f"data[{key}]"
    if not key.isdigit():
        raise _invalid(where, key, "the key must be the port to listen on")
    listen = _port_number(int(key), where)
    fields = value.strip().split(":")
    if len(fields) < 2 or len(fields) > 4:
        raise _invalid(where, value, 'must be "<namespace>/<service>:<port>[:PROXY][:PROXY]"')
    target, port_text, flags = fields[0], fields[1], fields[2:]
    namespace, _, service = target.partition("/")
    if not namespace or not service:
        raise _invalid(where, value, 'must be "<namespace>/<service>:<port>[:PROXY][:PROXY]"')
    if len(service) > 63 or not _DNS_1035_LABEL.fullmatch(service):
        raise _invalid(where, service, "the Service name must be an RFC 1035 label")
    if len(namespace) > 63 or not _DNS_1123_LABEL.fullmatch(namespace):
        raise _invalid(where, namespace, "the namespace must be an RFC 1123 label")
    port = _upstream_port(int(port_text) if port_text.isdigit() else port_text, where)
    return StreamIngress(
        config_map.meta, protocol, listen, port, service, namespace, proxy_protocol=_proxy_flags(where, protocol, flags)
    )


def _proxy_flags(where: str, protocol: str, flags: list[str]) -> Optional[str]:
    """The two optional PROXY fields: (decode from the client, encode to the upstream)."""
    if any(flag not in ("", PROXY) for flag in flags):
        raise _invalid(where, ":".join(flags), 'the fields after the port may only be "PROXY" or empty')
    decode = len(flags) > 0 and flags[0] == PROXY
    encode = len(flags) > 1 and flags[1] == PROXY
    if decode:
        raise ParseError(
            "UnsupportedProxyProtocol",
            f"{where}: the first PROXY (decode a PROXY header from clients) is not supported; "
            'to send one to the upstream, leave the first field empty: "<ns>/<svc>:<port>::PROXY"',
        )
    if encode and protocol != "TCP":
        raise ParseError("UnsupportedProxyProtocol", f"{where}: PROXY is only supported for TCP services")
    return "v1" if encode else None
