# -*- test-case-name: tests.kube.test_faults -*-
"""
One informer per watched kind: list, then watch from the list's
resourceVersion, on a dedicated daemon thread.

The protocol (as client-go's Reflector): list with pagination, replace the
store atomically, watch with bookmarks and a server-side timeout, follow the
resourceVersion through events and bookmarks, relist on 410 Gone, rebuild the
client on 401, back off exponentially with jitter on any other error.  A
client read timeout longer than the bookmark interval notices dead
connections.  Nothing here touches the reactor: changes are reported through
C{on_change}, which the source hands over with C{callFromThread}.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Optional

from twisted.logger import Logger
from urllib3.exceptions import ReadTimeoutError

from ingress.model import Problem
from ingress.model.parse import ParseError, object_ref, parse_object
from ingress.sources.kube.client import APIError, KubeClient

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

LIST_PAGE = 500
WATCH_SECONDS = 300  # server-side; jittered so watches don't all end together
READ_TIMEOUT = 90.0  # > the ~60 s bookmark interval of a watch that has news; a quiet one is watched again
BACKOFF_START, BACKOFF_CAP = 0.5, 30.0
FAST_RETRY_WINDOW = 60.0  # an apiserver outage this young is retried about once a second
FAST_RETRY_SECONDS = (0.5, 1.5)  # jittered, so the informers of many nodes do not come back in step


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


def retry_delay(error: Exception, backoff: float, failing_for: float) -> float:
    """
    How long to wait before the next list or watch after C{error}, the current run of failures
    having lasted C{failing_for} seconds: about a second while the apiserver itself is away
    (no answer, 5xx, 429: a restart or a failover) and the outage is young; otherwise the
    exponential C{backoff} with jitter (a refusal such as 403 or 404 is not fixed by asking
    again soon, and an outage that lasts is not helped by every node asking every second).
    """
    if _apiserver_away(error) and failing_for < FAST_RETRY_WINDOW:
        return random.uniform(*FAST_RETRY_SECONDS)
    return backoff * random.uniform(0.8, 1.2)


def _apiserver_away(error: Exception) -> bool:
    if isinstance(error, APIError):
        return error.status == 429 or error.status >= 500
    return True  # no HTTP answer at all: refused, reset, timed out


def _read_timed_out(error: BaseException) -> bool:
    """Whether C{error} (or what caused it) is a socket read timing out: urllib3 says so with its own class."""
    found: Optional[BaseException] = error
    while found is not None:
        if isinstance(found, (TimeoutError, ReadTimeoutError)):
            return True
        found = found.__cause__ or found.__context__
    return False


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
    ) -> None:
        self.client_factory = client_factory
        self.read_timeout = read_timeout
        self.client = client_factory()
        self.resource = resource
        self.namespace = namespace
        self.store = Store()
        self.on_change = on_change
        self.on_status = on_status
        self.key_listeners: list[Callable[[tuple[str, str]], None]] = []  # called on this thread, per changed key
        self.synced = False
        self.connected = False
        self.relists = 0
        self.watch_restarts = 0
        self.last_error = ""
        self._version = ""  # the last resourceVersion seen; empty means "list first"
        self._watching = False  # a watch was established since the last failure: the next one's backoff starts afresh
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"reflector-{resource.kind}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        """
        List once, then watch; a broken watch is resumed from the last
        resourceVersion seen (after a backoff), and only 410 Gone - or a
        failed list - starts over with a list, as client-go does: a reset
        connection must not cost a relist of 10k objects.
        """
        backoff = BACKOFF_START
        failing_since: Optional[float] = None  # when the current run of failures began
        while not self._stopped.is_set():
            try:
                if not self._version:
                    self._version = self._list()
                    backoff, failing_since = BACKOFF_START, None
                self._watching = False
                self._watch()
            except Gone:
                log.info("{kind}: resourceVersion too old, relisting", kind=self.resource.kind)
                self._version = ""
                continue
            except Exception as error:  # noqa: BLE001 - an informer must never die
                if isinstance(error, APIError) and error.status == 410:  # on the watch request itself
                    log.info("{kind}: resourceVersion too old, relisting", kind=self.resource.kind)
                    self._version = ""
                    continue
                self._failed(error)
                if self._watching or failing_since is None:  # it worked until now: a failure after a working watch is a first failure
                    backoff, failing_since = BACKOFF_START, time.monotonic()
                if self._stopped.wait(retry_delay(error, backoff, time.monotonic() - failing_since)):
                    return
                backoff = min(backoff * 2, BACKOFF_CAP)
                if self._version:
                    self.watch_restarts += 1
                    self.on_status(self)

    def _failed(self, error: Exception) -> None:
        self.last_error = str(error)[:300]
        self.connected = False
        self.on_status(self)  # every failure, also those before a first list (a kind that is not installed)
        if isinstance(error, APIError) and error.status == 401:
            log.warn("{kind}: unauthorized, reloading credentials", kind=self.resource.kind)
            try:
                self.client = self.client_factory()
            except Exception as reload_error:  # noqa: BLE001
                log.error("{kind}: cannot reload credentials: {e}", kind=self.resource.kind, e=str(reload_error))
        else:
            log.warn("{kind}: list/watch failed: {error}", kind=self.resource.kind, error=self.last_error)

    def _set_connected(self, connected: bool) -> None:
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
                if not _read_timed_out(error):
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
