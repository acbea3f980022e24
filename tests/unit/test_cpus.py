"""Tests for L{ingress.process.cpus}: what --workers auto means."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ingress.process.cpus import available_cpus, cgroup_quota, worker_count


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


@pytest.mark.parametrize(("value", "count"), [("1", 1), ("4", 4)])
def test_worker_count(value: str, count: int) -> None:
    assert worker_count(value) == count


@pytest.mark.parametrize("value", ["0", "-1", "two", ""])
def test_worker_count_refuses_what_is_not_a_count(value: str) -> None:
    with pytest.raises(ValueError):
        worker_count(value)
