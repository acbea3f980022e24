"""
The TLS record count that lets the TLS transport stop reading without asking OpenSSL
(ingress.speedups.tlsdirect): it must count exactly the records a byte stream completes, however
the stream is cut into reads, or a read would stop early (a request left unread) or never save
anything.  Framing per RFC 8446 5.1 / RFC 5246 6.2: type, version, 16-bit length, body.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ingress.speedups.tlsdirect import RecordCounter


def record(length: int, content_type: int = 23) -> bytes:
    return bytes([content_type, 3, 3, length >> 8, length & 0xFF]) + b"x" * length


def reads(stream: bytes, cuts: list[int]) -> list[tuple[int, int]]:
    """The (start, end) of each read when C{stream} arrives cut at C{cuts}."""
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(stream)}), len(stream)]
    return list(zip(bounds, bounds[1:], strict=False))


def counts(stream: bytes, cuts: list[int]) -> list[int]:
    """What the counter says for each read when C{stream} arrives cut at C{cuts}."""
    counter = RecordCounter()
    bounds = reads(stream, cuts)
    return [counter.feed(stream[a:b]) for a, b in bounds]


def test_one_whole_record_per_read() -> None:
    counter = RecordCounter()
    assert [counter.feed(record(n)) for n in (0, 1, 200, 16_401)] == [1, 1, 1, 1]


def test_two_records_in_one_read_and_a_record_over_three_reads() -> None:
    assert counts(record(10) + record(20), []) == [2]
    stream = record(300)
    assert counts(stream, [2, 100]) == [0, 0, 1]


def test_a_header_split_across_reads() -> None:
    stream = record(5) + record(7)
    assert counts(stream, [len(record(5)) + 3]) == [1, 1]  # the second header arrives as 3 bytes, then 2 and its body
    assert counts(stream, [1, 2, 3, 4]) == [0, 0, 0, 0, 2]


def test_a_partial_record_is_not_counted_until_its_last_byte() -> None:
    stream = record(100) + record(50)
    assert counts(stream, [len(stream) - 1]) == [1, 1]


@settings(deadline=None)  # no wall-clock limit per example: CI's parallel lanes decide that, not the code
@given(
    st.lists(st.tuples(st.integers(0, 2_000), st.sampled_from([20, 21, 22, 23])), min_size=1, max_size=12),
    st.lists(st.integers(0, 30_000), max_size=20),
)
def test_any_stream_cut_anywhere_counts_each_record_once_when_its_last_byte_arrives(
    records: list[tuple[int, int]], cuts: list[int]
) -> None:
    stream = b"".join(record(length, kind) for length, kind in records)
    ends = []
    at = 0
    for length, _ in records:
        at += 5 + length
        ends.append(at)
    expected = [sum(1 for end in ends if a < end <= b) for a, b in reads(stream, cuts)]
    assert counts(stream, cuts) == expected
