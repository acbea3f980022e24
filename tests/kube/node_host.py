"""What the test node leaves on the host, and how it is taken back: cgroups, mounts, processes.

The node runs in the test run's private network namespace, which disappears with the run, but
its mounts (container root filesystems, volumes), its cgroups and its processes (containerd's
shims and the containers, which do not die with pytest) belong to the host. Each node run gets
an id and a record in ``RUNS_DIR`` naming its owner (the pytest process) and its work directory;
all its processes live in one cgroup subtree, ``/twingress-node/<id>`` in every hierarchy.
``reclaim(run)`` kills everything in that subtree, unmounts everything under the work directory
and removes the cgroups: the clean stop does it for its own run, and every start does it first
for the runs whose owner is gone (a killed pytest), so no run inherits another's leftovers, and a
run still going (another worktree's) is left alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from tests.kube.node_config import NodePaths

RUNS_DIR = Path("/run/twingress-node")
CGROUP_PARENT = "twingress-node"
CGROUP_MOUNTS_UNDER = "/sys/fs/cgroup"
CONTAINER_LOG_LINKS = Path("/var/log/containers")  # kubelet's symlinks (a fixed path in kubelet)
SHIM_SOCKETS = Path("/run/containerd/s")  # containerd's shim sockets (a fixed path in containerd)
CNI_RESULTS = Path("/var/lib/cni/results")  # libcni's cache (a fixed path in containerd's CRI)
MNT_DETACH = 2


@dataclass(frozen=True)
class NodeRun:
    """One node run: its id, its work directory, and the pytest process that owns it."""

    id: str
    workdir: Path
    owner_pid: int
    owner_start: str

    @property
    def record(self) -> Path:
        return RUNS_DIR / f"{self.id}.json"

    def cgroup(self, hierarchy: Path, *parts: str) -> Path:
        return hierarchy / CGROUP_PARENT / self.id / Path(*parts) if parts else hierarchy / CGROUP_PARENT / self.id

    @property
    def cgroup_path(self) -> str:
        """The subtree as kubelet's ``cgroupRoot`` names it."""
        return f"/{CGROUP_PARENT}/{self.id}"


def _process_start(pid: int) -> str:
    """The start time of PID (field 22 of /proc/PID/stat): with the pid, it names one process."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[19]


def new_run(workdir: Path) -> NodeRun:
    """Register a run owned by this process (the record survives a kill of it)."""
    run = NodeRun(f"{os.getpid()}-{secrets.token_hex(4)}", workdir, os.getpid(), _process_start(os.getpid()))
    RUNS_DIR.mkdir(parents=True, exist_ok=True)
    run.record.write_text(json.dumps({"id": run.id, "workdir": str(workdir), "owner_pid": run.owner_pid, "owner_start": run.owner_start}))
    return run


def _owner_alive(run: NodeRun) -> bool:
    try:
        return _process_start(run.owner_pid) == run.owner_start
    except (OSError, IndexError):
        return False


def stale_runs() -> list[NodeRun]:
    """The runs recorded whose owner is gone."""
    runs = []
    for record in sorted(RUNS_DIR.glob("*.json")) if RUNS_DIR.is_dir() else []:
        try:
            data = json.loads(record.read_text())
            run = NodeRun(data["id"], Path(data["workdir"]), int(data["owner_pid"]), str(data["owner_start"]))
        except (OSError, ValueError, KeyError):
            record.unlink(missing_ok=True)
            continue
        if not _owner_alive(run):
            runs.append(run)
    return runs


# --- cgroups -----------------------------------------------------------------------------------


def hierarchies() -> list[Path]:
    """Every cgroup (v1 or v2) mount under /sys/fs/cgroup."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype = right.split()[0] if right else ""
        mount_point = _unescape(left.split()[4])
        if fstype in ("cgroup", "cgroup2") and mount_point.startswith(CGROUP_MOUNTS_UNDER + "/"):
            found.append(Path(mount_point))
    return found


def _copy_cpuset(directory: Path) -> None:
    """A v1 cpuset cgroup takes no task until its cpus and mems are set: inherit the parent's."""
    for name in ("cpuset.cpus", "cpuset.mems"):
        mine = directory / name
        if mine.exists() and not mine.read_text().strip():
            mine.write_text((directory.parent / name).read_text())


def make_cgroup(run: NodeRun, *parts: str) -> None:
    """Create the run's cgroup (and PARTS below it) in every hierarchy."""
    for hierarchy in hierarchies():
        path = hierarchy
        for part in (CGROUP_PARENT, run.id, *parts):
            path = path / part
            path.mkdir(exist_ok=True)
            _copy_cpuset(path)


def join_cgroup(run: NodeRun, *parts: str) -> None:
    """Move the calling process into the run's cgroup PARTS (in a child before exec: its
    descendants, containerd's shims, stay there)."""
    pid = str(os.getpid())
    for hierarchy in hierarchies():
        with contextlib.suppress(OSError):
            (run.cgroup(hierarchy, *parts) / "cgroup.procs").write_text(pid)


def _pids_in(top: Path) -> set[int]:
    pids: set[int] = set()
    for directory, _dirs, _files in os.walk(top):
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in (Path(directory) / "cgroup.procs").read_text().split())
    return pids


def _kill_cgroup_processes(run: NodeRun, timeout: float = 10.0) -> None:
    protected = {os.getpid(), os.getppid()}
    tops = [run.cgroup(h) for h in hierarchies()]
    deadline = time.monotonic() + timeout
    while True:
        pids = set().union(*(_pids_in(t) for t in tops if t.is_dir())) - protected
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)  # not a wait: the pace between rounds of kills, until no process is left or the deadline passes


def _remove_cgroups(run: NodeRun) -> None:
    for hierarchy in hierarchies():
        top = run.cgroup(hierarchy)
        if not top.is_dir():
            continue
        for directory, _dirs, _files in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
            with contextlib.suppress(OSError):
                os.rmdir(directory)


# --- mounts ------------------------------------------------------------------------------------


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    return field.encode().decode("unicode_escape") if "\\" in field else field


def mounts_under(directory: Path) -> list[str]:
    prefix = str(directory).rstrip("/") + "/"
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = _unescape(line.split()[4])
        if mount_point.startswith(prefix):
            found.append(mount_point)
    return found


def unmount_under(directory: Path) -> None:
    """Detach every mount under DIRECTORY (deepest first; stacked mounts until none is left)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for _attempt in range(10):
        found = mounts_under(directory)
        if not found:
            return
        for mount_point in sorted(found, key=len, reverse=True):
            libc.umount2(mount_point.encode(), MNT_DETACH)


# --- the whole run -----------------------------------------------------------------------------


def _remove_log_links(run: NodeRun) -> None:
    if not CONTAINER_LOG_LINKS.is_dir():
        return
    prefix = str(run.workdir).rstrip("/") + "/"
    for link in CONTAINER_LOG_LINKS.iterdir():
        with contextlib.suppress(OSError):
            if link.is_symlink() and os.readlink(link).startswith(prefix):
                link.unlink()


def _remove_runtime_files(run: NodeRun) -> None:
    """The shim sockets and CNI result files of the run's containers: a killed shim leaves its
    socket, a pod killed without CNI DEL its results. The shim socket is named by the sha256 of
    containerd's address/namespace/id (containerd's pkg/shim SocketAddress)."""
    paths = NodePaths(run.workdir)
    tasks = paths.containerd_state / "io.containerd.runtime.v2.task"
    for task in tasks.glob("*/*") if tasks.is_dir() else []:
        namespace, task_id = task.parent.name, task.name
        digest = hashlib.sha256(os.path.join(str(paths.containerd_socket), namespace, task_id).encode()).hexdigest()
        (SHIM_SOCKETS / digest).unlink(missing_ok=True)
        for result in CNI_RESULTS.glob(f"*-{task_id}-*") if CNI_RESULTS.is_dir() else []:
            result.unlink(missing_ok=True)


def reclaim(run: NodeRun) -> None:
    """Take back everything RUN left on the host: its processes (SIGKILL), mounts, cgroups, the
    shim sockets and CNI results of its containers, kubelet's container log links and its record.
    Idempotent."""
    if not run.id or "/" in run.id:  # never let a bad record name the whole cgroup parent
        raise ValueError(f"bad node run id {run.id!r}")
    _kill_cgroup_processes(run)
    unmount_under(run.workdir)
    _remove_cgroups(run)
    _remove_runtime_files(run)
    _remove_log_links(run)
    run.record.unlink(missing_ok=True)


def reclaim_stale() -> list[str]:
    """Reclaim every run whose owner is gone; the ids reclaimed."""
    runs = stale_runs()
    for run in runs:
        reclaim(run)
    return [run.id for run in runs]
