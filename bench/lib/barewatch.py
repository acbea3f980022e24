"""
The floor of a change's way to the proxy: a plain watch on every EndpointSlice, as twingress's
reflector makes it (from a list's resourceVersion, bookmarks on), with nothing behind it.  No proxy
can act on a change before its watch event arrives, so an API write -> its event here is what the
apiserver and etcd take; a figure by traffic less this is what the proxy adds.

It runs in a process of its own (C{python -m bench.lib.barewatch KUBECONFIG NAMESPACE NAME}, which
prints C{watching} and then one line per event for that slice: resourceVersion, arrival on
time.monotonic, type, endpoints): nothing else in that interpreter, so no wait for another thread's
interpreter lock between the event's bytes and its time (the same clock in every process).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

from kubernetes import client as k8s
from kubernetes import config as k8s_config

WATCH_SECONDS = 1800  # one watch outlasts the trials; a server-side end just watches again

Note = Callable[[str, float, str, int], None]  # resourceVersion, arrival (time.monotonic), event type, endpoints


def timed_lines(response: Any) -> Iterator[tuple[float, bytes]]:
    """Each line of a streamed (chunked) response, with the time.monotonic at which its last bytes were read."""
    buffer = b""
    for segment in response.stream(amt=None, decode_content=False):
        at = time.monotonic()  # first thing: the chunk that completes an event is the event's arrival
        *complete, buffer = (buffer + segment).split(b"\n")
        for line in complete:
            if line:
                yield at, line


class BareWatch:
    """The watch itself: each event for NAMESPACE/NAME goes to NOTE; WATCHING is called once the apiserver answered."""

    def __init__(self, kubeconfig: Path, ns: str, name: str, note: Note, watching: Callable[[], None]) -> None:
        self.api = k8s.DiscoveryV1Api(k8s_config.new_client_from_config(str(kubeconfig)))
        self.ns, self.name, self.note, self.watching = ns, name, note, watching
        self.version = self._list_version()

    def _list_version(self) -> str:
        """Where to watch from: a one-item list's resourceVersion (nothing older is wanted)."""
        r = self.api.list_endpoint_slice_for_all_namespaces(limit=1, _preload_content=False)
        body: bytes = r.read()
        r.release_conn()
        return str(json.loads(body)["metadata"]["resourceVersion"])

    def run(self) -> None:
        while True:
            try:
                response = self.api.list_endpoint_slice_for_all_namespaces(
                    watch=True, resource_version=self.version, allow_watch_bookmarks=True, timeout_seconds=WATCH_SECONDS, _preload_content=False)
                self.watching()  # events from here on arrive as they happen
                for at, line in timed_lines(response):
                    self._event(at, json.loads(line))
            except Exception as e:  # noqa: BLE001 - a broken watch costs the floor of the trials it missed, not the run
                print(f"bare watch failed ({e}); watching again from a new list", file=sys.stderr, flush=True)
                time.sleep(0.1)
                self.version = self._list_version()

    def _event(self, at: float, event: dict[str, Any]) -> None:
        obj = event.get("object") or {}
        if event.get("type") == "ERROR":
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
        meta = obj.get("metadata") or {}
        self.version = str(meta.get("resourceVersion") or self.version)
        if meta.get("namespace") == self.ns and meta.get("name") == self.name:
            self.note(self.version, at, str(event.get("type")), len(obj.get("endpoints") or ()))


class Floor:
    """The bare watch's process, and when each event for the slice arrived there, by resourceVersion."""

    def __init__(self, kubeconfig: Path, ns: str, name: str) -> None:
        self.seen: dict[str, tuple[float, str, int]] = {}
        self.changed = threading.Condition()
        self.ready = threading.Event()
        self.process = subprocess.Popen([sys.executable, "-m", "bench.lib.barewatch", str(kubeconfig), ns, name],
                                        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line == "watching\n":
                self.ready.set()
                continue
            version, at, kind, endpoints = line.split()
            with self.changed:
                self.seen[version] = (float(at), kind, int(endpoints))
                self.changed.notify_all()

    def arrival(self, version: str, timeout: float) -> Optional[float]:
        """When the event of VERSION arrived, waiting up to TIMEOUT for it; None if it did not."""
        with self.changed:
            self.changed.wait_for(lambda: version in self.seen, timeout)
            found = self.seen.get(version)
        return found[0] if found else None

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=5.0)
        self.reader.join(timeout=5.0)


def main(argv: list[str]) -> int:
    kubeconfig, ns, name = argv
    BareWatch(Path(kubeconfig), ns, name, lambda version, at, kind, n: print(version, repr(at), kind, n, flush=True),
              lambda: print("watching", flush=True)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
