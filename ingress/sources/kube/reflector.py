# -*- test-case-name: tests.kube.test_faults -*-
"""
One informer per watched kind: list, then watch from the list's
resourceVersion, on a dedicated daemon thread.

The protocol (as client-go's Reflector): list with pagination, replace the
store atomically, watch with bookmarks and a server-side timeout, follow the
resourceVersion through events and bookmarks, relist on 410 Gone, rebuild the
client on 401, back off exponentially with jitter on any other error (from
the first failure, as client-go: L{Backoff}).  A client read timeout longer
than the bookmark interval notices dead connections.  Nothing here touches the
reactor nor logs each failure: changes are reported through C{on_change} and
C{on_status}, which the source hands over with C{callFromThread}; the source
logs the state changes and one summary while an outage lasts
(L{ingress.sources.kube.outage}), and L{Reflector.wake}s the others as soon as
one informer reaches the apiserver again.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Optional

from twisted.logger import Logger

from ingress.model import Problem
from ingress.model.parse import ParseError, object_ref, parse_object
from ingress.sources.kube.backoff import BACKOFF_CAP, Backoff, read_timed_out
from ingress.sources.kube.client import APIError, KubeClient

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

LIST_PAGE = 500
WATCH_SECONDS = 300  # server-side; jittered so watches don't all end together
READ_TIMEOUT = 90.0  # > the ~60 s bookmark interval of a watch that has news; a quiet one is watched again


class Gone(Exception):
    """The resourceVersion is too old (410): only a relist can continue."""


@dataclass(frozen=True)
class Resource:
    """What to watch: its API path (all namespaces or one), kind and optional field selector."""

    kind: str
    api_version: str
    plural: str
    namespaced: bool = True
    field_selector: str = ""
    label_selector: str = ""

    def selectors(self) -> dict[str, str]:
        """The list/watch query's selectors, when set."""
        query = {}
        if self.field_selector:
            query["fieldSelector"] = self.field_selector
        if self.label_selector:
            query["labelSelector"] = self.label_selector
        return query

    def path(self, namespace: str = "") -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"


class Store:
    """
    The informer's view of one kind: key → model value or L{Problem}.

    Written by the reflector thread, read by the build thread: a lock guards
    it and readers get a copy.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], Any] = {}
        self._written: dict[tuple[str, str], bool] = {}  # keys written since the last take_changes, in _items' order; True: deleted meanwhile
        self._whole = True  # the next take_changes hands out every item (the first one, or after a relist)

    def replace(self, items: dict[tuple[str, str], Any]) -> set[tuple[str, str]]:
        """Swap in a relist's items; returns the keys that changed (added, removed or different)."""
        with self._lock:
            old, self._items = self._items, items
            self._whole = True
            self._written.clear()
        return {k for k in old.keys() | items.keys() if old.get(k) != items.get(k)}

    def get(self, key: tuple[str, str]) -> Any:
        """The value stored under (namespace, name), or None."""
        with self._lock:
            return self._items.get(key)

    def put(self, key: tuple[str, str], value: Any) -> None:
        with self._lock:
            deleted = self._written.get(key, False)
            if key not in self._items:
                self._written.pop(key, None)  # a new key goes last, here as in _items
            self._items[key] = value
            self._written[key] = deleted

    def delete(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._items.pop(key, None)
            self._written.pop(key, None)
            self._written[key] = True

    def take_changes(self) -> tuple[bool, list[tuple[tuple[str, str], Any]]]:
        """
        For the one reader that follows the store write by write (the snapshot's
        L{ingress.sources.kube.parts.CollectedPart}): whether to start again, and the items to
        apply, every item when starting again, else the keys written since the last call with
        their values now (None: deleted; a key deleted and written again comes as both, so that it
        goes last as it did here): applied in order, the reader's values are in the store's order.
        """
        with self._lock:
            whole, self._whole = self._whole, False
            changes: list[tuple[tuple[str, str], Any]] = []
            if whole:
                changes.extend(self._items.items())
            else:
                for key, deleted in self._written.items():
                    value = self._items.get(key)
                    if deleted and value is not None:
                        changes.append((key, None))
                    changes.append((key, value))
            self._written.clear()
            return whole, changes

    def values(self) -> list[Any]:
        with self._lock:
            return list(self._items.values())

    def keys(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._items)

    def __len__(self) -> int:
        return len(self._items)


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


def parse_item(obj: Mapping[str, Any]) -> Any:
    """A model value, None (ignored), or a Problem for an object we cannot use."""
    try:
        return parse_object(obj)
    except ParseError as error:
        return Problem(object_ref(obj), error.reason, error.message, left_out=True)  # the Store holds it instead of the object


class Reflector:
    """List+watch one L{Resource} into a L{Store}, forever, until L{stop}."""

    def __init__(
        self,
        client_factory: Callable[[], KubeClient],
        resource: Resource,
        on_change: Callable[[], None],
        on_status: Callable[[Reflector], None],
        namespace: str = "",
        read_timeout: float = READ_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client_factory = client_factory
        self.read_timeout = read_timeout
        self.client = client_factory()
        self.resource = resource
        self.namespace = namespace
        self.store = Store()
        self.on_change = on_change
        self.on_status = on_status
        self.clock = clock
        self.key_listeners: list[Callable[[tuple[str, str]], None]] = []  # called on this thread, per changed key
        self.synced = False
        self.connected = False
        self.relists = 0
        self.watch_restarts = 0
        self.last_error = ""
        self.failing_since: Optional[float] = None  # C{clock} time of the current run of failures' first; None: none
        self.failures = 0  # tries that failed in the current run
        self._version = ""  # the last resourceVersion seen; empty means "list first"
        self._watching = False  # a watch was established since the last failure: the next one's backoff starts afresh
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"reflector-{resource.kind}", daemon=True)

    @property
    def name(self) -> str:
        """The kind, or "ConfigMap namespace/name" for a single named object: log lines, metrics label, /readyz key."""
        selector = self.resource.field_selector
        if selector == "type=Opaque":
            return f"{self.resource.kind} (Opaque)"
        if selector.startswith("metadata.name="):
            return f"{self.resource.kind} {self.namespace}/{selector.partition('=')[2]}"
        return self.resource.kind

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()

    def wake(self) -> None:
        """
        Try again now if waiting out a backoff, and start the backoff afresh (thread-safe):
        another informer has just reached the apiserver, so this one need not sleep out the rest
        of its delay.  After a refusal too: a 401, 403 or 404 right after the apiserver is back
        may be its start (an authorizer or an API group not ready yet), and a backoff grown over
        the outage would keep that informer away for up to 30 s after it is over.  A kind that is
        really not installed costs a few more requests per outage.
        """
        self._wake.set()

    def _run(self) -> None:
        """
        List once, then watch; a broken watch is resumed from the last
        resourceVersion seen (after a backoff), and only 410 Gone - or a
        failed list - starts over with a list, as client-go does: a reset
        connection must not cost a relist of 10k objects.
        """
        backoff = Backoff()
        while not self._stopped.is_set():
            self._wake.clear()
            try:
                if not self._version:
                    self._version = self._list()
                    backoff.reset()
                self._watching = False
                self._watch()
            except Gone:
                log.info("{kind}: resourceVersion too old, relisting", kind=self.name)
                self._version = ""
                continue
            except Exception as error:  # noqa: BLE001 - an informer must never die
                if isinstance(error, APIError) and error.status == 410:  # on the watch request itself
                    log.info("{kind}: resourceVersion too old, relisting", kind=self.name)
                    self._version = ""
                    continue
                if self._watching:  # it worked until now: this failure is the first of a run
                    backoff.reset()
                self._failed(error)
                if self._pause(backoff.next()):
                    backoff.reset()  # another informer is back: what follows is the apiserver's start, a new run
                if self._stopped.is_set():
                    return
                if self._version:
                    self.watch_restarts += 1
                    self.on_status(self)

    def _pause(self, delay: float) -> bool:
        """Wait C{delay} seconds, less if L{wake}d (or stopped); whether woken."""
        return not self._stopped.is_set() and self._wake.wait(delay)

    def _failed(self, error: Exception) -> None:
        """
        Record the failure; log it only when it starts a run of failures (the source logs one
        summary while an outage lasts, and L{_works} says when it is over), or for a 401.
        """
        self.last_error = str(error)[:300]
        self.connected = False
        self.failures += 1
        if self.failing_since is None:
            self.failing_since = self.clock()
            if not (isinstance(error, APIError) and error.status == 401):
                log.warn(
                    "{kind}: list/watch failed: {error}; retrying with backoff (up to {cap:.0f} s), without a line per try",
                    kind=self.name,
                    error=self.last_error,
                    cap=BACKOFF_CAP,
                )
        self.on_status(self)  # every failure, also those before a first list (a kind that is not installed)
        if isinstance(error, APIError) and error.status == 401:
            log.warn("{kind}: unauthorized, reloading credentials", kind=self.name)
            try:
                self.client = self.client_factory()
            except Exception as reload_error:  # noqa: BLE001
                log.error("{kind}: cannot reload credentials: {e}", kind=self.name, e=str(reload_error))

    def _works(self) -> None:
        """A list or a watch worked: a run of failures is over, with one line saying how long it lasted."""
        if self.failing_since is not None:
            log.info(
                "{kind}: list/watch works again after {seconds:.1f} s ({failures} failed tries, the last: {error})",
                kind=self.name,
                seconds=self.clock() - self.failing_since,
                failures=self.failures,
                error=self.last_error,
            )
            self.failing_since, self.failures = None, 0

    def _set_connected(self, connected: bool) -> None:
        if connected:
            self._works()
        if connected != self.connected:
            self.connected = connected
            self.on_status(self)

    def _list(self) -> str:
        """List every page, then replace the store in one step; returns the list's resourceVersion."""
        query: dict[str, Any] = {"limit": LIST_PAGE, **self.resource.selectors()}
        items: dict[tuple[str, str], Any] = {}
        while True:
            page = self.client.request("GET", self.resource.path(self.namespace), query, timeout=(5.0, 60.0))
            for obj in page.get("items") or ():
                obj.setdefault("apiVersion", self.resource.api_version)
                obj.setdefault("kind", self.resource.kind)
                value = parse_item(obj)
                if value is not None:
                    items[_key(obj)] = value
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                version = str(meta.get("resourceVersion", ""))
                break
            query["continue"] = meta["continue"]
        self._notify(self.store.replace(items))
        self.relists += 1
        self.synced = True
        self._works()
        self.connected = True
        self.on_status(self)
        self.on_change()
        return version

    def _watch(self) -> None:
        """
        Watch from the current resourceVersion until stopped; a server-side timeout just re-watches,
        and so does a quiet one: no event and no bookmark for the read timeout.  An apiserver sends a
        bookmark only when it has a resourceVersion newer than the watch's, which for a kind nobody
        changes comes with etcd's progress notifications (ten minutes apart by default) or never, so
        a quiet watch is no dead connection: a dead one shows as the next watch failing to start.
        """
        while not self._stopped.is_set():
            query: dict[str, Any] = {
                "watch": "true",
                "resourceVersion": self._version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": int(WATCH_SECONDS * random.uniform(0.8, 1.2)),
                **self.resource.selectors(),
            }
            stream = self.client.stream_lines(self.resource.path(self.namespace), query, timeout=(5.0, self.read_timeout))
            self._set_connected(True)
            self._watching = True
            try:
                for event in stream:
                    if self._stopped.is_set():
                        return
                    self._version = self._apply(event, self._version)
            except Exception as error:  # noqa: BLE001 - only a read timeout is a quiet watch; the rest goes on up
                if not read_timed_out(error):
                    raise
            self.watch_restarts += 1
            self.on_status(self)

    def _apply(self, event: Mapping[str, Any], version: str) -> str:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise Gone()
            raise APIError(int(code or 500), str(obj.get("message", "watch error")), obj)
        new_version = str((obj.get("metadata") or {}).get("resourceVersion", "")) or version
        if kind == "BOOKMARK":
            return new_version
        obj.setdefault("apiVersion", self.resource.api_version)
        obj.setdefault("kind", self.resource.kind)
        key = _key(obj)
        if kind == "DELETED":
            self.store.delete(key)
        else:
            value = parse_item(obj)
            if value is None:
                self.store.delete(key)  # e.g. a Secret whose type changed away from TLS
            else:
                self.store.put(key, value)
        self._notify((key,))
        self.on_change()
        return new_version

    def _notify(self, keys: Iterable[tuple[str, str]]) -> None:
        """Tell the key listeners (the controllers' queues) which objects changed."""
        for listener in self.key_listeners:
            for key in keys:
                listener(key)
