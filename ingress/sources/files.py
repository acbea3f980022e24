# -*- test-case-name: tests.proxy.test_reload -*-
"""
The manifests-directory source: the embedded default, demos and data-plane tests.

Every C{*.yaml}, C{*.yml} and C{*.json} file in the directory is read
(multi-document YAML; a JSON file may hold one object, a list, or a v1 List).
The directory is polled: a change of any file's name, size or modification
time submits a new snapshot.  A file that fails to parse is reported and its
last good content stays in use, so one bad edit never empties the table.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

import yaml
from twisted.application.service import Service
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from ingress.model import ClusterState, ObjectRef, Problem
from ingress.model.parse import LastGood, collect, parse_objects
from ingress.observe.metrics import Metrics
from ingress.process.builder import TableBuilder
from ingress.process.reactor import IProcessReactor

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

SUFFIXES = (".yaml", ".yml", ".json")
Fingerprint = tuple[tuple[str, int, int, int, int], ...]


def scan(directory: str) -> Fingerprint:
    """Name, size, mtime, inode and ctime of every manifest file: cheap enough to poll every second."""
    entries = []
    with os.scandir(directory) as it:
        for entry in it:
            if entry.name.endswith(SUFFIXES) and not entry.name.startswith(".") and entry.is_file():
                stat = entry.stat()
                # inode and ctime too: a file replaced by one of equal size and mtime (cp -p, rsync) is new
                entries.append((entry.name, stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns))
    return tuple(sorted(entries))


class _Named(io.StringIO):
    """A file's text under its path: yaml's error marks name the stream they read ("<byte string>" for bytes)."""

    def __init__(self, text: str, name: str) -> None:
        super().__init__(text)
        self.name = name


def load_documents(path: str) -> list[Mapping[str, Any]]:
    """The API objects in one file; raises ValueError (with the parser's message) when unreadable."""
    with open(path, "rb") as f:
        text = f.read()
    try:
        if path.endswith(".json"):
            loaded: Iterable[Any] = [json.loads(text)]
        else:
            loaded = list(yaml.safe_load_all(_Named(text.decode(), path)))
    except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError) as error:
        message = " ".join(str(error).split())
        raise ValueError(message if path in message else f"{path}: {message}") from None
    objects: list[Mapping[str, Any]] = []
    for document in loaded:
        if document is None:
            continue
        if isinstance(document, list):
            objects.extend(document)
        elif isinstance(document, dict) and document.get("kind", "").endswith("List") and "items" in document:
            objects.extend(document["items"])
        elif isinstance(document, dict):
            objects.append(document)
        else:
            raise ValueError(f"a document is a {type(document).__name__}, not an object")
    if not all(isinstance(o, dict) for o in objects):
        raise ValueError("a list item is not an object")
    return objects


def _naming(error: Exception, directory: str, name: str) -> str:
    """The error's message, naming the file's path (an OSError's says only what went wrong)."""
    if isinstance(error, OSError):
        return f"{os.path.join(directory, name)}: {error.strerror or error}"
    return str(error)


class ManifestsSource(Service):
    """Polls a directory and submits a snapshot to the builder whenever it changes."""

    def __init__(
        self, directory: str, builder: TableBuilder, metrics: Metrics, reactor: IProcessReactor, interval: float = 1.0,
        also: str = "", observe: Optional[Callable[[ClusterState], None]] = None,
    ) -> None:
        self.directory = directory
        self.also = also  # a second directory read with it (the ACME issuer's manifests), its files by absolute path
        self.observe = observe  # called with each state read (build thread): the ACME issuer's view of the Ingresses
        self.builder = builder
        self.metrics = metrics
        self.reactor = reactor
        self.interval = interval
        self._fingerprint: Optional[Fingerprint] = None
        self._good: dict[str, list[Mapping[str, Any]]] = {}
        self._invalid: dict[str, str] = {}  # file name -> its error, as last counted
        self._unreadable: Optional[str] = None  # the directory's error, as last logged
        self._last_good: LastGood = {}  # per object: its last valid version (kept while an edit is invalid)
        self._loop: Optional[LoopingCall] = None

    def startService(self) -> None:
        super().startService()
        self._loop = LoopingCall(self.poll)
        self._loop.clock = self.reactor
        self._loop.start(self.interval, now=True)

    def stopService(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        super().stopService()

    def poll(self) -> None:
        try:
            fingerprint = scan(self.directory)
            if self.also:
                fingerprint += tuple((os.path.join(self.also, entry[0]), *entry[1:]) for entry in scan(self.also))
        except OSError as error:
            if self._unreadable != str(error):  # once, not at every poll; again when it changes
                self._unreadable = str(error)
                self.metrics.source_errors.labels("manifests").inc()
                log.error("cannot read the manifests directory {dir}: {error}; the last good table stays live", dir=self.directory, error=error.strerror or str(error))
            return
        if self._unreadable is not None:
            log.info("the manifests directory {dir} is readable again", dir=self.directory)
            self._unreadable = None
        if fingerprint != self._fingerprint:
            self._fingerprint = fingerprint
            names = [entry[0] for entry in fingerprint]
            self.builder.submit(lambda: self.snapshot(names))

    def snapshot(self, names: list[str]) -> ClusterState:
        """Read every file (build thread); bad files keep their last good objects."""
        objects: list[Mapping[str, Any]] = []
        problems: list[Problem] = []
        good: dict[str, list[Mapping[str, Any]]] = {}
        invalid: dict[str, str] = {}
        for name in names:
            try:
                good[name] = load_documents(os.path.join(self.directory, name))
            except (OSError, ValueError) as error:
                invalid[name] = str(error)
                if self._invalid.get(name) != str(error):  # once per change, not on every snapshot
                    self.reactor.callFromThread(self.metrics.source_errors.labels("manifests").inc)
                kept = "; its last good content stays in use" if name in self._good else ""
                # Logged once, by the builder, when the problem appears ("skipped File/NAME: InvalidManifest: ..." when nothing of it is kept).
                problems.append(Problem(ObjectRef("File", "", name), "InvalidManifest", _naming(error, self.directory, name) + kept, left_out=not kept))
                if name in self._good:
                    good[name] = self._good[name]
            objects.extend(good.get(name, ()))
        self._good, self._invalid = good, invalid
        outcomes, self._last_good = parse_objects(objects, self._last_good)
        state = collect(outcomes)
        if problems:
            state = dataclasses.replace(state, problems=tuple(problems) + state.problems)
        if self.observe is not None:
            self.observe(state)
        return state
