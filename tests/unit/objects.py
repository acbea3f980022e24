"""
Compact builders of API dicts for the routing tests: each case reads like a manifest.

States are written as API dicts and parsed by L{ingress.model.parse.state_from_objects},
the way a manifests directory gives them.
"""

from __future__ import annotations

from typing import Any, Optional

from ingress.model import CONTROLLER_NAME, ClusterState, Problem
from ingress.model.parse import Kind, collect, kind_of, object_ref, parse_object, state_from_objects
from ingress.routing import RoutingTable, build, normalize_host
from ingress.routing.build_options import BuildOptions
from ingress.routing.report import Built
from ingress.sources.kube.parts import Snapshots
from ingress.sources.kube.reflector import Store as ReflectorStore

T0, T1, T2 = "2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z", "2024-01-03T00:00:00Z"
DEFAULT_CLASS = {"ingressclass.kubernetes.io/is-default-class": "true"}

def path(p: str, svc: str = "web", port: Any = 80, kind: str = "Prefix") -> dict[str, Any]:
    """One HTTP path; C{port} is a number or a port name."""
    key = "number" if isinstance(port, int) else "name"
    return {"path": p, "pathType": kind, "backend": {"service": {"name": svc, "port": {key: port}}}}


def rule(host: Optional[str], *paths: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {"http": {"paths": list(paths)}}
    if host is not None:
        result["host"] = host
    return result


def ingress(
    name: str,
    *rules: dict[str, Any],
    ns: str = "default",
    cls: Optional[str] = "twingress",
    created: str = T0,
    default: Optional[tuple[str, Any]] = None,
    annotations: Optional[dict[str, str]] = None,
    tls: tuple[tuple[tuple[str, ...], str], ...] = (),
) -> dict[str, Any]:
    """
    An Ingress of our class by default; C{default} is (service, port) for spec.defaultBackend,
    C{tls} its spec.tls as (hosts, secretName) pairs.
    """
    spec: dict[str, Any] = {"rules": list(rules)} if rules else {}
    if cls is not None:
        spec["ingressClassName"] = cls
    if default is not None:
        spec["defaultBackend"] = path("/", *default)["backend"]
    if tls:
        spec["tls"] = [{"hosts": list(hosts), "secretName": secret} for hosts, secret in tls]
    metadata = {"name": name, "namespace": ns, "creationTimestamp": created, "annotations": annotations or {}}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": metadata, "spec": spec}


def ingress_class(name: str, controller: str = CONTROLLER_NAME, default: bool = False) -> dict[str, Any]:
    metadata = {"name": name, "annotations": DEFAULT_CLASS if default else {}}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": metadata,
            "spec": {"controller": controller}}


def service(name: str = "web", *ports: tuple[str, int], ns: str = "default", **spec: Any) -> dict[str, Any]:
    """A Service; C{ports} are (name, port) pairs, default one named "http" on 80."""
    items = [{"name": n, "port": p} if n else {"port": p} for n, p in (ports or [("http", 80)])]
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
            "spec": {"ports": items, **spec}}


def endpoints(
    svc: str = "web",
    *addresses: str,
    ports: tuple[tuple[str, int], ...] = (("http", 8080),),
    name: str = "",
    ns: str = "default",
    not_ready: tuple[str, ...] = (),
    address_type: str = "IPv4",
) -> dict[str, Any]:
    """An EndpointSlice of C{svc}: C{addresses} are ready, C{not_ready} are not."""
    items = [{"addresses": [a]} for a in addresses]
    items += [{"addresses": [a], "conditions": {"ready": False}} for a in not_ready]
    metadata = {"name": name or f"{svc}-{len(addresses)}{len(not_ready)}{address_type}", "namespace": ns,
                "labels": {"kubernetes.io/service-name": svc}}
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": metadata,
            "addressType": address_type, "ports": [{"name": n, "port": p} for n, p in ports], "endpoints": items}


PEM_SHAPED = {"tls.crt": "-----BEGIN CERTIFICATE-----\nc\n-----END CERTIFICATE-----\n", "tls.key": "-----BEGIN PRIVATE KEY-----\nk\n-----END PRIVATE KEY-----\n"}
"""A Secret's data in PEM blocks of the right kinds (a Gateway listener asks that much; the contents are not parsed before the TLS layer)."""


def tls_secret(name: str, ns: str = "default") -> dict[str, Any]:
    """A kubernetes.io/tls Secret (its PEM is not checked before the TLS layer)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": name, "namespace": ns},
            "stringData": {"tls.crt": f"cert of {name}", "tls.key": f"key of {name}"}}


class Store:
    """Parsed objects by identity, as the informers keep them; a snapshot is made of these very objects."""

    def __init__(self) -> None:
        self.objects: dict[Any, tuple[Kind, Any]] = {}

    def put(self, obj: dict[str, Any]) -> None:
        kind = kind_of(obj)
        assert kind is not None
        self.objects[(obj["kind"], object_ref(obj))] = (kind, parse_object(obj))

    def delete(self, kind: str, obj: dict[str, Any]) -> None:
        self.objects.pop((kind, object_ref(obj)), None)

    def refuse(self, obj: dict[str, Any], message: str) -> None:
        """A version of C{obj} the source refused: a Problem in the snapshot, beside the last good version (as parse_objects does)."""
        kind = kind_of(obj)
        assert kind is not None
        self.objects[(obj["kind"], object_ref(obj), "refused")] = (kind, Problem(object_ref(obj), "Invalid", message))

    def state(self) -> ClusterState:
        return collect(self.objects.values())


class FollowedStore(Store):
    """
    The same, with snapshots made as the kube source makes them: a reflector store per kind, each
    followed write by write, each snapshot saying what was written since the one before
    (ingress.sources.kube.parts.Snapshots).  A refused version is a Problem under a key of its own.
    """

    def __init__(self) -> None:
        super().__init__()
        self.stores: dict[str, tuple[Kind, ReflectorStore]] = {}
        self.snapshots = Snapshots()

    def _store(self, obj: dict[str, Any]) -> ReflectorStore:
        kind = kind_of(obj)
        assert kind is not None
        return self.stores.setdefault(obj["kind"], (kind, ReflectorStore()))[1]

    def put(self, obj: dict[str, Any]) -> None:
        super().put(obj)
        self._store(obj).put(_store_key(obj), parse_object(obj))

    def delete(self, kind: str, obj: dict[str, Any]) -> None:
        super().delete(kind, obj)
        self._store(obj).delete(_store_key(obj))

    def refuse(self, obj: dict[str, Any], message: str) -> None:
        super().refuse(obj, message)
        namespace, name = _store_key(obj)
        self._store(obj).put((namespace, f"{name}/refused"), Problem(object_ref(obj), "Invalid", message))

    def state(self) -> ClusterState:
        return self.snapshots.take(self.stores.values())


def _store_key(obj: dict[str, Any]) -> tuple[str, str]:
    return (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def table(*objects: dict[str, Any], generation: int = 0, **options: Any) -> Built:
    """The build of C{objects} (its table and report), with the L{BuildOptions} named by C{options}."""
    return build(state_from_objects(objects), BuildOptions(**options), generation)


def target(routes: RoutingTable, host: str, request_path: str = "/") -> Optional[str]:
    """Which upstream a request goes to ("namespace/service:port"), or None for 404."""
    route = routes.match(normalize_host(host), request_path)
    return route.upstream.key if route is not None else None


def problems(built: Built) -> list[tuple[str, str]]:
    """The build's problems (its report's), as ("namespace/name", reason)."""
    return [(f"{p.ref.namespace}/{p.ref.name}", p.reason) for p in built.report.problems]
