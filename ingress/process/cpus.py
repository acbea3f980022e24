# -*- test-case-name: tests.unit.test_cpus -*-
"""
How many worker processes C{--workers auto} means: the CPUs this process may use.

That is the CPUs it may run on (C{sched_getaffinity}: a cpuset, C{taskset},
Kubernetes' static CPU manager) capped by a cgroup v2 CPU quota (C{cpu.max}:
a Kubernetes CPU limit of 2 is "200000 100000", two CPUs' worth of time
whatever the node has), or on a node with cgroup v1 hierarchies by its CFS
quota (C{cpu.cfs_quota_us} over C{cpu.cfs_period_us}: the same limit, -1
when there is none), and at least 1.  More workers than that would only
contend for the same CPU time.
"""

from __future__ import annotations

import math
import os
from typing import Optional

CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"
CGROUP_V1_CPU = "/sys/fs/cgroup/cpu"  # runc mounts the container's own cgroup of the cpu controller here


def available_cpus(cpu_max_path: str = CGROUP_CPU_MAX, v1_path: str = CGROUP_V1_CPU) -> int:
    """The CPUs this process may use: affinity, capped by the cgroup quota (v2, else v1), at least 1."""
    count = len(os.sched_getaffinity(0))
    quota = cgroup_quota(cpu_max_path)
    if quota is None and not os.path.exists(cpu_max_path):
        quota = cgroup_v1_quota(v1_path)
    if quota is not None:
        count = min(count, quota)
    return max(1, count)


def cgroup_quota(cpu_max_path: str = CGROUP_CPU_MAX) -> Optional[int]:
    """CPUs' worth of time the cgroup v2 quota allows (rounded up), or None when unlimited or unknown."""
    try:
        with open(cpu_max_path) as f:
            quota, _, period = f.read().strip().partition(" ")
    except OSError:
        return None
    if quota == "max" or not quota.isdigit() or not period.isdigit() or int(period) == 0:
        return None
    return max(1, math.ceil(int(quota) / int(period)))


def cgroup_v1_quota(directory: str = CGROUP_V1_CPU) -> Optional[int]:
    """CPUs' worth of time a cgroup v1 CFS quota allows (rounded up), or None when unlimited (-1) or unknown."""
    try:
        with open(os.path.join(directory, "cpu.cfs_quota_us")) as quota_file, open(os.path.join(directory, "cpu.cfs_period_us")) as period_file:
            quota, period = quota_file.read().strip(), period_file.read().strip()
    except OSError:
        return None
    if not quota.isdigit() or not period.isdigit() or int(period) == 0:
        return None  # -1: no quota
    return max(1, math.ceil(int(quota) / int(period)))


def worker_count(value: str) -> int:
    """--workers: a positive number, or auto (L{available_cpus}); ValueError otherwise."""
    if value == "auto":
        return available_cpus()
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{value!r} is not a positive number or auto")
    return int(value)
