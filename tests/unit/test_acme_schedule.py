"""When an ACME certificate is ordered again (ingress.acme.schedule): renewal times and the wait after a failure."""

from __future__ import annotations

import datetime

import pytest

from ingress.acme.schedule import FIRST_BACKOFF, LAST_BACKOFF, Backoff, failure_wait, renewal_at, retry_after_seconds

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
