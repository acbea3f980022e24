"""Tests for L{ingress.process.cpus}: what --workers auto means."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ingress.process.cpus import available_cpus, cgroup_quota, cgroup_v1_quota, worker_count


@pytest.mark.parametrize(
    ("cpu_max", "quota"),
    [("max 100000", None), ("200000 100000", 2), ("150000 100000", 2), ("50000 100000", 1), ("400000 50000", 8), ("junk", None)],
)
def test_cgroup_quota_is_cpus_worth_of_time_rounded_up(tmp_path: Path, cpu_max: str, quota: int | None) -> None:
    path = tmp_path / "cpu.max"
    path.write_text(cpu_max + "\n")
    assert cgroup_quota(str(path)) == quota


def test_no_cgroup_file_means_no_quota(tmp_path: Path) -> None:
    assert cgroup_quota(str(tmp_path / "absent")) is None


def test_auto_is_the_affinity_capped_by_the_quota(tmp_path: Path) -> None:
    affinity = len(os.sched_getaffinity(0))
    path = tmp_path / "cpu.max"
    path.write_text("100000 100000\n")
    assert available_cpus(str(path)) == 1
    path.write_text("max 100000\n")
    assert available_cpus(str(path)) == affinity


@pytest.mark.parametrize(("quota", "period", "cpus"), [("-1", "100000", None), ("100000", "100000", 1), ("150000", "100000", 2), ("200000", "100000", 2), ("x", "1", None)])
def test_a_cgroup_v1_cfs_quota_is_cpus_worth_of_time_rounded_up(tmp_path: Path, quota: str, period: str, cpus: int | None) -> None:
    """A node with cgroup v1 hierarchies (the test node's machine): a CPU limit is the cpu controller's CFS quota."""
    (tmp_path / "cpu.cfs_quota_us").write_text(quota + "\n")
    (tmp_path / "cpu.cfs_period_us").write_text(period + "\n")
    assert cgroup_v1_quota(str(tmp_path)) == cpus


def test_auto_reads_the_v1_quota_only_without_cpu_max(tmp_path: Path) -> None:
    (tmp_path / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu.cfs_period_us").write_text("100000\n")
    assert available_cpus(str(tmp_path / "absent"), str(tmp_path)) == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")  # cgroup v2 says unlimited: it wins
    assert available_cpus(str(tmp_path / "cpu.max"), str(tmp_path)) == len(os.sched_getaffinity(0))
    assert cgroup_v1_quota(str(tmp_path / "absent")) is None


@pytest.mark.parametrize(("value", "count"), [("1", 1), ("4", 4)])
def test_worker_count(value: str, count: int) -> None:
    assert worker_count(value) == count


@pytest.mark.parametrize("value", ["0", "-1", "two", ""])
def test_worker_count_refuses_what_is_not_a_count(value: str) -> None:
    with pytest.raises(ValueError):
        worker_count(value)
