"""
CPU accounting from /proc: how busy each CPU was (another helper's work on a shared machine skews
every figure, and a run says so), and the user and system CPU of a process and of its process group
(twingress's primary and workers, nginx's master and workers: every child is started in a session
of its own, so its process group is exactly the contender).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path


def cpu_times() -> dict[int, tuple[int, int]]:
    """Per CPU: (total jiffies, idle + iowait jiffies) from /proc/stat."""
    times: dict[int, tuple[int, int]] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            numbers = [int(v) for v in values[:8]]
            times[int(name[3:])] = (sum(numbers), numbers[3] + numbers[4])
    return times


def busy_percent(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], cpus: Sequence[int]) -> dict[str, float]:
    """How busy each of C{cpus} was between two L{cpu_times} samples, in percent."""
    busy = {}
    for cpu in cpus:
        total = after[cpu][0] - before[cpu][0]
        idle = after[cpu][1] - before[cpu][1]
        busy[f"cpu{cpu}"] = round(100.0 * (total - idle) / total, 1) if total else 0.0
    return busy


def background_busy(cpus: Sequence[int], seconds: float = 1.0) -> dict[str, float]:
    """How busy C{cpus} are before the run starts anything."""
    before = cpu_times()
    time.sleep(seconds)
    return busy_percent(before, cpu_times(), cpus)


def cpu_list(spec: str) -> list[int]:
    """A taskset list ("0", "0-2", "0,3") as CPU numbers."""
    cpus: list[int] = []
    for part in filter(None, spec.split(",")):
        low, _, high = part.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return cpus


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields after "pid (comm)": state ppid pgrp ...; utime stime cutime cstime at 11-14."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def user_system_seconds(pid: int) -> tuple[float, float]:
    """The user and system CPU seconds of process C{pid} so far, every thread of it."""
    fields = _stat_fields(pid)
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def group_pids(pgid: int) -> list[int]:
    """The live members of process group C{pgid}."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                pids.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue  # gone while we looked
    return pids


def group_user_system(pgid: int) -> tuple[float, float]:
    """User and system CPU seconds of a process group's live members, plus what they reaped of their children's."""
    user = system = 0
    for pid in group_pids(pgid):
        try:
            fields = _stat_fields(pid)
        except (OSError, IndexError):
            continue
        user += int(fields[11]) + int(fields[13])
        system += int(fields[12]) + int(fields[14])
    ticks = os.sysconf("SC_CLK_TCK")
    return user / ticks, system / ticks
