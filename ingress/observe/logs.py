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

import json
import sys
import time
from typing import IO, Any, Optional

from twisted.application.service import MultiService
from twisted.logger import FileLogObserver, ILogObserver, LogEvent, formatEvent
from twisted.python.components import Componentized
from twisted.python.failure import Failure

LOG_FORMATS = ("text", "json")
# Keys of legacy (twisted.python.log) events that only repeat what the formatted message says.
_LEGACY_KEYS = frozenset({"message", "system", "isError", "format", "time", "why", "failure"})
_SCALARS = (str, int, float, bool, type(None))


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


class LoggingRoot(MultiService):
    """
    The top service of the plugin: when twistd adds it to its Application,
    it hands the Application the log observer of C{--log-format} (none for
    "text": twistd's own observer and options then apply unchanged).
    """

    def __init__(self, log_format: str = "text") -> None:
        super().__init__()
        self.log_format = log_format

    def setServiceParent(self, parent: Any) -> Any:
        if self.log_format == "json" and isinstance(parent, Componentized):
            parent.setComponent(ILogObserver, json_observer())
        return super().setServiceParent(parent)
