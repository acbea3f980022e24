"""
The command line as an operator meets it (issue 61), under both runners, C{twistd -n ingress} and
C{twist ingress} (C{python -m twisted ingress}): a kubeconfig that cannot be used, a listener whose
port is taken, a source given twice and every listener turned off are one line on stderr and exit
status 1, before anything listens, never a traceback or a process that stays up; a process that
serves less than the defaults says so in its first lines, and --help shows each default as it is given.
"""

from __future__ import annotations

import base64
import ctypes
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from twisted.application.service import Service
from twisted.python.threadpool import ThreadPool

from ingress.observe.logs import LoggingRoot
from tests.kube.twingress import wait_until
from tests.proxy.certs import CertificateAuthority
from tests.support import ROOT, TWISTD, Twingress, free_port, unavailable

RUNNERS = {
    "twistd": TWISTD + ["--pidfile=", "--logfile=-", "-n", "ingress"],
    "twist": [sys.executable, "-m", "twisted", "ingress"],
}
DEADLINE = 30.0  # seconds to the exit: a start refused takes the imports' time (a few seconds here), a hang never ends


def _run(runner: str, *args: str, preexec_fn: Callable[[], None] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """The runner's command line with C{args}, to its exit (a process still up at the deadline fails the test)."""
    return subprocess.run(RUNNERS[runner] + list(args), cwd=cwd, capture_output=True, text=True, timeout=DEADLINE, preexec_fn=preexec_fn)


def _refused(result: subprocess.CompletedProcess[str], *mentions: str) -> str:
    """Exit status 1, one line on stderr that says C{mentions}, nothing on stdout (nothing started): that line."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("twistd ingress: "), result.stderr
    assert all(mention in lines[0] for mention in mentions), (lines[0], mentions)
    assert result.stdout == "", result.stdout
    return lines[0]


def _loopback() -> list[str]:
    """HTTP and admin on free loopback ports, HTTPS off: a start that is refused must not be refused for its ports."""
    return ["--http", f"tcp:{free_port()}:interface=127.0.0.1", "--https", "", "--admin", f"tcp:{free_port()}:interface=127.0.0.1"]


# -- a kubeconfig that cannot be used


def _kubeconfig(cluster: dict, user: dict | None = None, context: str = "test", cluster_name: str = "test") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": context,
        "contexts": [{"name": "test", "context": {"cluster": cluster_name, "user": "test"}}],
        "clusters": [{"name": "test", "cluster": cluster}],
        "users": [{"name": "test", "user": user or {"token": "abc"}}],
    }


SERVER = {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}
NO_CONTEXT = {key: value for key, value in _kubeconfig(SERVER).items() if key != "current-context"}
NO_CLUSTERS = {key: value for key, value in _kubeconfig(SERVER).items() if key != "clusters"}

BAD_KUBECONFIGS = {
    # name: (the file's text, what the line says)
    "malformed": ("this: is: not: yaml: [\n", "is not YAML: mapping values are not allowed here (line 1, column 9)"),
    "empty": ("", "is empty"),
    "a-list": ("- clusters\n- users\n", "is not a kubeconfig"),
    "no-current-context": (yaml.safe_dump(NO_CONTEXT), "Expected key current-context"),
    "no-clusters": (yaml.safe_dump(NO_CLUSTERS), "Expected object with name test in"),
    "unknown-context": (yaml.safe_dump(_kubeconfig(SERVER, context="elsewhere")), "Expected object with name elsewhere"),
    "missing-cluster": (yaml.safe_dump(_kubeconfig(SERVER, cluster_name="gone")), "Expected object with name gone"),
    "no-server": (yaml.safe_dump(_kubeconfig({"insecure-skip-tls-verify": True})), "names no server"),
    "ca-path-missing": (
        yaml.safe_dump(_kubeconfig({"server": "https://127.0.0.1:6443", "certificate-authority": "/nonexistent/ca.crt"})),
        "File does not exist: /nonexistent/ca.crt",
    ),
    "client-certificate-path-missing": (
        yaml.safe_dump(_kubeconfig(SERVER, {"client-certificate": "/nonexistent/tls.crt", "client-key": "/nonexistent/tls.key"})),
        "File does not exist: /nonexistent/tls.crt",
    ),
    "ca-data-not-base64": (
        yaml.safe_dump(_kubeconfig({"server": "https://127.0.0.1:6443", "certificate-authority-data": "not base64!"})),
        "base64",
    ),
    "ca-not-a-certificate": (
        yaml.safe_dump(_kubeconfig({"server": "https://127.0.0.1:6443", "certificate-authority-data": base64.b64encode(b"junk").decode()})),
        "its certificate authority cannot be loaded",
    ),
}


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("kind", BAD_KUBECONFIGS)
def test_a_kubeconfig_that_cannot_be_used_is_one_line_and_exit_1(tmp_path: Path, runner: str, kind: str) -> None:
    text, problem = BAD_KUBECONFIGS[kind]
    path = tmp_path / f"{kind}.kubeconfig"
    path.write_text(text)
    line = _refused(_run(runner, "--kubeconfig", str(path), *_loopback()), f"--kubeconfig {str(path)!r}", problem)
    print(line)


def test_a_usable_kubeconfig_passes_the_check(tmp_path: Path) -> None:
    """The check refuses only what the client could not use: a good file, with its certificates as files and as data, passes."""
    from ingress.sources.kube.kubeconfig import kubeconfig_problem

    ca = CertificateAuthority("kubeconfig-test-ca")
    ca.write(tmp_path / "ca.crt")
    as_files = _kubeconfig({"server": "https://127.0.0.1:6443", "certificate-authority": str(tmp_path / "ca.crt")})
    as_data = _kubeconfig({"server": "https://127.0.0.1:6443", "certificate-authority-data": base64.b64encode(ca.pem()).decode()})
    for name, config in (("files", as_files), ("data", as_data)):
        (tmp_path / name).write_text(yaml.safe_dump(config))
        assert kubeconfig_problem(str(tmp_path / name)) is None


_PR_CAPBSET_DROP, _CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 24, 1, 2


def _without_file_permission_override() -> None:
    """
    In the child, before exec: root without the capabilities that let it read any file (a
    test container runs as root), so that a mode-0 file is unreadable to it as to anyone.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.fixture
def unreadable(tmp_path: Path) -> Iterator[tuple[Path, Callable[[], None] | None]]:
    """A kubeconfig, good but for its mode (0), and how to start a twistd that may not read it."""
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(_kubeconfig(SERVER)))
    path.chmod(0)
    yield path, _without_file_permission_override if os.geteuid() == 0 else None
    path.chmod(0o600)


@pytest.mark.parametrize("runner", RUNNERS)
def test_an_unreadable_kubeconfig_is_one_line_and_exit_1(unreadable: tuple[Path, Callable[[], None] | None], runner: str) -> None:
    path, drop = unreadable
    _refused(_run(runner, "--kubeconfig", str(path), *_loopback(), preexec_fn=drop), f"--kubeconfig {str(path)!r}", "cannot be read: Permission denied")


# -- a pod's in-cluster configuration that cannot be used

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def _in_a_pod(files: dict[str, bytes], command: list[str]) -> list[str]:
    """
    C{command} as a pod would run it, its service-account directory holding C{files}: in a mount
    namespace of its own, with a tmpfs over /run (/var/run's target), so that no file of this
    machine is written or hidden from anything else.
    """
    if os.geteuid() != 0:
        unavailable("an in-cluster configuration needs a mount namespace of its own: run as root (as make test does)")
    writes = " && ".join(f"printf %s {base64.b64encode(data).decode()} | base64 -d > {SERVICE_ACCOUNT}/{name}" for name, data in files.items())
    script = f"mount -t tmpfs tmpfs /run && mkdir -p {SERVICE_ACCOUNT}" + (f" && {writes}" if writes else "") + ' && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", *command]


IN_CLUSTER_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
BAD_IN_CLUSTER = {
    # name: (the service account's files, what the line says: the kubernetes loader's words, or ours)
    "empty-token": ({"token": b"", "ca.crt": b"x"}, "Token file exists but empty"),
    "no-ca": ({"token": b"abc"}, "Service certification file does not exist"),
    "empty-ca": ({"token": b"abc", "ca.crt": b""}, "Cert file exists but empty"),
    "ca-not-a-certificate": ({"token": b"abc", "ca.crt": b"junk"}, "its certificate authority cannot be loaded"),
}


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("kind", BAD_IN_CLUSTER)
def test_an_in_cluster_configuration_that_cannot_be_used_is_one_line_and_exit_1(runner: str, kind: str) -> None:
    """
    The same as for a kubeconfig, in a pod (no --manifests, no --kubeconfig): the service
    account's token and CA bundle are loaded when the command line is checked, not when the
    first informer starts, which printed a traceback from inside the start.
    """
    files, problem = BAD_IN_CLUSTER[kind]
    command = _in_a_pod(files, RUNNERS[runner] + _loopback())
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE, env=os.environ | IN_CLUSTER_ENV)
    print(_refused(result, f"the in-cluster configuration ({SERVICE_ACCOUNT}) cannot be used", problem))


def test_a_usable_in_cluster_configuration_passes_the_check() -> None:
    ca = CertificateAuthority("in-cluster-test-ca")
    check = [sys.executable, "-c", "from ingress.sources.kube.kubeconfig import in_cluster_problem; print(in_cluster_problem())"]
    result = subprocess.run(
        _in_a_pod({"token": b"abc", "ca.crt": ca.pem()}, check), cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE, env=os.environ | IN_CLUSTER_ENV
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "None\n", ""), result


# -- a listener whose port is taken


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("listener", ["http", "https", "admin"])
@pytest.mark.parametrize("source", ["empty", "quickstart"])
def test_a_port_in_use_is_one_line_on_stderr_and_exit_1(tmp_path: Path, runner: str, listener: str, workers: str, source: str) -> None:
    """
    Issue 30, and 61 point 6: a listener whose port another process holds stops the start with
    one line on stderr (not a log line on stdout) and exit status 1, within seconds, under either
    runner: a DaemonSet pod that prints "cannot listen" and stays up neither serves nor gets
    restarted by the kubelet (under twist it never exited: the table-build thread had started).
    Every listener kind, one process or workers, an empty source and the quickstart's.
    """
    manifests = tmp_path if source == "empty" else ROOT / "examples" / "quickstart"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = f"tcp:{taken.getsockname()[1]}:interface=127.0.0.1"
        ports = {name: f"tcp:{free_port()}:interface=127.0.0.1" for name in ("http", "https", "admin")}
        ports[listener] = busy
        started = time.monotonic()
        workdir = tmp_path / "cwd"
        workdir.mkdir()
        result = _run(runner, "--manifests", str(manifests), *[f"--{name}={value}" for name, value in ports.items()], "--workers", workers, cwd=workdir)
        took = time.monotonic() - started
    assert list(workdir.iterdir()) == [], "a file left where it ran (twist made an empty twistd.log)"
    line = f"twistd ingress: --{listener} {busy}: cannot listen: [Errno 98] Address already in use"
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stderr.splitlines() == [line], result.stderr
    assert "cannot listen" not in result.stdout, "a copy of the line in the log"
    assert "Traceback" not in result.stdout + result.stderr
    print(f"{runner}: --{listener} busy, --workers {workers}, {source}: exit 1 after {took:.1f}s")


# -- sources given twice, listeners turned off


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize(
    "spelling", [["--manifests", "{a}", "--manifests", "{b}"], ["--manifests={a}", "--manifests={b}"], ["--manif", "{a}", "--manifests", "{b}"]],
    ids=["separate", "equals", "abbreviated"],
)
def test_manifests_given_twice_is_one_line_and_exit_1(tmp_path: Path, runner: str, spelling: list[str]) -> None:
    """One directory is the source: the last one given silently won, and the other's routes were missing."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    args = [part.format(a=tmp_path / "a", b=tmp_path / "b") for part in spelling]
    _refused(_run(runner, *args, *_loopback()), "--manifests given 2 times", str(tmp_path / "a"), str(tmp_path / "b"), "give one")


def test_kubeconfig_given_twice_is_one_line_and_exit_1(tmp_path: Path) -> None:
    for name in ("one", "two"):
        (tmp_path / name).write_text(yaml.safe_dump(_kubeconfig(SERVER)))
    _refused(_run("twistd", "--kubeconfig", str(tmp_path / "one"), "--kubeconfig", str(tmp_path / "two"), *_loopback()), "--kubeconfig given 2 times")


@pytest.mark.parametrize("runner", RUNNERS)
def test_every_listener_off_is_one_line_and_exit_1(tmp_path: Path, runner: str) -> None:
    """--http '' --https '' --admin '' started, served nothing and said nothing."""
    _refused(_run(runner, "--manifests", str(tmp_path), "--http", "", "--https", "", "--admin", ""), "--http, --https and --admin are all off")


def test_a_listener_off_is_said_in_the_first_lines(tmp_path: Path) -> None:
    """Without HTTP and HTTPS (a stream-only node), or without the admin listener, the log says so next to what listens."""
    proxy = Twingress(tmp_path, "--http", "")  # HTTPS is off too (tests.support), the admin listener on
    try:
        lines = proxy.log().splitlines()
        assert any("no HTTP or HTTPS listener (--http '' --https ''): only the table's stream and Gateway listeners serve" in line for line in lines), lines
        assert not any("no admin listener" in line for line in lines), lines
    finally:
        proxy.stop()
    log = tmp_path / "no-admin.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            RUNNERS["twistd"] + ["--manifests", str(tmp_path), "--http", f"tcp:{free_port()}:interface=127.0.0.1", "--https", "", "--admin", ""],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: process.poll() is not None or "HTTP on " in log.read_text(), DEADLINE, "the HTTP listener's line")
        assert process.poll() is None, log.read_text()
        assert "no admin listener (--admin ''): no /healthz, /readyz, /metrics or /debug/routes" in log.read_text()
    finally:
        process.terminate()
        process.wait(DEADLINE)


@pytest.mark.parametrize("runner", RUNNERS)
def test_help_shows_defaults_as_given_and_what_update_status_writes(runner: str) -> None:
    """--help as printed (tests/unit/test_docs.py holds every default it shows to docs/configuration.md)."""
    result = subprocess.run(RUNNERS[runner] + ["--help"], cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE, env=os.environ | {"COLUMNS": "400"})
    assert result.returncode == 0, result.stderr
    lines = {line.split("=", 1)[0].strip(): line for line in result.stdout.splitlines() if line.strip().startswith("--")}
    for name, shown in (("poll-interval", "1"), ("shutdown-delay", "5"), ("drain-timeout", "30"), ("stream-drain-timeout", "30"), ("watch-namespace", "''")):
        assert lines[f"--{name}"].endswith(f"[default: {shown}]"), lines[f"--{name}"]
    update_status = lines["--update-status"]
    assert all(what in update_status for what in ("status.loadBalancer", "StreamIngress", "Gateway API conditions", "Warning Events")), update_status


# -- a start that fails after threads started


class _Threads(Service):
    """A child that starts a thread pool (non-daemon threads, as the table builder's) and stops it."""

    def __init__(self) -> None:
        self.pool = ThreadPool(1, 1, name="test-start-failure")

    def startService(self) -> None:
        super().startService()
        self.pool.start()
        self.pool.callInThread(lambda: None)  # a thread is running

    def stopService(self) -> None:
        self.pool.stop()
        super().stopService()


class _Fails(Service):
    def startService(self) -> None:
        raise RuntimeError("this start fails")


def test_a_start_that_fails_stops_the_children_already_started() -> None:
    """
    A child's start that raises (the malformed kubeconfig did, from the first informer) stops
    what was already started: the table-build thread, not a daemon, had kept the process up.
    """
    root = LoggingRoot()
    threads = _Threads()
    threads.setServiceParent(root)
    _Fails().setServiceParent(root)
    try:
        with pytest.raises(RuntimeError, match="this start fails"):
            root.startService()
        assert not threads.running and not root.running
        assert not threads.pool.started and not any(thread.is_alive() for thread in threads.pool.threads), "the pool's threads still run"
    finally:
        if not threads.pool.joined:  # without the fix: stopped here, so that this test process can still exit
            threads.pool.stop()


@pytest.mark.parametrize(
    "args, mentions",
    [
        (["--publish-service", "edge/lb", "--publish-status-address", "192.0.2.1"], ("give either --publish-status-address or --publish-service, not both",)),
        (["--publish-service", "lb"], ("--publish-service takes NAMESPACE/NAME of a Service, not 'lb'",)),
        (["--publish-service", "edge/lb/x"], ("--publish-service takes NAMESPACE/NAME", "'edge/lb/x'")),
    ],
    ids=["both", "no-namespace", "too-many-parts"],
)
def test_a_publish_service_that_cannot_be_used_is_one_line_and_exit_1(tmp_path: Path, args: list[str], mentions: tuple[str, ...]) -> None:
    """Two sources of Ingress status addresses, or a Service named some other way: refused before anything starts."""
    _refused(_run("twistd", "--manifests", str(tmp_path), *_loopback(), *args), *mentions)
