# -*- test-case-name: tests.proxy.test_logs -*-
"""
The process log in the format a log pipeline wants: twistd's own text, or
JSON with one object per line.

twistd picks its observer when it starts logging, after the plugin has made
its service: a C{--logger} factory given to twistd wins, then an
L{ILogObserver} component on the Application, then its own text observer
(C{--logfile}, C{--syslog}).  The plugin's C{--log-format json} uses the
middle way: L{LoggingRoot}, the top service, sets the component on the
Application that twistd makes it a child of, so everything logged (twistd's
own lines too, and what was logged before logging began) is JSON.
C{twistd --logger ingress.observe.logs.json_observer} does the same from twistd's
side of the command line.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from collections.abc import Mapping
from typing import IO, Any, Optional

from twisted.application.service import MultiService
from twisted.logger import FileLogObserver, FilteringLogObserver, ILogFilterPredicate, ILogObserver, LegacyLogObserverWrapper, LogEvent, PredicateResult, formatEvent
from twisted.python.components import Componentized
from twisted.python.failure import Failure
from zope.interface import implementer

LOG_FORMATS = ("text", "json")
# Keys of legacy (twisted.python.log) events that only repeat what the formatted message says.
_LEGACY_KEYS = frozenset({"message", "system", "isError", "format", "time", "why", "failure"})
_SCALARS = (str, int, float, bool, type(None))
# Twisted's own lines about each port and factory: "ProxyProtocolWhenAsked starting on 21080",
# "(TCP Port 21080 Closed)", "Starting factory <twisted.web.server.Site object at 0x7f...>".
# They name classes and memory addresses; L{ingress.observe.startup} says the same in our terms.
_PORT_LINE = re.compile(r"^(\S+ starting on \S+|\((TCP|UDP|UNIX) Port \S+ Closed\)|(Starting|Stopping) protocol .+)$")
_FACTORY_FORMATS = frozenset({"Starting factory {factory!r}", "Stopping factory {factory!r}"})
_DROP: PredicateResult = PredicateResult.no
_PASS: PredicateResult = PredicateResult.maybe


def rfc3339(seconds: float) -> str:
    """C{2026-11-22T04:47:06.123456Z}: UTC, microseconds, the form log stores parse without hints."""
    whole = int(seconds)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((seconds - whole) * 1e6):06d}Z"


def json_safe(value: Any) -> Any:
    """C{value} if JSON can hold it as it is, else its repr (a log line must never fail to write)."""
    if isinstance(value, _SCALARS):
        return value
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def event_as_json(event: LogEvent) -> str:
    """One log event as one line of JSON: timestamp, level, system, message, then its own fields."""
    level = event.get("log_level")
    system = event.get("log_system")
    if not system or system == "-":
        system = event.get("log_namespace", "-")
    record: dict[str, Any] = {
        "timestamp": rfc3339(event.get("log_time") or time.time()),
        "level": level.name if level is not None else "info",
        "system": system,
        "message": formatEvent(event),
    }
    failure = event.get("log_failure")
    if isinstance(failure, Failure):
        record["traceback"] = failure.getTraceback()
    for key, value in event.items():
        if key.startswith("log_") or key in record or key in _LEGACY_KEYS:
            continue
        record[key] = json_safe(value)
    return json.dumps(record, ensure_ascii=False) + "\n"


def json_observer(out: Optional[IO[str]] = None) -> FileLogObserver:
    """A JSON-lines observer on C{out} (stdout by default); usable as C{twistd --logger ingress.observe.logs.json_observer}."""
    return FileLogObserver(out if out is not None else sys.stdout, event_as_json)


@implementer(ILogFilterPredicate)
class _TwistedNoise:
    """No for Twisted's lines about each port and factory (L{_PORT_LINE}), maybe for the rest."""

    def __call__(self, event: LogEvent) -> PredicateResult:
        if event.get("log_format") in _FACTORY_FORMATS:
            return _DROP
        message = event.get("message")
        if event.get("log_namespace") == "log_legacy" and message and _PORT_LINE.match(" ".join(map(str, message))):
            return _DROP
        return _PASS


def quiet(observer: ILogObserver) -> ILogObserver:
    """C{observer} without Twisted's lines about each port and factory."""
    return FilteringLogObserver(observer, [_TwistedNoise()])


def twistd_text_observer(twistd_options: Mapping[str, Any]) -> ILogObserver:
    """
    The observer twistd makes from its own options (C{--logfile}, C{--syslog}) when the
    Application has none: twistd offers no hook to filter its own, so the plugin makes it the
    way twistd does, to wrap it in L{quiet}.
    """
    from twisted.scripts._twistd_unix import UnixAppLogger

    observer = UnixAppLogger(twistd_options)._getLogObserver()
    if ILogObserver.providedBy(observer):
        return observer
    return LegacyLogObserverWrapper(observer)  # --syslog's observer takes the old event dicts


class LoggingRoot(MultiService):
    """
    The top service of the plugin: when twistd adds it to its Application,
    it hands the Application the log observer of C{--log-format}, without
    Twisted's lines about each port (L{quiet}).  For "text" that is twistd's own
    observer, made from C{twistd_options} (twistd's command line) as twistd makes it.

    It also starts the same way under both runners: twistd runs every service's
    privileged phase (the listeners open there) before any C{startService}, while
    C{twist} calls only C{startService}, so a listener that could not listen stopped
    the start after the table-build thread had started, and that thread kept the
    process up, printing its one line and never exiting.
    """

    def __init__(self, log_format: str = "text", twistd_options: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        self.log_format = log_format
        self.twistd_options = twistd_options
        self._privileged = False

    def privilegedStartService(self) -> None:
        self._privileged = True
        super().privilegedStartService()

    def startService(self) -> None:
        """
        Start the children; one that raises stops those already started before the error goes
        on: a started table-build thread (not a daemon) would otherwise keep a process whose
        start failed alive, its listeners open and nothing served.
        """
        if not self._privileged:  # twist: the listeners first, as twistd does
            self.privilegedStartService()
        try:
            super().startService()
        except BaseException:
            for service in reversed(list(self)):
                if service.running:
                    with contextlib.suppress(Exception):  # the start's error is the one to report
                        service.stopService()
            self.running = False
            raise

    def setServiceParent(self, parent: Any) -> Any:
        if isinstance(parent, Componentized):
            if self.log_format == "json":
                parent.setComponent(ILogObserver, quiet(json_observer()))
            elif self.twistd_options is not None and "logfile" in self.twistd_options and not self.twistd_options.get("logger"):
                # twistd's options: under twist (whose options have no logfile) twist's observer stays, and no twistd.log is made
                parent.setComponent(ILogObserver, quiet(twistd_text_observer(self.twistd_options)))
        return super().setServiceParent(parent)


@implementer(ILogObserver)
class _InWorker:
    """
    An observer for worker C{index}: each of its lines says which worker wrote it, in the system
    of a text line (C{[worker 1,ingress.process.worker#info]}) or a C{worker} key in JSON.
    """

    def __init__(self, observer: ILogObserver, index: int, log_format: str) -> None:
        self.observer = observer
        self.index = index
        self.json = log_format == "json"

    def __call__(self, event: LogEvent) -> None:
        if self.json:
            self.observer({**event, "worker": self.index})
            return
        system = event.get("log_system")
        if system is None:
            level = event.get("log_level")
            system = f"{event.get('log_namespace', '-')}#{level.name if level is not None else 'info'}"
        self.observer({**event, "log_system": f"worker {self.index}" if system == "-" else f"worker {self.index},{system}"})


def in_worker(observer: ILogObserver, index: int, log_format: str) -> ILogObserver:
    """C{observer} for worker C{index} (L{_InWorker}), without Twisted's lines about each port (L{quiet})."""
    return quiet(_InWorker(observer, index, log_format))
