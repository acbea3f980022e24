# -*- test-case-name: tests.unit.test_worker_settings -*-
"""
What the primary tells each worker on its stdin (L{ingress.process.pool}, L{ingress.process.worker}): one
frozen value, written and read here only, so the two sides cannot disagree on a name or a type.

The JSON is the value's fields as they are (bytes as Latin-1 text, tuples and frozensets as lists,
nested settings as objects); L{WorkerConfig.from_json} checks every field's type against the class's
annotations and names the first one missing, unknown or of the wrong type.  A field added to
L{WorkerConfig} (or to the settings it holds) is written and read with no other change.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Union

from ingress.proxy.request.settings import HTTP2Settings, ProxySettings


class WorkerConfigError(ValueError):
    """The primary's configuration does not decode: the message names the field."""


@dataclass(frozen=True, slots=True)
class WorkerListener:
    """One of the listeners the workers share: its name (http, https), address family and descriptors."""

    name: str
    family: int  # socket.AF_INET or AF_INET6
    proxy_protocol: bool  # a haproxy: endpoint: every connection starts with a PROXY header
    fds: tuple[int, ...] = ()  # this worker's sockets of the listener's SO_REUSEPORT group (4, 5, ...)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Everything a worker process needs from the primary's command line."""

    settings: ProxySettings
    listeners: tuple[WorkerListener, ...]
    tls_min_version: str
    tls_ciphers: str
    http2: HTTP2Settings
    access_log: str  # "-", a path, or "off"
    access_log_format: str
    nginx_metrics: bool
    ingress_class: str
    log_format: str
    drain_timeout: float
    stream_interface: str
    gateway_interface: str
    stream_drain_timeout: float
    metrics_created: bool

    def to_json(self) -> bytes:
        """The JSON the primary writes to a worker's stdin."""
        return json.dumps(_encoded(self)).encode()

    @classmethod
    def from_json(cls, data: Union[bytes, str]) -> WorkerConfig:
        """The value the primary wrote; L{WorkerConfigError} naming the field when it is not one."""
        try:
            decoded = json.loads(data)
        except ValueError as error:
            raise WorkerConfigError(f"worker config: not JSON ({error})") from None
        config = _decoded(cls, decoded, "worker config")
        assert isinstance(config, WorkerConfig)
        return config


def _encoded(value: Any) -> Any:
    """C{value} as JSON values: dataclasses as objects of their fields, bytes as Latin-1 text, collections as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {each.name: _encoded(getattr(value, each.name)) for each in dataclasses.fields(value)}
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, (tuple, list)):
        return [_encoded(each) for each in value]
    if isinstance(value, frozenset):
        return sorted(_encoded(each) for each in value)
    return value


def _decoded(kind: Any, value: Any, where: str) -> Any:
    """C{value} (JSON) as an instance of the annotation C{kind}; C{where} names it in the error."""
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in arguments:
            return None
        (inner,) = [each for each in arguments if each is not type(None)]  # Optional[X] only
        return _decoded(inner, value, where)
    if origin in (tuple, frozenset):
        if not isinstance(value, list):
            raise WorkerConfigError(f"{where}: expected a list, got {value!r}")
        items = [_decoded(arguments[0], each, f"{where}[{index}]") for index, each in enumerate(value)]
        return tuple(items) if origin is tuple else frozenset(items)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _instance(kind, value, where)
    return _scalar(kind, value, where)


def _instance(kind: type, value: Any, where: str) -> Any:
    """A dataclass from a JSON object holding exactly its fields."""
    if not isinstance(value, dict):
        raise WorkerConfigError(f"{where}: expected an object, got {value!r}")
    hints = typing.get_type_hints(kind)
    names = [each.name for each in dataclasses.fields(kind)]
    unknown = sorted(set(value) - set(names))
    if unknown:
        raise WorkerConfigError(f"{where}: unknown field {unknown[0]!r}")
    for name in names:
        if name not in value:
            raise WorkerConfigError(f"{where}: field {name!r} is missing")
    return kind(**{name: _decoded(hints[name], value[name], f"{where}.{name}") for name in names})


_SCALARS: dict[Any, tuple[tuple[type, ...], str]] = {
    bool: ((bool,), "true or false"),
    int: ((int,), "a whole number"),
    float: ((int, float), "a number"),
    str: ((str,), "text"),
    bytes: ((str,), "text"),
}


def _scalar(kind: Any, value: Any, where: str) -> Any:
    accepted = _SCALARS.get(kind)
    if accepted is None:
        raise WorkerConfigError(f"{where}: no JSON form for {kind!r}")  # a field of a new type: add it above
    classes, described = accepted
    if type(value) not in classes:  # exactly: True is no whole number here
        raise WorkerConfigError(f"{where}: expected {described}, got {value!r}")
    if kind is bytes:
        return value.encode("latin-1")
    return float(value) if kind is float else value  # a whole number of seconds is written as one
