"""When an ACME certificate is ordered again (ingress.acme.schedule): renewal times and the wait after a failure."""

from __future__ import annotations

import datetime

import pytest

from ingress.acme.schedule import FIRST_BACKOFF, LAST_BACKOFF, Backoff, Pause, failure_wait, next_renewal_poll, pause_of, pause_text, renewal_at, retry_after_seconds

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)


def test_without_renewal_information_a_certificate_is_renewed_at_two_thirds_of_its_lifetime() -> None:
    assert renewal_at(T0, T0 + 90 * DAY, None) == T0 + 60 * DAY


def test_the_server_s_suggested_time_is_used_when_it_is_before_five_sixths_of_the_lifetime() -> None:
    assert renewal_at(T0, T0 + 90 * DAY, T0 + 50 * DAY) == T0 + 50 * DAY
    assert renewal_at(T0, T0 + 90 * DAY, T0 - DAY) == T0 - DAY  # a window in the past (a revoked certificate): at once


def test_a_suggested_time_later_than_five_sixths_of_the_lifetime_is_cut_there() -> None:
    """Pebble's window of a short certificate runs to its expiry: a renewal there would leave no time to retry."""
    assert renewal_at(T0, T0 + datetime.timedelta(seconds=90), T0 + datetime.timedelta(seconds=89)) == T0 + datetime.timedelta(seconds=75)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None), ("", None), ("120", 120.0), (" 7 ", 7.0), ("soon", None),
        ("Thu, 01 Jan 2026 00:02:00 GMT", 120.0), ("Wed, 31 Dec 2025 23:00:00 GMT", 0.0),
    ],
)
def test_retry_after_is_seconds_or_an_http_date(header: str | None, expected: float | None) -> None:
    assert retry_after_seconds(header, T0) == expected


def test_the_wait_is_the_backoff_or_longer_when_the_server_asks() -> None:
    assert failure_wait(30.0, None, False) == 30.0
    assert failure_wait(30.0, 7.0, True) == 30.0  # never shorter than the backoff
    assert failure_wait(30.0, 120.0, True) == 120.0
    assert failure_wait(30.0, None, True) == LAST_BACKOFF  # rateLimited naming no time: an hour


def test_backoff_doubles_from_thirty_seconds_to_an_hour_per_key_and_a_success_starts_over() -> None:
    now = [0.0]
    backoff = Backoff(clock=lambda: now[0])
    assert backoff.remaining("a") == 0.0
    waits = [backoff.failed("a") for _ in range(9)]
    assert waits == [30.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 3600.0, 3600.0]
    assert backoff.remaining("a") == 3600.0 and backoff.remaining("b") == 0.0
    now[0] = 3599.0
    assert backoff.remaining("a") == 1.0
    backoff.succeeded("a")
    assert backoff.remaining("a") == 0.0 and backoff.failed("a") == FIRST_BACKOFF
    assert backoff.failed("b", retry_after=500.0) == 500.0 and backoff.failed("b") == 60.0  # the server's wait does not double the backoff


def test_a_kept_pause_is_taken_up_by_a_new_process_and_its_failure_count_goes_on() -> None:
    """A restart or a new leader (a new Backoff) reads the kept wait: no order before its end, and the next failure doubles on from it."""
    now = [1_000_000.0]
    before = Backoff(clock=lambda: now[0])
    assert before.failed("a") == 30.0 and before.failed("a") == 60.0
    kept = pause_text(before.pause("a"), ("a.example.com",))  # type: ignore[arg-type]
    now[0] += 20.0  # the process dies, another starts 20 s later
    after = Backoff(clock=lambda: now[0])
    assert after.remaining("a") == 0.0  # it knows nothing until it reads what was kept
    pause = pause_of(kept, ("a.example.com",))
    assert pause == Pause(1_000_060.0, 2)
    after.restore("a", pause)
    assert after.remaining("a") == 40.0
    now[0] += 40.0
    assert after.remaining("a") == 0.0 and after.failed("a") == 120.0  # the third failure in a row: 120 s, not 30
    after.restore("a", Pause(now[0] - 5.0, 1))  # an older kept pause does not replace what this process knows
    assert after.remaining("a") == 120.0


@pytest.mark.parametrize(
    "text",
    ["", "{", "[]", '{"hosts": "a.example.com", "until": "soon", "failures": 1}', '{"hosts": "a.example.com", "until": "2026-01-01T00:00:00", "failures": 1}',
     '{"hosts": "a.example.com", "until": "2026-01-01T00:00:00+00:00", "failures": 0}', '{"hosts": "b.example.com", "until": "2026-01-01T00:00:00+00:00", "failures": 1}'],
)
def test_a_kept_pause_that_is_unreadable_or_for_other_hosts_is_none(text: str) -> None:
    assert pause_of(text, ("a.example.com",)) is None


def test_a_kept_pause_is_json_with_its_hosts_a_utc_time_and_the_failures() -> None:
    text = pause_text(Pause(T0.timestamp(), 3), ("a.example.com", "b.example.com"))
    assert text == '{"failures": 3, "hosts": "a.example.com,b.example.com", "until": "2026-01-01T00:00:00+00:00"}'
    assert pause_of(text, ("a.example.com", "b.example.com")) == Pause(T0.timestamp(), 3)


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [
        (datetime.timedelta(hours=6), datetime.timedelta(hours=6)),  # Pebble's and Let's Encrypt's: at it
        (datetime.timedelta(seconds=5), datetime.timedelta(minutes=1)),  # never more often than a minute
        (-DAY, datetime.timedelta(minutes=1)),  # a time in the past: the same
        (30 * DAY, DAY),  # never less often than a day
        (None, datetime.timedelta(hours=6)),  # no Retry-After: six hours
    ],
)
def test_the_renewal_window_is_asked_for_again_at_the_retry_after_bounded_to_a_minute_and_a_day(
    retry_after: datetime.timedelta | None, expected: datetime.timedelta,
) -> None:
    renew_at = T0 + 60 * DAY
    assert next_renewal_poll(T0, T0 + retry_after if retry_after is not None else None, renew_at) == T0 + expected


def test_no_renewal_window_is_asked_for_after_the_renewal() -> None:
    assert next_renewal_poll(T0, T0 + datetime.timedelta(hours=6), T0 + datetime.timedelta(hours=1)) is None
    assert next_renewal_poll(T0, T0 + datetime.timedelta(seconds=1), T0 + datetime.timedelta(seconds=30)) is None  # the minute's floor is after it
