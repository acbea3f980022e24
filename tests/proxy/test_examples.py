"""
The examples as `make run` runs them (examples/*/run.sh, issue 33): each honours HTTP, HTTPS and
ADMIN and prints the URLs it serves; a backend port that is taken stops the example with one line
before twingress starts; the stream example carries TCP and UDP; and `make run` installs only
what the demo needs.

Issue 61: every example binds what it prints, on loopback unless told otherwise, read from the
kernel's own socket tables (/proc/net/{tcp,tcp6,udp,udp6}) for the sockets of the example's
processes, and checked with a connect to another address of this machine; the gateway example
serves its routes on HTTP's port; the stream example's hints work as printed.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import pytest
import yaml

from tests.support import ROOT, ProcessExited, free_port
from tests.waiting import eventually

EXAMPLES = ("quickstart", "nginx-migration", "gateway", "streams", "tls")


class Example:
    """examples/NAME/run.sh on free ports, its stdout collected."""

    def __init__(self, name: str, tmp_path: Path, https: bool = True, args: tuple[str, ...] = (), env: Optional[dict[str, str]] = None) -> None:
        self.http, self.https, self.admin = free_port(), free_port(), free_port()
        self.output = tmp_path / f"{name}.out"
        env = os.environ | {
            "HTTP": f"tcp:{self.http}:interface=127.0.0.1",
            "HTTPS": f"tcp:{self.https}:interface=127.0.0.1" if https else "",
            "ADMIN": f"tcp:{self.admin}:interface=127.0.0.1",
            "PYTHON": sys.executable,
        } | (env or {})
        with open(self.output, "wb") as out:
            self.process = subprocess.Popen([str(ROOT / "examples" / name / "run.sh"), *args], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def ready(self, timeout: float = 30.0) -> None:
        def answers() -> bool:
            if self.process.poll() is not None:
                raise ProcessExited(f"the example exited with {self.process.returncode}:\n{self.text()}")
            return self.get(self.admin, "/readyz")[0] == 200

        eventually(answers, "the example's /readyz to answer 200", timeout=timeout, interval=0.1, fatal=(ProcessExited,), context=self.text)

    @staticmethod
    def get(port: int, path: str = "/", host: str = "127.0.0.1") -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("GET", path, headers={"Host": host})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def listening(self) -> set[tuple[str, str, int]]:
        """What the example's processes listen on: (tcp|udp, address, port), from the kernel's tables."""
        return listening_sockets(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(45)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)


def _session_pids(session: int) -> list[int]:
    """The processes of a session (run.sh was started with start_new_session: its pid is the session's)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
                if int(fields[3]) == session:  # state ppid pgrp session ...
                    pids.append(int(entry.name))
    return pids


def _socket_inodes(pids: list[int]) -> set[int]:
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes.add(int(target[8:-1]))
    return inodes


def _address(hexed: str) -> tuple[str, int]:
    """A /proc/net/* local_address (host byte order words, hex) as (address, port)."""
    host, _, port = hexed.partition(":")
    raw = bytes.fromhex(host)
    raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw), int(port, 16)


def listening_sockets(session: int) -> set[tuple[str, str, int]]:
    """
    The listening sockets of a session's processes: TCP in LISTEN (state 0A), UDP unconnected
    (07: a UDP session's upstream socket is connected, 01, and takes nothing from others).
    """
    inodes = _socket_inodes(_session_pids(session))
    found = set()
    for table, protocol, state in (("tcp", "tcp", "0A"), ("tcp6", "tcp", "0A"), ("udp", "udp", "07"), ("udp6", "udp", "07")):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == state and int(fields[9]) in inodes:
                    found.add((protocol, *_address(fields[1])))
    return found


def other_addresses() -> list[str]:
    """This machine's IPv4 addresses outside 127.0.0.0/8 (the test network namespace has 10.244.0.x)."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True).stdout
    found = [field.split("/")[0] for line in out.splitlines() for field in line.split()[3:4]]
    addresses = [address for address in found if not address.startswith("127.")]
    assert addresses or not os.environ.get("TWINGRESS_NETNS"), out  # the test namespace always has some
    return addresses


def assert_loopback_only(example: Example, expected: set[tuple[str, str, int]]) -> None:
    """Every socket the example listens on is a loopback one, the ones it prints among them; another address of this machine is refused."""
    sockets = example.listening()
    assert expected <= sockets, (sockets, example.text())
    assert all(ipaddress.ip_address(address).is_loopback for _, address, _ in sockets), (sockets, example.text())
    for address in other_addresses()[:2]:
        for protocol, _, port in expected:
            if protocol == "tcp":
                with pytest.raises(ConnectionRefusedError), socket.create_connection((address, port), timeout=5):
                    pass


@pytest.fixture
def run(tmp_path: Path) -> Iterator[type[Example]]:
    started: list[Example] = []

    class Started(Example):
        def __init__(self, name: str, https: bool = True, args: tuple[str, ...] = (), env: Optional[dict[str, str]] = None) -> None:
            super().__init__(name, tmp_path, https, args, env)
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
    printed = {("tcp", "127.0.0.1", port) for port in (example.http, example.https, example.admin)}
    if name == "streams":
        printed |= {("tcp", "127.0.0.1", 9700), ("udp", "127.0.0.1", 9753)}
    assert_loopback_only(example, printed)
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
    assert "stream listener TCP/9700 (demo/tcp-echo) open on 127.0.0.1:9700, to demo/tcp-echo:7000" in text, text


def test_the_stream_example_s_hints_work_as_printed(run: type[Example]) -> None:
    """Issue 61: the banner's `echo hello | ...` lines, run by a shell as a user pastes them, get the replies they promise."""
    example = run("streams", args=("--shutdown-delay", "0", "--drain-timeout", "1"))
    example.ready()
    hints = {}
    for line in example.text().splitlines():
        command, _, comment = line.strip().partition("  #")
        if command.startswith("echo hello |"):
            hints[command.strip()] = comment.strip()
    assert len(hints) == 2, example.text()
    assert all(shlex.split(command)[3:4] == ["python3"] for command in hints), hints  # the prerequisites' Python, not nc
    replies = {
        comment: subprocess.run(command, shell=True, executable="/bin/bash", cwd=ROOT, capture_output=True, timeout=30)
        for command, comment in hints.items()
    }
    tcp = replies["tcp-pod-a: hello (or tcp-pod-b)"]
    assert tcp.returncode == 0 and re.fullmatch(rb"tcp-pod-[ab]: hello\n", tcp.stdout), tcp
    udp = replies["udp-pod: hello"]
    assert udp.returncode == 0 and udp.stdout == b"udp-pod: hello\n", udp


def test_socat_gets_the_stream_example_s_reply(run: type[Example]) -> None:
    """Issue 61: with socat (data and FIN in one go) the reply came back empty: the echo backend dropped it at the FIN."""
    socat = shutil.which("socat")
    assert socat, "socat is missing: testenv/system-packages.sh installs it"
    example = run("streams", args=("--shutdown-delay", "0", "--drain-timeout", "1"))
    example.ready()
    reply = subprocess.run(f"echo hello | {socat} - TCP:127.0.0.1:9700", shell=True, capture_output=True, timeout=30)
    assert reply.returncode == 0 and re.fullmatch(rb"tcp-pod-[ab]: hello\n", reply.stdout), reply


def test_the_echo_backend_answers_data_that_comes_with_the_fin(tmp_path: Path) -> None:
    """examples/echo.py --protocol tcp is half-closeable: data and FIN in one read still get their reply, then the close."""
    port, ready = free_port(), tmp_path / "ready"
    echo = subprocess.Popen([sys.executable, str(ROOT / "examples" / "echo.py"), "--protocol", "tcp", "--name", "pod", "--listen", f"tcp:{port}:interface=127.0.0.1", "--ready", str(ready)])
    try:
        eventually(ready.exists, "the echo backend's ready file", timeout=20)
        assert ready.read_text() == "ok\n"
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(b"hello\n")
            client.shutdown(socket.SHUT_WR)
            received = b""
            while block := client.recv(1024):
                received += block
        assert received == b"pod: hello\n"
    finally:
        echo.terminate()
        echo.wait(10)


def test_the_gateway_example_serves_its_routes_on_http_s_port(run: type[Example]) -> None:
    """Issue 61: with HTTP=tcp:PORT:interface=127.0.0.1 the routes stayed on 0.0.0.0:8080 and PORT answered 404."""
    example = run("gateway")
    example.ready()
    status, body = example.get(example.http, "/", host="store.example.com")
    assert status == 200 and json.loads(body)["name"] in ("store-v1-pod", "store-v2-pod"), body
    text = example.text()
    assert f"the Gateway's HTTP listener  http://127.0.0.1:{example.http}/" in text, text
    assert f"curl -H 'Host: store.example.com' http://127.0.0.1:{example.http}/ " in text, text
    assert not any(port == 8080 for _, _, port in example.listening()), example.listening()
    assert_loopback_only(example, {("tcp", "127.0.0.1", example.http)})


def test_the_gateway_example_without_http_opens_the_gateway_s_port_on_loopback(run: type[Example]) -> None:
    """HTTP off: the Gateway's listener gets 8080 of its own, on GATEWAY_INTERFACE (127.0.0.1), and the log calls it what it is."""
    example = run("gateway", env={"HTTP": ""})
    example.ready()
    text = example.text()
    assert "the Gateway's HTTP listener  http://127.0.0.1:8080/" in text, text
    # The port opens with the first table, after /readyz may answer.
    eventually(lambda: ("tcp", "127.0.0.1", 8080) in example.listening(), "the Gateway's port 8080 to listen", timeout=20, interval=0.1)
    assert_loopback_only(example, {("tcp", "127.0.0.1", 8080)})
    status, body = example.get(8080, "/", host="store.example.com")
    assert status == 200 and json.loads(body)["name"] in ("store-v1-pod", "store-v2-pod"), body
    text = example.text()
    assert "Gateway HTTP listener on port 8080 (infra/shared) open on 127.0.0.1:8080" in text, text
    assert "stream listener TCP/8080" not in text, text


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
    recipes = re.findall(r"^(?:run|run-build|run-migration|run-gateway|run-streams|run-tls|\S*\.run-stamp):.*\n(?:#.*\n)*((?:\t.*\n)+)", database, re.M)
    assert len(recipes) >= 7, database[:2000]
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


def test_the_tls_example_serves_its_secret_s_certificate(run: type[Example]) -> None:
    """
    Issue 61: examples/tls/run.sh as a user runs it; its printed curl (--cacert the generated
    root, --resolve) verifies and reaches the backend, and the certificate served for the host is
    the one of the Secret it wrote (a key made at start: none is committed).
    """
    example = run("tls")
    example.ready()
    text = example.text()
    secret_path = Path(re.search(r"the Secret demo/secure-example-tls  (\S+)", text).group(1))  # type: ignore[union-attr]
    secret = yaml.safe_load(secret_path.read_text())
    assert secret["type"] == "kubernetes.io/tls" and oct(secret_path.stat().st_mode & 0o777) == "0o600", secret_path
    (command,) = [line.strip().partition("   #")[0] for line in text.splitlines() if line.strip().startswith("curl --cacert")]
    assert f"--resolve secure.example.com:{example.https}:127.0.0.1 https://secure.example.com:{example.https}/" in command, command
    done = subprocess.run(command, shell=True, capture_output=True, timeout=30)
    assert done.returncode == 0, done
    assert json.loads(done.stdout)["name"] == "web-pod", done.stdout
    context = ssl.create_default_context(cafile=str(secret_path.with_name("root.pem")))
    with socket.create_connection(("127.0.0.1", example.https), timeout=10) as raw, context.wrap_socket(raw, server_hostname="secure.example.com") as tls:
        served = tls.getpeercert(binary_form=True)
    expected = ssl.PEM_cert_to_DER_cert(base64.b64decode(secret["data"]["tls.crt"]).decode())
    assert served == expected
    example.stop()
    assert not secret_path.exists()  # the generated key goes with the example
