"""
The operator's first minutes (issue 33, part 3), with the real C{twistd ingress}: the startup
lines say what serves where, worker processes say which worker and show a short command line,
a bad listener is one line, --help is grouped by topic with booleans spelled one way, and the
admin listener lists its endpoints, advertises no server software, has no _created series
unless asked and spells stream keys one way; a bad manifest or directory is logged once, by path.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from ingress import __version__
from ingress.options import GROUPS, HANDLERS, group_of
from ingress.tap import Options
from tests.proxy.streams_support import stream_ingress
from tests.support import ROOT, TWISTD, Manifests, Twingress, free_port
from tests.waiting import eventually

TWISTED_NOISE = re.compile(r"starting on|Starting factory|Stopping factory|Port \S+ Closed|object at 0x|ProxyProtocolWhenAsked|_QuietSite")


def _twistd(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    command = TWISTD + ["--pidfile=", "--logfile=-", "-n", "ingress", *args]
    env = os.environ | {"COLUMNS": "400"}  # --help's lines unwrapped
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def _lines(proxy: Twingress, text: str) -> list[str]:
    return [line for line in proxy.log().splitlines() if text in line]


# -- startup lines


def test_startup_says_in_one_line_per_listener_what_serves_where(manifests: Manifests, twingress: Callable[..., Twingress]) -> None:
    https = free_port()
    proxy = twingress("--https", f"tcp:{https}:interface=127.0.0.1")
    eventually(lambda: bool(_lines(proxy, "admin on ")), "the admin line")
    [http] = _lines(proxy, "HTTP on ")
    assert http.endswith(f"HTTP on 127.0.0.1:{proxy.http_port} (--http tcp:{proxy.http_port}:interface=127.0.0.1)"), http
    [tls] = _lines(proxy, "HTTPS on ")
    assert f"HTTPS on 127.0.0.1:{https} (--https tcp:{https}:interface=127.0.0.1), default certificate: self-signed, made at start" in tls
    [admin] = _lines(proxy, "admin on ")
    assert f"admin on 127.0.0.1:{proxy.admin_port}" in admin and "/healthz /readyz /metrics /debug/routes" in admin
    [first] = _lines(proxy, f"twingress {__version__}: ")
    assert f"the manifests in {manifests.path} (IngressClass twingress), one process" in first
    log = proxy.log()
    assert log.index(f"twingress {__version__}: ") < log.index("HTTP on ") < log.index("admin on ")
    proxy.stop()
    noise = [line for line in proxy.log().splitlines() if TWISTED_NOISE.search(line)]
    assert not noise, noise


def test_startup_with_workers_names_them_and_ps_shows_a_short_command_line(manifests: Manifests, twingress: Callable[..., Twingress]) -> None:
    proxy = twingress("--workers", "2")
    eventually(lambda: len(_lines(proxy, "serving table")) == 2, "both workers serving")
    [first] = _lines(proxy, f"twingress {__version__}: ")
    assert first.endswith("a primary process and 2 worker processes")
    [http] = _lines(proxy, "HTTP on ")
    assert http.endswith(f"HTTP on 127.0.0.1:{proxy.http_port} (--http tcp:{proxy.http_port}:interface=127.0.0.1), served by 2 worker processes")
    for index in (0, 1):
        assert any(f"[worker {index},ingress.process.worker#info] serving table" in line for line in proxy.log().splitlines()), proxy.log()
    children = subprocess.run(["pgrep", "-P", str(proxy.process.pid)], capture_output=True, text=True).stdout.split()
    assert len(children) == 2
    commands = sorted(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1] for pid in children)
    for index, argv in enumerate(commands):
        line = b" ".join(argv).decode()
        assert "{" not in line and len(line) < 200, line
        assert argv[-3:] == [b"ingress.process.worker", str(index).encode(), str(proxy.process.pid).encode()], argv
    proxy.stop()
    noise = [line for line in proxy.log().splitlines() if TWISTED_NOISE.search(line)]
    assert not noise, noise


# -- bad listeners


@pytest.mark.parametrize(
    "args, mentions",
    [
        (["--http", "bogus:123"], "--http 'bogus:123' is not a listener"),
        (["--http", "tcp:notaport"], "--http 'tcp:notaport' is not a listener"),
        (["--admin", "tcp:80:colour=blue"], "--admin 'tcp:80:colour=blue' is not a listener"),
        (["--workers", "2", "--http", "unix:/tmp/twingress-test.sock"], "--http 'unix:/tmp/twingress-test.sock': with --workers above 1 a listener must be tcp:"),
    ],
    ids=["unknown-kind", "port-not-a-number", "unknown-argument", "unix-with-workers"],
)
def test_a_bad_listener_is_one_line_and_exit_1(tmp_path: Path, args: list[str], mentions: str) -> None:
    result = _twistd("--manifests", str(tmp_path), "--https", "", "--admin", f"tcp:{free_port()}:interface=127.0.0.1", *args)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert output.count("\n") == 1 and output.startswith("twistd ingress: ") and mentions in output, output


# -- --help


def test_help_is_grouped_by_topic_with_booleans_spelled_one_way() -> None:
    result = _twistd("--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    titles = [title for title, _ in GROUPS]
    positions = [text.index(f"\n{title}:\n") for title in titles]
    assert positions == sorted(positions), "the topics in their order"
    declared = [p[0] for p in Options.optParameters] + list(HANDLERS)
    assert [name for name in declared if group_of(name) is None] == [], "every option has a topic"
    assert "\nOther:\n" not in text
    for title, group in GROUPS:  # each option under its own topic's heading
        section = text.split(f"\n{title}:\n")[1].split("\n\n")[0]
        assert all(f"--{p[0]}" in section for p in group), (title, section)
    assert not getattr(Options, "optFlags", []), "a boolean is a parameter taking true|false, not a flag"
    booleans = [p for p in Options.optParameters if "true|false" in p[3]]
    assert {p[0] for p in booleans} >= {"http2", "h2c", "nginx-annotations", "nginx-metrics", "metrics-created", "generate-ingresses", "update-status"}
    assert all(p[2] in ("true", "false") for p in booleans), booleans
    assert "--http2-cleartext" in text and "old spelling of --h2c true" in text


def test_the_old_h2c_flag_is_still_accepted(tmp_path: Path) -> None:
    for args, expected in ((["--http2-cleartext"], "true"), (["--h2c", "true"], "true"), ([], "false")):
        options = Options()
        options.parseOptions(["--manifests", str(tmp_path), *args])
        assert options["h2c"] == expected and options["http2-settings"].cleartext is (expected == "true")


# -- the admin listener


def _admin(proxy: Twingress, path: str) -> tuple[int, dict[str, str], str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{proxy.admin_port}{path}", timeout=5) as response:
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read().decode()


def test_admin_root_lists_the_endpoints_and_no_answer_names_the_server(twingress: Callable[..., Twingress]) -> None:
    proxy = twingress()
    status, headers, body = _admin(proxy, "/")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    for path in ("/healthz", "/readyz", "/metrics", "/debug/routes"):
        assert re.search(rf"^{re.escape(path)} ", body, re.MULTILINE), body
        assert _admin(proxy, path)[0] == 200
    for path in ("/", "/healthz", "/readyz", "/metrics", "/debug/routes", "/nothing-here"):
        assert "server" not in _admin(proxy, path)[1], path
    assert _admin(proxy, "/nothing-here")[0] == 404


def test_no_created_series_unless_asked(twingress: Callable[..., Twingress]) -> None:
    for args, wanted in (((), False), (("--metrics-created", "true"), True), (("--workers", "2"), False)):
        proxy = twingress(*args)
        text = _admin(proxy, "/metrics")[2]
        created = [line for line in text.splitlines() if "_created" in line.split("{")[0].split(" ")[0]]
        assert bool(created) is wanted, (args, created[:3])
        assert "twingress_table_build_seconds_count" in text
        proxy.stop()


def test_debug_routes_spells_stream_keys_one_way(manifests: Manifests, twingress: Callable[..., Twingress]) -> None:
    port, taken = free_port(), free_port()
    manifests.write("db.yaml", *manifests.service("db", [("127.0.0.1", 5432)]))
    manifests.write("streams.yaml", stream_ingress("pg", port), stream_ingress("busy", taken))
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", taken))
        holder.listen(1)
        proxy = twingress()
        eventually(lambda: bool(proxy.routes()["streamListeners"]["failed"]), "the busy port reported")
        routes = proxy.routes()
    keys = set(routes["streams"]) | set(routes["streamListeners"]["listening"]) | set(routes["streamListeners"]["failed"])
    assert keys == {f"TCP/{port}", f"TCP/{taken}"}, keys
    assert any(f"stream listener TCP/{port} (default/pg) open on 0.0.0.0:{port}, to default/db:80" in line for line in proxy.log().splitlines()), proxy.log()


# -- the manifests directory's errors


def test_a_bad_manifest_is_logged_once_by_its_path(manifests: Manifests, twingress: Callable[..., Twingress]) -> None:
    proxy = twingress()
    generation = proxy.generation()
    (manifests.path / "broken.yaml").write_text("kind: Ingress\nmetadata: [unclosed\n")
    proxy.wait_generation_above(generation)
    time.sleep(1.0)  # not a wait: five more polls must pass without a second line
    mentions = _lines(proxy, "broken.yaml")
    assert len(mentions) == 1, mentions
    assert f'"{manifests.path / "broken.yaml"}", line' in mentions[0], mentions[0]
    problem = [p for p in proxy.routes()["problems"] if p["object"] == "File/broken.yaml"]
    assert problem and str(manifests.path / "broken.yaml") in problem[0]["message"]


def test_an_unreadable_manifests_directory_is_logged_once(tmp_path: Path) -> None:
    directory = tmp_path / "manifests"
    directory.mkdir()
    proxy = Twingress(directory)
    try:
        shutil.rmtree(directory)
        eventually(lambda: bool(_lines(proxy, "cannot read the manifests directory")), "the error logged")
        time.sleep(1.0)  # not a wait: five more polls must pass without a second line
        assert len(_lines(proxy, "cannot read the manifests directory")) == 1, proxy.log()[-2000:]
        directory.mkdir()
        eventually(lambda: bool(_lines(proxy, "is readable again")), "the recovery logged")
    finally:
        proxy.stop()
