"""
Two contenders' CPU per request, timed in turn in short slices, and their ratio with a confidence
interval: the default way two contenders are compared.

Why: a proxy started afresh per round, rounds a minute apart, measures this guest's drift as much as
the proxy (its speed moves by a fifth from one minute to the next).  Here both contenders start once
and stay up, pinned to the same CPUs; the load goes to one of them for a slice, then to the other,
and each pair's ratio comes from two slices seconds apart, so most of the drift falls on both alike.
Each pair alternates its order (AB, then BA), so a drift within a pair does not always favour one
side.  The pairs' ratios give their median a confidence interval that assumes nothing about how
they are distributed (the binomial order statistics of the median), and a sign test says how often
the first was below the second.  A slice's CPU is user + system of the contender's whole process
group (a primary and its workers too), from /proc before and after, over the requests answered
2xx; the contender not under load sleeps in its event loop.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import comb
from typing import Any, Optional

from bench.lib.cpu import group_user_system
from bench.lib.load import Served
from bench.lib.procs import BenchFailed


@dataclass
class Contender:
    """One side: its process group, and how to load it for a number of seconds."""

    name: str
    pgid: int
    load: Callable[[int], Served]  # seconds -> what was served
    slices: list[float] = field(default_factory=list)  # CPU µs per request (user + system), slice by slice
    system: list[float] = field(default_factory=list)  # of which system (the kernel's work for it)


def slice_cpu(contender: Contender, seconds: int) -> tuple[float, float]:
    """
    One slice: the load to C{contender} alone, its user and system CPU (µs) per request answered.

    A slice that answered nothing and failed nothing (h2load's window closed before a response
    came back, on a machine busy with other work) is run again, twice at most; one that failed is not.
    """
    for _ in range(3):
        user0, system0 = group_user_system(contender.pgid)
        served = contender.load(seconds)
        user1, system1 = group_user_system(contender.pgid)
        if served.ok or served.failed:
            break
    if served.failed or not served.ok:
        raise BenchFailed(f"{contender.name}: {served.failed} failed, {served.ok} answered")
    return 1e6 * (user1 - user0) / served.ok, 1e6 * (system1 - system0) / served.ok


def run_pairs(first: Contender, second: Contender, pairs: int, seconds: int, say: Callable[[str], None] = print) -> list[float]:
    """C{pairs} pairs of slices, the order reversed every other pair: first's CPU over second's, pair by pair."""
    ratios = []
    for number in range(pairs):
        for contender in (first, second) if number % 2 == 0 else (second, first):
            user, system = slice_cpu(contender, seconds)
            contender.slices.append(user + system)
            contender.system.append(system)
        ratios.append(first.slices[-1] / second.slices[-1] if second.slices[-1] else float("inf"))
        say(f"==> pair {number + 1}: {first.name} {first.slices[-1]:.1f} us, {second.name} {second.slices[-1]:.1f} us, ratio {ratios[-1]:.3f}")
    return ratios


def median_interval(values: Sequence[float], confidence: float = 0.95) -> Optional[tuple[float, float]]:
    """
    A distribution-free confidence interval of the median: the k-th smallest and k-th largest value,
    k the largest with P(X < k) <= (1 - confidence) / 2 for X ~ Binomial(n, 1/2).  None when there
    are too few values for C{confidence} (fewer than 6 at 95%).
    """
    n, tail = len(values), (1 - confidence) / 2
    cumulative, k = 0.0, 0
    while k < n and cumulative + comb(n, k) / 2**n <= tail:
        cumulative += comb(n, k) / 2**n
        k += 1
    if k == 0:
        return None
    ordered = sorted(values)
    return ordered[k - 1], ordered[n - k]


def sign_test(ratios: Sequence[float]) -> tuple[int, int, float]:
    """(pairs below 1, pairs not equal to 1, the two-sided p of as lopsided a split were each side equally likely)."""
    below = sum(1 for r in ratios if r < 1)
    n = sum(1 for r in ratios if r != 1)
    tail = sum(comb(n, j) for j in range(min(below, n - below) + 1)) / 2**n if n else 1.0
    return below, n, min(1.0, 2 * tail)


def figure(kind: str, first: Contender, second: Contender, ratios: Sequence[float], confidence: float) -> dict[str, Any]:
    """One comparison as the results file keeps it: both sides' slices and medians, the ratio's median, interval and sign test."""
    interval = median_interval(ratios, confidence)
    below, n, p = sign_test(ratios)
    return {"kind": kind, "first": first.name, "second": second.name,
            "first_us": round(statistics.median(first.slices), 2), "second_us": round(statistics.median(second.slices), 2),
            "first_system_us": round(statistics.median(first.system), 2), "second_system_us": round(statistics.median(second.system), 2),
            "ratio": round(statistics.median(ratios), 4), "interval": [round(v, 4) for v in interval] if interval else None,
            "confidence": confidence, "below_1": below, "pairs": len(ratios), "sign_test_p": round(p, 4),
            "ratios": [round(r, 4) for r in ratios], "slices": {first.name: first.slices, second.name: second.slices}}


def describe(f: dict[str, Any]) -> str:
    """One line of a L{figure}."""
    within = f"{f['confidence']:.0%} interval {f['interval'][0]:.3f} to {f['interval'][1]:.3f}" if f["interval"] else \
        f"too few pairs for a {f['confidence']:.0%} interval"
    return (f"{f['kind']:<9} {f['first']} {f['first_us']:.1f} us / {f['second']} {f['second_us']:.1f} us per request: "
            f"median {f['ratio']:.3f} ({within}); below 1 in {f['below_1']} of {f['pairs']} pairs (sign test p = {f['sign_test_p']:.2g})")
