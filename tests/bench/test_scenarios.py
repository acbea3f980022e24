"""
Every scenario of C{python -m bench}, run the way an operator runs it (the command line, real
processes, real load) with its smallest settings, so that a scenario cannot rot unnoticed: its
results file is written and well formed, and C{python -m bench report} prints it.  Not timed:
nothing here asserts on a figure's size, only that each figure is there and is a number.

A scenario whose tool or peer is not built skips here, and fails under TWINGRESS_REQUIRE_KUBE=1
(CI), where everything bench/setup.sh, testenv/system-packages.sh and bench/peers.sh provide must be.
About 10 minutes in all on a 2-core machine busy with other work: the cluster scenarios take about a
minute each (a control plane started and stopped), the others 5 to 50 s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import pytest

from tests.support import unavailable

REPO = Path(__file__).resolve().parents[2]


def bench(*argv: str, timeout: float = 300, env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess[str]:
    """C{python -m bench ARGV} from the tree's root, as bench/README.md says to run it."""
    return subprocess.run([sys.executable, "-m", "bench", *argv], cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)


def offline_pip() -> dict[str, str]:
    """
    The environment with pip pointed at make test's wheelhouse alone: the tests run in a network
    namespace without the internet, where a fresh clone's make run could not reach PyPI (make test
    builds the wheelhouse from this tree's requirements before any test runs).
    """
    wheelhouse = Path(os.environ.get("TWINGRESS_WHEELHOUSE") or Path.home() / ".cache" / "twingress" / "wheelhouse")
    if not (wheelhouse / ".stamp").exists():
        unavailable(f"no wheelhouse at {wheelhouse} (make wheelhouse)")
    return dict(os.environ) | {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse)}


def need(*tools: str) -> None:
    missing = [tool for tool in tools if not (shutil.which(tool) or os.access(f"/usr/sbin/{tool}", os.X_OK))]
    if missing:
        unavailable(f"not installed: {', '.join(missing)} (bench/setup.sh, testenv/system-packages.sh)")


def need_cluster() -> None:
    """The kube binaries of testenv/ and the test network namespace, as the cluster scenarios need them."""
    from tests.kube import cluster
    try:
        missing = cluster.missing_binaries(cluster.bin_dir())
    except (OSError, subprocess.CalledProcessError) as e:
        unavailable(f"cannot locate the kube test binaries with testenv/build.sh: {e}")
    if missing:
        unavailable(f"kube test binaries missing: {', '.join(missing)} (make testenv)")
    if not cluster.address_exists("10.244.0.10"):
        unavailable("not in the test network namespace: run under testenv/netns-run")


def results_of(done: subprocess.CompletedProcess[str], out: Path) -> dict[str, Any]:
    """The run's results file, checked to be what python -m bench report reads, the run having succeeded."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["failures"] == []
    environment = document["environment"]
    assert {"machine", "cpus", "kernel", "commit", "dirty", "python"} <= environment.keys()
    assert isinstance(environment["dirty"], bool) and environment["cpus"] >= 1
    assert document["command"].startswith("python -m bench ")
    assert document["figures"], document
    report = bench("report", str(out))
    assert report.returncode == 0, report.stderr
    assert document["scenario"] in report.stdout
    return document


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


@pytest.mark.parametrize("against", ["twingress", "nginx"])  # Traefik and Caddy: not built for CI (Makefile, bench-peers-built)
def test_pairs_against(tmp_path: Path, against: str) -> None:
    """pairs --against: both sides' CPU per request, the ratios, one figure per kind asked."""
    need("nginx", "h2load", "taskset", "go")
    out = tmp_path / "pairs.json"
    kinds = "all" if against == "twingress" else "http/1.1,h2"
    document = results_of(bench("pairs", "--against", against, "--kinds", kinds, "--pairs", "1", "--seconds", "1", "--out", str(out)), out)
    expected = ["http/1.1", "https/1.1", "h2", "grpc"] if kinds == "all" else ["http/1.1", "h2"]
    assert [f["kind"] for f in document["figures"]] == expected
    for f in document["figures"]:
        assert is_number(f["first_us"]) and is_number(f["second_us"]) and len(f["ratios"]) == f["pairs"] == 1
        assert f["interval"] is None  # one pair: too few for an interval, and the file says so rather than inventing one


def test_pairs_baseline(tmp_path: Path) -> None:
    """pairs --baseline: another checkout's build against this one (here a clone of this commit, with this .venv linked in)."""
    need("nginx", "h2load", "taskset", "go", "git")
    baseline = tmp_path / "baseline"
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(baseline)], check=True, capture_output=True)
    (baseline / ".venv").symlink_to(Path(sys.prefix))
    out = tmp_path / "pairs.json"
    document = results_of(bench("pairs", "--baseline", str(baseline), "--kinds", "h2", "--pairs", "1", "--seconds", "1", "--out", str(out)), out)
    described = document["config"]["baseline"]
    assert described["path"] == str(baseline.resolve()) and described["compiled"] is False and len(described["commit"]) == 12
    (figure,) = document["figures"]
    assert figure["second"] == "baseline" and is_number(figure["ratio"])


def test_pairs_bad_baseline(tmp_path: Path) -> None:
    """A baseline that is no checkout: one line on stderr, a results file saying so, exit 1; never a traceback."""
    need("nginx", "h2load", "taskset", "go")
    out = tmp_path / "pairs.json"
    done = bench("pairs", "--baseline", str(tmp_path), "--pairs", "1", "--seconds", "1", "--out", str(out))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "not a twingress checkout" in done.stderr
    assert "not a twingress checkout" in json.loads(out.read_text())["failures"][0]


BAD_OPTIONS = [
    ["pairs"], ["pairs", "--against", "apache"], ["pairs", "--against", "nginx", "--cpus", "x"], ["node", "--kinds", "h3"],
    ["latency", "--annotation", "x"], ["latency", "--annotation", "auth-type=basic"],  # no prefix: no route would read it
]


@pytest.mark.parametrize("argv", BAD_OPTIONS)
def test_bad_options(argv: list[str]) -> None:
    done = bench(*argv)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr


def test_node(tmp_path: Path) -> None:
    """node --workers 2 --against nginx: a row per contender, layout and kind, each a rate and a CPU per request."""
    need("nginx", "h2load", "taskset", "go")
    out = tmp_path / "node.json"
    document = results_of(bench("node", "--workers", "2", "--against", "nginx", "--kinds", "http/1.1", "--seconds", "1", "--warmup", "0",
                                "--out", str(out)), out)
    assert [(f["contender"], f["workers"]) for f in document["figures"]] == [("twingress", 1), ("twingress", 2), ("nginx", 1), ("nginx", 2)]
    assert all(is_number(f["rps"]) and is_number(f["cpu_us"]) for f in document["figures"])


# Each scenario ported onto bench/lib at its smallest: (its options, the tools it needs, the figure a row must have, as a number).
PORTED: dict[str, tuple[list[str], list[str], Callable[[dict[str, Any]], Any]]] = {
    "latency": (["--seconds", "1", "--warmup", "1"], ["nginx", "wrk", "taskset", "go"], lambda row: row["rps"]),
    "tls": (["--seconds", "1", "--warmup", "1", "--sni-certs", "20", "--sni-rounds", "1"], ["nginx", "wrk", "taskset", "go"],
            lambda row: row["ratio_many_to_one"] if row["target"] == "sni" else row["handshakes"]["rate"] * row["keepalive"]["rps"]),
    "streams": (["--seconds", "1", "--streams", "2", "--udp-clients", "1"], ["haproxy", "socat", "iperf3", "taskset", "go"],
                lambda row: row.get("tcp_1_stream_MBps") or row["udp_pps"]),
    "h2-path": (["--requests", "2000", "--rounds", "1"], ["taskset"], lambda row: row["best_us"]),
    "floor-h2": (["--requests", "2000", "--rounds", "1"], ["taskset"], lambda row: row["best_us"]),
    "mix": (["--seconds", "1", "--warmup", "1", "--against", "nginx"], ["nginx", "h2load", "taskset", "go"], lambda row: row["cpu_us_per_request"]),
    # Under the compiled build h2's H2Connection is an immutable (Cython) type: its column is None and the row says why.
    "floor-library": (["--seconds", "2", "--warmup", "1"], ["nginx", "wrk", "h2load", "taskset", "go"],
                      lambda row: row["cpu_us"] if all((row["library_us"][lib] is None) == (lib in row["untimed"]) for lib in ("ssl", "h2"))
                      else None),
    "instructions": (["--against", "floor", "--requests", "200", "--warmup", "100", "--cpu", "1"],
                     ["nginx", "h2load", "taskset", "go", "valgrind", "callgrind_control"], lambda row: row["instructions"] * row["user_us"]),
    "tls-calls": (["--requests", "2000", "--rounds", "1"], ["taskset"], lambda row: row["best_us"]),
    "workers-cost": (["--rounds", "1", "--seconds", "1", "--no-count", "--against", "nginx"], ["nginx", "h2load", "taskset", "perf", "go"],
                     lambda row: row["user_us"] * row["kernel"]["raw_syscalls:sys_enter"]),
}


@pytest.mark.parametrize("name", sorted(PORTED))
def test_ported_scenario(tmp_path: Path, name: str) -> None:
    """A scenario on bench/lib at its smallest: its results file holds its figures, each with its number, and report prints them."""
    argv, tools, number = PORTED[name]
    need(*tools)
    out = tmp_path / f"{name}.json"
    document = results_of(bench(name, *argv, "--out", str(out), timeout=600), out)
    assert all(is_number(number(figure)) for figure in document["figures"]), document["figures"]


# Not run here, each with why (a known gap, not a skip): none now.
NOT_RUN: dict[str, str] = {}


def numbers(figure: Any, *path: str) -> Any:
    """The value at PATH in a figure, checked to be a number (0 allowed: a count, a time that rounds to nothing)."""
    for key in path:
        figure = figure[key]
    assert isinstance(figure, (int, float)) and not isinstance(figure, bool) and figure >= 0, (path, figure)
    return figure


def phases(document: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for figure in document["figures"]:
        found.setdefault(figure["phase"], []).append(figure)
    return found


def check_convergence(document: dict[str, Any]) -> None:
    """Every series timed by traffic with no failure, the scale step, the Gateway phase and the cold start measured."""
    found = phases(document)
    series = {(f["ingresses"], f["series"]): f for f in found["series"]}
    assert set(series) == {(0, "create"), (0, "update-path"), (0, "update-backend"), (0, "update-endpoints"),
                           (20, "create"), (20, "create, poll 10ms"), (20, "update-endpoints")}
    for f in series.values():
        assert f["failures"] == 0 and f["n"] == len(f["samples_ms"]) > 0 and numbers(f, "p99_ms") >= numbers(f, "p50_ms")
    (scale,) = found["scale"]
    assert scale["live"]["route_hosts"] == 20 and numbers(scale, "live", "all_live_s") >= 0
    assert numbers(scale, "rebuild", "build_ms_median") > 0 and numbers(scale, "memory", "rss_mb") > 0
    (gateway,) = found["gateway"]
    assert gateway["new_host"]["failures"] == 0 and numbers(gateway, "new_host", "p50_ms") > 0 and numbers(gateway, "live", "all_live_s") >= 0
    (cold,) = found["cold-start"]
    assert numbers(cold, "ready_s") > 0 and numbers(cold, "all_live_s") > 0
    (baseline,) = found["baseline"]
    assert numbers(baseline, "objects_per_s") > 0


def check_endpoint_removal(document: dict[str, Any]) -> None:
    """Every trial timed by traffic and by the bare watch's event, the garbage collections read."""
    (figure,) = document["figures"]
    assert figure["n"] == 3 and figure["failures"] == 0 and len(figure["samples_ms"]) == 3
    assert numbers(figure, "p99_ms") > 0 and numbers(figure, "patch_call_ms_median") > 0
    assert figure["floor"]["from_call"]["n"] == 3 and numbers(figure, "floor", "from_call", "p50_ms") > 0
    assert figure["floor"]["twingress_adds"]["n"] == 3
    assert numbers(figure, "collections_since_start", "0", "count") > 0


def check_watch_floor(document: dict[str, Any]) -> None:
    """Both creation rates, the watcher's CPU, and their ratio."""
    by_run = {figure["run"]: figure for figure in document["figures"]}
    assert set(by_run) == {"watched", "alone", "ratio"}
    assert numbers(by_run["watched"], "objects_per_s") > 0 and numbers(by_run["alone"], "objects_per_s") > 0
    assert numbers(by_run["watched"], "watcher_cpu_s") > 0 and numbers(by_run["ratio"], "ratio") > 0


def check_renewal(document: dict[str, Any]) -> None:
    """Every Secret written and its new certificate served, timed per host; the handshakes counted, none failed."""
    (figure,) = document["figures"]
    assert figure["secrets"] == figure["written"] == 10 and figure["not_served"] == [] and figure["write_errors"] == []
    served = figure["write_to_served"]  # may be below 0: the watch event can reach twingress before the write's answer reaches the bench
    assert isinstance(served["max_ms"], float) and served["max_ms"] >= served["p50_ms"]
    assert numbers(figure, "first_write_to_last_served_s") > 0 and figure["failed"] == 0
    assert sum(figure["handshakes"].values()) > 0 and numbers(figure, "table_builds") > 0


def check_soak(document: dict[str, Any]) -> None:
    """Requests of every kind answered, changes made and seen live, a backend killed, twingress's usage sampled."""
    (figure,) = document["figures"]
    requests = figure["requests"]
    assert all(numbers(requests, kind, "ok") > 0 and numbers(requests, kind, "p50_ms") > 0 for kind in ("keepalive", "new-conn", "tls")), requests
    assert figure["kills"]["count"] >= 1 and figure["raw"]["changes"]["made"]["ingress-path"] > 0
    assert sum(len(times) for times in figure["raw"]["live_ms"].values()) > 0
    assert numbers(figure, "usage", "end", "rss_mb") > 0 and numbers(figure, "usage", "end", "fds") > 0


# Each cluster scenario at its smallest (under testenv/netns-run, the kube binaries of testenv/): its options and what its figures must hold.
CLUSTER: dict[str, tuple[list[str], Callable[[dict[str, Any]], None]]] = {
    "convergence": (["--scale", "20", "--changes", "3", "--rebuilds", "1", "--scale-changes", "2", "--gateway-routes", "5", "--gateway-changes", "2",
                     "--baseline", "10"], check_convergence),
    "endpoint-removal": (["--scale", "20", "--trials", "3", "--run", "1"], check_endpoint_removal),
    "watch-floor": (["--routes", "50"], check_watch_floor),
    "renewal": (["--secrets", "10", "--sample", "5", "--before", "1", "--after", "1"], check_renewal),
    "soak": (["--duration", "10", "--warmup", "3", "--ingresses", "10", "--connections", "16", "--kill-interval", "5"], check_soak),
}


@pytest.mark.parametrize("name", sorted(CLUSTER))
def test_cluster_scenario(tmp_path: Path, name: str) -> None:
    """A cluster scenario at its smallest, on the real control plane: its results file, its figures, its table, and
    with --keep-logs the control plane's logs beside its children's."""
    argv, check = CLUSTER[name]
    need_cluster()
    out, logs = tmp_path / f"{name}.json", tmp_path / "logs"
    document = results_of(bench(name, *argv, "--out", str(out), "--keep-logs", str(logs), timeout=600), out)
    check(document)
    kept = {path.name for path in logs.iterdir()}
    assert any(n.startswith("kube") and n.endswith("-kube-apiserver.log") for n in kept), kept
    assert name == "watch-floor" or "twingress.log" in kept, kept
    assert len(bench("report", str(out)).stdout.splitlines()) > 2  # the table, under the file's two lines


@pytest.mark.parametrize("argv", [["soak", "--against", "nginx"], ["convergence", "--threads", "0"], ["endpoint-removal", "--trials", "0"],
                                  ["watch-floor", "--routes", "0"], ["renewal", "--poll-interval", "0"]])
def test_cluster_bad_options(argv: list[str]) -> None:
    """A cluster scenario's bad options: one line on stderr, exit 2, before any control plane starts."""
    done = bench(*argv)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr


def test_every_scenario_is_tested() -> None:
    """A scenario added to python -m bench without a run here fails this (first-answer: below, it clones and compiles)."""
    listed = {line.split()[0] for line in bench("list").stdout.splitlines()}
    assert listed == {"pairs", "node", "first-answer", *PORTED, *CLUSTER, *NOT_RUN}


def test_first_answer_usage() -> None:
    """first-answer without a clone's path: its usage, one line on stderr, exit 2, no results file (a run: below)."""
    done = bench("first-answer")
    assert done.returncode == 2 and "usage: python -m bench first-answer CLONE" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stdout + done.stderr


def test_first_answer(tmp_path: Path) -> None:
    """first-answer in a fresh clone, the caches kept (removing them would slow every other checkout) and no compile:
    make run's first answer, timed, and its results file."""
    need("git", "make", "taskset")
    out = tmp_path / "first-answer.json"
    document = results_of(bench("first-answer", str(tmp_path / "clone"), "CAN_COMPILE=", "--keep-caches", "--out", str(out), timeout=900, env=offline_pip()), out)
    (row,) = document["figures"]
    assert is_number(row["first_answer_s"]) and row["compile_s"] is None and row["caches_removed"] is False


def test_report_refuses_what_is_no_results_file(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"benchmark": "http"}')
    done = bench("report", str(other))
    assert done.returncode == 1 and "not a bench results file" in done.stderr and "Traceback" not in done.stderr
