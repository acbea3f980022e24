"""CPU accounting from /proc: how busy each CPU was, and how much CPU a process group used.

The benchmark pins the proxy to one CPU and the load (wrk + backend) to the other;
these numbers show which side limited a run and whether other work on the
machine got in the way.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path


def cpu_times() -> dict[int, tuple[int, int]]:
    """Per CPU: (total jiffies, idle + iowait jiffies) from /proc/stat."""
    times: dict[int, tuple[int, int]] = {}
    with open("/proc/stat") as f:
        for line in f:
            name, *values = line.split()
            if name.startswith("cpu") and name != "cpu":
                numbers = [int(v) for v in values[:8]]  # up to steal; guest is in user
                times[int(name[3:])] = (sum(numbers), numbers[3] + numbers[4])
    return times


def busy_percent(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]],
                 cpus: Sequence[int]) -> dict[str, float]:
    """How busy each CPU was between two L{cpu_times} samples, in percent."""
    busy = {}
    for cpu in cpus:
        total = after[cpu][0] - before[cpu][0]
        idle = after[cpu][1] - before[cpu][1]
        busy[f"cpu{cpu}"] = round(100.0 * (total - idle) / total, 1) if total else 0.0
    return busy


def background_busy(cpus: Sequence[int], seconds: float = 1.0) -> dict[str, float]:
    """How busy the CPUs are before we start anything: other people's work skews every number."""
    before = cpu_times()
    time.sleep(seconds)
    return busy_percent(before, cpu_times(), cpus)


def wait_for_idle(cpus: Sequence[int], limit: float, timeout: float) -> dict[str, float]:
    """Sample background load until every CPU is under C{limit}% or C{timeout} s have passed."""
    deadline = time.monotonic() + timeout
    busy = background_busy(cpus)
    while max(busy.values()) >= limit and time.monotonic() < deadline:
        print(f"waiting for an idle machine: {busy}", flush=True)
        busy = background_busy(cpus, 5.0)
    return busy


def user_system_seconds(pid: int) -> tuple[float, float]:
    """The user and system CPU seconds of process C{pid} so far, every thread of it (not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) used so far by one process alone (not its children)."""
    return sum(user_system_seconds(pid))


def group_stats(pgid: int) -> Iterator[tuple[int, list[str]]]:
    """Each live member of one process group: its pid and its /proc stat fields after "pid (comm)"
    (state ppid pgrp ...; utime stime cutime cstime are the fields at 11-14)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process went away while we looked
        if int(fields[2]) == pgid:
            yield int(stat.parent.name), fields


def group_cpu_seconds(pgid: int) -> float:
    """CPU seconds (user + system) used so far by one process group.

    Counts the live members, plus the children they have reaped (a forking
    server's finished children), so per-connection forks are not lost.
    """
    total = sum(sum(int(v) for v in fields[11:15]) for _, fields in group_stats(pgid))
    return total / os.sysconf("SC_CLK_TCK")
