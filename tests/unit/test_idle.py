"""
The connection timers of ingress.proxy.idle on a fake clock: L{Deadline}, one per HTTP/1.1
connection, and L{GroupDeadline}, one per HTTP/2 stream on its connection's L{DeadlineGroup},
which must expire exactly as a L{Deadline} of its own would.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from ingress.proxy.idle import Deadline, DeadlineGroup, GroupDeadline


def advance(clock: Clock, seconds: int) -> None:
    """A second at a time: Clock.advance runs every call due at the new time, and each would read that time."""
    for _ in range(seconds):
        clock.advance(1)


def expiries(clock: Clock) -> tuple[list[tuple[float, str]], object]:
    """A list the expiries go to, as (time, kind), and the callback that appends them."""
    seen: list[tuple[float, str]] = []
    return seen, lambda kind: seen.append((clock.seconds(), kind))


def test_a_deadline_expires_once_at_the_time_last_set_or_pushed() -> None:
    clock = Clock()
    seen, on_expiry = expiries(clock)
    deadline = Deadline(clock, on_expiry)  # type: ignore[arg-type]
    deadline.set(10, "upstream")
    clock.advance(6)
    deadline.push(10)  # progress: now due at 16, the call still at 10
    clock.advance(4)
    assert seen == [] and len(clock.getDelayedCalls()) == 1  # fired early, asleep for the rest
    clock.advance(6)
    assert seen == [(16, "upstream")] and clock.getDelayedCalls() == []


def test_streams_of_a_connection_share_one_delayed_call_and_each_expires_at_its_own_time() -> None:
    clock = Clock()
    group = DeadlineGroup(clock)
    seen, on_expiry = expiries(clock)
    members = [GroupDeadline(group, lambda kind, n=n: on_expiry(f"{kind}-{n}")) for n in range(100)]  # type: ignore[operator]
    for n, member in enumerate(members):
        member.set(60 + n, "upstream")
    assert len(clock.getDelayedCalls()) == 1
    for member in members[50:]:
        member.cancel()  # answered: never expires
    members[0].push(100)  # progress on stream 0: due at 100
    advance(clock, 200)
    assert sorted(seen) == sorted([(60 + n, f"upstream-{n}") for n in range(1, 50)] + [(100, "upstream-0")])
    assert clock.getDelayedCalls() == []


def test_an_earlier_deadline_moves_the_shared_call_forward() -> None:
    clock = Clock()
    group = DeadlineGroup(clock)
    seen, on_expiry = expiries(clock)
    GroupDeadline(group, on_expiry).set(60, "upstream")  # type: ignore[arg-type]
    GroupDeadline(group, on_expiry).set(5, "send")  # type: ignore[arg-type]
    clock.advance(5)
    assert seen == [(5, "send")]


def test_a_closed_connection_expires_nothing_and_leaves_no_call() -> None:
    clock = Clock()
    group = DeadlineGroup(clock)
    seen, on_expiry = expiries(clock)
    first = GroupDeadline(group, lambda kind: group.cancel())  # its expiry ends the connection
    second = GroupDeadline(group, on_expiry)  # type: ignore[arg-type]
    first.set(10, "upstream")
    second.set(10, "upstream")
    clock.advance(10)
    assert seen == [] and clock.getDelayedCalls() == []
    second.set(5, "upstream")  # a stream's timer set after its connection closed does not revive it
    assert clock.getDelayedCalls() == []
    advance(clock, 10)
    assert seen == []


# One step of a stream's timer: (member, operation, seconds, kind), or None: the clock advances.
steps = st.lists(
    st.one_of(
        st.tuples(st.integers(0, 3), st.sampled_from(["set", "push", "cancel"]), st.integers(1, 30), st.sampled_from(["body", "upstream", "send"])),
        st.integers(1, 20),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_a_group_deadline_expires_exactly_as_a_deadline_of_its_own(script: list[object]) -> None:
    """Any sequence of sets, pushes, cancels and waits: the same expiries, at the same times, of the same kinds."""
    own_clock, group_clock = Clock(), Clock()
    own_seen: list[tuple[float, int, str]] = []
    group_seen: list[tuple[float, int, str]] = []
    own = [Deadline(own_clock, lambda kind, n=n: own_seen.append((own_clock.seconds(), n, kind))) for n in range(4)]
    group = DeadlineGroup(group_clock)
    grouped = [GroupDeadline(group, lambda kind, n=n: group_seen.append((group_clock.seconds(), n, kind))) for n in range(4)]
    waits: dict[int, int] = {}  # each member's wait, as last set
    for step in script:
        if isinstance(step, int):
            advance(own_clock, step)
            advance(group_clock, step)
            continue
        n, operation, seconds, kind = step  # type: ignore[misc]
        if operation == "push":  # as the exchange pushes: its wait again, from now (never sooner than set)
            if n not in waits:
                continue
            seconds = waits[n]
        elif operation == "set":
            waits[n] = seconds
        for timer in (own[n], grouped[n]):
            if operation == "set":
                timer.set(seconds, kind)
            elif operation == "push":
                timer.push(seconds)
            else:
                timer.cancel()
    advance(own_clock, 100)
    advance(group_clock, 100)
    assert sorted(group_seen) == sorted(own_seen)  # (the order of two due at the same time is no contract)
    assert len(group_clock.getDelayedCalls()) <= 1
