"""
The examples as `make run` runs them (examples/*/run.sh, issue 33): each honours HTTP, HTTPS and
ADMIN and prints the URLs it serves; a backend port that is taken stops the example with one line
before twingress starts; the stream example carries TCP and UDP; and `make run` installs only
what the demo needs.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT, free_port

EXAMPLES = ("quickstart", "nginx-migration", "gateway", "streams")


class Example:
    """examples/NAME/run.sh on free ports, its stdout collected."""

    def __init__(self, name: str, tmp_path: Path, https: bool = True, args: tuple[str, ...] = ()) -> None:
        self.http, self.https, self.admin = free_port(), free_port(), free_port()
        self.output = tmp_path / f"{name}.out"
        env = os.environ | {
            "HTTP": f"tcp:{self.http}:interface=127.0.0.1",
            "HTTPS": f"tcp:{self.https}:interface=127.0.0.1" if https else "",
            "ADMIN": f"tcp:{self.admin}:interface=127.0.0.1",
            "PYTHON": sys.executable,
        }
        with open(self.output, "wb") as out:
            self.process = subprocess.Popen([str(ROOT / "examples" / name / "run.sh"), *args], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.text()
            try:
                if self.get(self.admin, "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"not ready:\n{self.text()}")

    @staticmethod
    def get(port: int, path: str = "/", host: str = "127.0.0.1") -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("GET", path, headers={"Host": host})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(45)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[type[Example]]:
    started: list[Example] = []

    class Started(Example):
        def __init__(self, name: str, https: bool = True, args: tuple[str, ...] = ()) -> None:
            super().__init__(name, tmp_path, https, args)
            started.append(self)

    yield Started
    for example in started:
        example.stop()


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_example_serves_where_http_https_and_admin_say_and_prints_the_urls(run: type[Example], name: str) -> None:
    example = run(name)
    example.ready()
    text = example.text()
    assert f"HTTP   http://127.0.0.1:{example.http}/" in text, text
    assert f"HTTPS  https://127.0.0.1:{example.https}/" in text, text
    assert f"admin  http://127.0.0.1:{example.admin}/" in text, text
    assert example.get(example.admin, "/")[0] == 200
    with socket.create_connection(("127.0.0.1", example.https), timeout=5):
        pass  # HTTPS listens where HTTPS says
    if name == "quickstart":
        status, body = example.get(example.http, "/", host="echo.example.com")
        assert status == 200 and json.loads(body)["name"] in ("echo-pod-a", "echo-pod-b")
        assert f"curl -H 'Host: echo.example.com' http://127.0.0.1:{example.http}/" in text


def test_an_empty_https_turns_it_off(run: type[Example]) -> None:
    example = run("quickstart", https=False)
    example.ready()
    assert "HTTPS  " not in example.text() and "HTTPS on" not in example.text()


def test_a_taken_backend_port_stops_the_example_with_one_line(run: type[Example]) -> None:
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", 8081))  # echo-pod-a's, in examples/quickstart/services.yaml
        taken.listen(1)
        example = run("quickstart")
        assert example.process.wait(30) == 1
    text = example.text()
    assert text.strip().splitlines() == [
        "quickstart: the backend echo-pod-a cannot listen on tcp:8081:interface=127.0.0.1: [Errno 98] Address already in use (is another example running?)"
    ], text
    with pytest.raises(OSError):
        Example.get(example.admin, "/healthz")  # twingress never started: no proxy to nowhere


def test_the_stream_example_carries_tcp_and_udp(run: type[Example]) -> None:
    example = run("streams", args=("--shutdown-delay", "0", "--drain-timeout", "1"))  # run.sh passes them on: the UDP session would hold the drain 30 s
    example.ready()
    text = example.text()
    assert "TCP    127.0.0.1:9700" in text and "UDP    127.0.0.1:9753" in text, text
    with socket.create_connection(("127.0.0.1", 9700), timeout=10) as tcp:
        tcp.sendall(b"hello\n")
        answer = tcp.recv(1024)
    assert re.fullmatch(rb"tcp-pod-[ab]: hello\n", answer), answer
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.settimeout(10)
        udp.sendto(b"hello", ("127.0.0.1", 9753))
        assert udp.recvfrom(1024)[0] == b"udp-pod: hello"
    routes = json.loads(Example.get(example.admin, "/debug/routes")[1])
    assert {"TCP/9700", "UDP/9753"} <= set(routes["streams"])


def _make_run_plan(tmp_path: Path, *variables: str, touch: tuple[str, ...] = ()) -> list[str]:
    """
    What `make run` would do in a fresh clone (make -n: printed, not run), as a user types it; the
    venv's files in C{touch} (e.g. the compiled build's stamp) made first, newer than every source.
    """
    venv = tmp_path / "venv"
    for name in touch:
        (venv / name).parent.mkdir(parents=True, exist_ok=True)
        (venv / name).touch()
    outside_make = {name: value for name, value in os.environ.items() if name not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # not as make test's sub-make
    plan = subprocess.run(
        ["make", "--no-print-directory", "-n", "run", f"VENV={venv}", *variables], cwd=ROOT, capture_output=True, text=True, check=True, env=outside_make
    ).stdout
    lines = plan.strip().splitlines()
    if not touch:
        assert any(line.endswith("pip install -q -e .") for line in lines), plan
        assert "installing twingress and its dependencies" in plan, plan
    assert lines[-1] == "examples/quickstart/run.sh"
    return lines


def test_a_first_make_run_serves_at_once_and_compiles_in_the_background(tmp_path: Path) -> None:
    """
    Issue 61: a first `make run` answered after 819 s, most of it compiling. It serves on the pure
    build at once; the image's build (issue 32: make run uses it where a compiler is present) is made
    by compile.sh in the background, niced and in a session of its own (Ctrl-C leaves it), for the
    next start.
    """
    plan = "\n".join(_make_run_plan(tmp_path, "CAN_COMPILE=yes"))
    assert "pip install -q -e '.[compile]'" in plan and "[test" not in plan, plan
    assert "setsid nice -n 19 ./compile.sh" in plan and "compile.log 2>&1 </dev/null &" in plan, plan  # in the background
    assert "TWINGRESS_COMPILE=1" not in plan and "h2stack.py inplace" not in plan, plan  # nothing compiles before the example starts
    assert "the pure build for now" in plan and "find ingress -name '*.so' -delete" in plan, plan  # a stale compiled module never shadows its source


def test_the_next_make_run_puts_the_finished_build_in_place(tmp_path: Path) -> None:
    plan = "\n".join(_make_run_plan(tmp_path, "CAN_COMPILE=yes", touch=(".run-stamp", "compiled/.complete")))
    assert "cp -R" in plan and "/compiled/lib/. ." in plan and "h2stack.py inplace" in plan, plan
    assert "compile.sh" not in plan and "pip install" not in plan, plan


def test_a_compiled_build_that_is_current_runs_as_it_is(tmp_path: Path) -> None:
    plan = _make_run_plan(tmp_path, "CAN_COMPILE=yes", touch=(".run-stamp", ".compiled-stamp"))
    assert not any("compile.sh" in line or ".so' -delete" in line or "pip install" in line for line in plan), plan


@pytest.mark.parametrize("variables", [("CAN_COMPILE=",), ("CAN_COMPILE=yes", "PURE=1")], ids=["no-compiler", "PURE=1"])
def test_make_run_without_a_compiler_installs_only_what_the_demo_needs(tmp_path: Path, variables: tuple[str, ...]) -> None:
    plan = _make_run_plan(tmp_path, *variables)
    assert not any("pip install" in line and ("[test" in line or "compile" in line) for line in plan), plan
    assert not any("TWINGRESS_COMPILE" in line or "compile.sh" in line for line in plan), plan
    assert any("find ingress -name '*.so' -delete" in line for line in plan), plan  # what an earlier compiled run left goes


def test_make_run_echoes_no_recipe(tmp_path: Path) -> None:
    """Issue 61: make echoed the whole compile recipe, whose `|| { echo ...failed... }` read as a failure."""
    outside_make = {name: value for name, value in os.environ.items() if name not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    database = subprocess.run(
        ["make", "--no-print-directory", "-p", "-q", "run", f"VENV={tmp_path / 'venv'}", "CAN_COMPILE=yes"], cwd=ROOT, capture_output=True, text=True, env=outside_make
    ).stdout
    recipes = re.findall(r"^(?:run|run-build|run-migration|run-gateway|run-streams|\S*\.run-stamp):.*\n(?:#.*\n)*((?:\t.*\n)+)", database, re.M)
    assert len(recipes) >= 6, database[:2000]
    unechoed = []
    for recipe in recipes:
        continued = False  # a line after one ending in a backslash is the same shell command
        for line in recipe.splitlines():
            if not continued and not line.lstrip("\t").startswith(("@", "#")):
                unechoed.append(line)
            continued = line.endswith("\\")
    assert not unechoed, unechoed


def test_this_machine_can_compile(tmp_path: Path) -> None:
    """make test builds the compiled build here, so `make run` must find the compiler too (CAN_COMPILE's probe)."""
    plan = "\n".join(_make_run_plan(tmp_path))
    assert "./compile.sh" in plan, plan
