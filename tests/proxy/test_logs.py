"""
Log output of a real C{twistd -n ingress}: the process log as text and as
JSON lines, and the access log (text and JSON, stdout and a file reopened on
SIGUSR1) for a proxied request, a 404 without a route and a 502 from a dead
upstream; a client that gives up before its answer (nginx's 499), over HTTP/1.1
and HTTP/2.
"""

from __future__ import annotations

import datetime
import http.client
import json
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from h2.errors import ErrorCodes
from twisted.python import usage

from ingress.tap import Options
from tests.proxy.h2client import H2Client
from tests.proxy.test_drain import starter
from tests.support import EchoBackend, Manifests, Twingress, accept_in_threads, refusing_address
from tests.waiting import eventually

PROCESS_KEYS = {"timestamp", "level", "system", "message"}
ACCESS_KEYS = {
    "time", "client", "method", "path", "version", "status", "bytes", "referer", "user_agent",
    "host", "route", "upstream", "duration", "upstream_duration", "request_id",
}
TEXT_LINE = re.compile(
    r'^(?P<client>\S+) - - \[(?P<time>\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000)\] "(?P<request>[^"]*)" '
    r'(?P<status>\d{3}) (?P<bytes>\d+) "(?P<referer>[^"]*)" "(?P<user_agent>[^"]*)" '
    r"host=(?P<host>\S+) route=(?P<route>\S+) upstream=(?P<upstream>\S+) "
    r"duration=(?P<duration>\S+) upstream_duration=(?P<upstream_duration>\S+) request_id=(?P<request_id>\S+)$"
)
TWISTD_TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} \[[^\]]+\] ")


@pytest.fixture(scope="module")
def backend() -> Iterator[EchoBackend]:
    echo = EchoBackend("pod-a")
    yield echo
    echo.stop()


class SilentBackend:
    """Accepts, reads requests and never answers; C{accepted} is set at each new connection."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()
        self.accepted = threading.Event()
        accept_in_threads(self.listener, self._hold)

    def _hold(self, connection: socket.socket) -> None:
        self.accepted.set()
        with connection:
            try:
                while connection.recv(65536):
                    pass
            except ConnectionResetError:
                pass  # twingress aborted the exchange its client gave up on

    def stop(self) -> None:
        self.listener.close()


@pytest.fixture(scope="module")
def silent() -> Iterator[SilentBackend]:
    backend = SilentBackend()
    yield backend
    backend.stop()


@pytest.fixture
def routes(manifests: Manifests, backend: EchoBackend, silent: SilentBackend) -> Manifests:
    """echo.test to the echo backend; dead.test to a port nobody listens on; silent.test to one that never answers."""
    manifests.route("echo", "echo.test", [backend.address])
    manifests.route("dead", "dead.test", [refusing_address()])
    manifests.route("silent", "silent.test", [silent.address])
    return manifests


@pytest.fixture
def start(routes: Manifests) -> Iterator[Callable[..., Twingress]]:
    """Starts twingress on those routes with the given options."""
    yield from starter(routes.path)


def _get(port: int, host: str, path: str, **headers: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", path, headers={"Host": host, **headers})
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, body


def _wait_for_line(read: Callable[[], str], match: Callable[[str], bool], timeout: float = 5.0) -> str:
    """The first line of C{read()} that C{match}es, once there is one; on timeout the log's tail says what there was."""
    line: str = eventually(
        lambda: next((line for line in read().splitlines() if match(line)), None), "a matching log line", timeout=timeout, context=lambda: read()[-3000:]
    )
    return line


def _requests(process: Twingress) -> dict[str, tuple[int, bytes]]:
    """A proxied 200 (with Referer and User-Agent), a 404 without a route and a 502 from a dead upstream."""
    return {
        "ok": _get(process.http_port, "echo.test", "/hello?x=1", Referer="http://ref.test/a", **{"User-Agent": 'probe "1"'}),
        "missing": _get(process.http_port, "nobody.test", "/nothing"),
        "dead": _get(process.http_port, "dead.test", "/down"),
    }


def _text_entries(read: Callable[[], str]) -> dict[str, dict[str, str]]:
    found = {}
    for key, path in (("ok", "/hello?x=1"), ("missing", "/nothing"), ("dead", "/down")):
        line = _wait_for_line(read, lambda line, path=path: f'"GET {path} HTTP/1.1"' in line)
        match = TEXT_LINE.match(line)
        assert match, f"not the documented format: {line!r}"
        found[key] = match.groupdict()
    return found


def test_text_access_log_and_text_process_log(start: Callable[..., Twingress], backend: EchoBackend) -> None:
    process = start()
    answers = _requests(process)
    assert [answers[k][0] for k in ("ok", "missing", "dead")] == [200, 404, 502]
    entries = _text_entries(process.log)
    ok = entries["ok"]
    assert ok["client"] == "127.0.0.1"
    datetime.datetime.strptime(ok["time"], "%d/%b/%Y:%H:%M:%S %z")
    assert ok["request"] == "GET /hello?x=1 HTTP/1.1"
    assert (ok["status"], int(ok["bytes"])) == ("200", len(answers["ok"][1]))
    assert (ok["referer"], ok["user_agent"]) == ("http://ref.test/a", r"probe \x221\x22")
    assert (ok["host"], ok["route"]) == ("echo.test", "default/echo")
    assert ok["upstream"] == f"{backend.host}:{backend.port}"
    assert 0 <= float(ok["upstream_duration"]) <= float(ok["duration"])

    missing = entries["missing"]
    assert (missing["status"], missing["host"], missing["route"], missing["upstream"]) == ("404", "nobody.test", "-", "-")
    assert int(missing["bytes"]) == len(answers["missing"][1])
    assert missing["upstream_duration"] == "-" and float(missing["duration"]) >= 0

    dead = entries["dead"]
    assert (dead["status"], dead["route"]) == ("502", "default/dead")
    assert re.fullmatch(r"127\.0\.0\.1:\d+", dead["upstream"])
    assert (dead["referer"], dead["user_agent"]) == ("-", "-")  # http.client sends neither

    process_lines = [line for line in process.log().splitlines() if line and not TEXT_LINE.match(line)]
    assert process_lines and all(TWISTD_TEXT_LINE.match(line) for line in process_lines), process_lines[:5]
    assert any("routing table 1 live" in line for line in process_lines)


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_json_process_log_and_json_access_log(start: Callable[..., Twingress], backend: EchoBackend) -> None:
    process = start("--log-format", "json", "--access-log-format", "json")
    answers = _requests(process)
    _wait_for_line(process.log, lambda line: '"/down"' in line)
    records = _json_lines(process.log())  # every line is one JSON object
    logged = [r for r in records if "level" in r]
    access = {r["path"]: r for r in records if "level" not in r}  # access lines have no level
    for record in logged:
        assert PROCESS_KEYS <= record.keys(), record
        assert record["timestamp"].endswith("Z")
        datetime.datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00"))
        assert record["level"] in ("debug", "info", "warn", "error", "critical")
    assert any(r["message"].startswith("twistd ") and "starting up" in r["message"] for r in logged), "twistd's own lines"
    built = next(r for r in logged if r["system"] == "ingress.process.builder" and "live" in r["message"])
    assert built["generation"] >= 1, "the event's own fields are kept"

    ok = access["/hello?x=1"]
    assert set(ok) == ACCESS_KEYS
    assert (ok["client"], ok["method"], ok["version"], ok["status"]) == ("127.0.0.1", "GET", "HTTP/1.1", 200)
    assert ok["bytes"] == len(answers["ok"][1])
    assert (ok["referer"], ok["user_agent"], ok["host"]) == ("http://ref.test/a", 'probe "1"', "echo.test")
    assert (ok["route"], ok["upstream"]) == ("default/echo", f"{backend.host}:{backend.port}")
    assert 0 <= ok["upstream_duration"] <= ok["duration"]
    datetime.datetime.fromisoformat(ok["time"].replace("Z", "+00:00"))
    missing = access["/nothing"]
    assert (missing["status"], missing["route"], missing["upstream"], missing["upstream_duration"]) == (404, None, None, None)
    dead = access["/down"]
    assert (dead["status"], dead["route"]) == (502, "default/dead") and dead["upstream"].startswith("127.0.0.1:")


def test_access_log_file_is_reopened_on_sigusr1(start: Callable[..., Twingress], tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    process = start("--access-log", str(path))
    assert _get(process.http_port, "echo.test", "/before")[0] == 200
    _wait_for_line(lambda: _read(path), lambda line: "/before" in line)
    path.rename(tmp_path / "access.log.1")  # what logrotate does, then its postrotate sends SIGUSR1
    assert _get(process.http_port, "echo.test", "/moved")[0] == 200
    process.process.send_signal(signal.SIGUSR1)
    _wait_for_line(process.log, lambda line: "access log reopened" in line)
    assert _get(process.http_port, "echo.test", "/after")[0] == 200
    _wait_for_line(lambda: _read(path), lambda line: "/after" in line)
    rotated = _read(tmp_path / "access.log.1")
    assert "/before" in rotated and "/moved" in rotated and "/after" not in rotated
    assert "/hello" not in process.log() and '"GET /before' not in process.log(), "not on stdout too"


def test_access_log_off(start: Callable[..., Twingress]) -> None:
    process = start("--access-log", "off")
    assert _get(process.http_port, "echo.test", "/quiet")[0] == 200
    time.sleep(1.0)  # not a wait: longer than the access log's flush interval, in which nothing must be written
    assert "/quiet" not in process.log()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--log-format", "xml"], "--log-format must be one of: text, json"),
        (["--access-log-format", "csv"], "--access-log-format must be one of: text, json"),
        (["--access-log", "/nonexistent/dir/access.log"], "No such file or directory"),
        (["--access-log", ""], "give -, a writable path or off"),
    ],
)
def test_bad_log_options_are_refused(tmp_path: Path, args: list[str], message: str) -> None:
    with pytest.raises(usage.UsageError, match=message):
        Options().parseOptions(["--manifests", str(tmp_path), *args])


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_a_client_that_gives_up_before_its_answer_is_logged_499(start: Callable[..., Twingress], silent: SilentBackend) -> None:
    """
    nginx's 499 ("client closed request", ngx_http_request.h; ingress-nginx's log format shows it
    as $status): the request reached an upstream that has not answered when the client closes.
    """
    process = start()
    silent.accepted.clear()
    with socket.create_connection(("127.0.0.1", process.http_port), timeout=5) as client:
        client.sendall(b"GET /wait HTTP/1.1\r\nHost: silent.test\r\nUser-Agent: impatient\r\n\r\n")
        assert silent.accepted.wait(5), "the request never reached the upstream"
    line = _wait_for_line(process.log, lambda line: '"GET /wait HTTP/1.1"' in line)
    entry = TEXT_LINE.match(line)
    assert entry, line
    assert (entry["status"], entry["bytes"], entry["route"], entry["user_agent"]) == ("499", "0", "default/silent", "impatient")
    assert entry["upstream"] == f"{silent.address[0]}:{silent.address[1]}"
    assert process.metric("twingress_http_requests_total", route="default/silent", status="499") == 1


def test_an_http2_stream_the_client_resets_before_its_answer_is_logged_499(start: Callable[..., Twingress], silent: SilentBackend) -> None:
    process = start("--http2-cleartext")
    silent.accepted.clear()
    client = H2Client(process.http_port, tls=False)
    try:
        stream = client.request("/wait-h2", authority="silent.test")
        assert silent.accepted.wait(5), "the request never reached the upstream"
        client.conn.reset_stream(stream, ErrorCodes.CANCEL)
        client.flush()
        line = _wait_for_line(process.log, lambda line: '"GET /wait-h2 HTTP/2.0"' in line)
    finally:
        client.close()
    entry = TEXT_LINE.match(line)
    assert entry, line
    assert (entry["status"], entry["route"]) == ("499", "default/silent")
    assert process.metric("twingress_http_requests_total", route="default/silent", status="499", protocol="h2") == 1
