"""The informers' retry schedule (L{ingress.sources.kube.reflector.retry_delay}): pure, no apiserver."""

from __future__ import annotations

import pytest

from ingress.sources.kube.client import APIError
from ingress.sources.kube.reflector import BACKOFF_CAP, FAST_RETRY_SECONDS, FAST_RETRY_WINDOW, retry_delay

AWAY = [ConnectionRefusedError("refused"), APIError(503, "unavailable"), APIError(504, "Too large resource version"), APIError(429, "slow down")]


@pytest.mark.parametrize("error", AWAY, ids=["refused", "503", "504", "429"])
def test_an_apiserver_away_is_retried_about_once_a_second_in_the_first_minute(error: Exception) -> None:
    for _ in range(50):
        delay = retry_delay(error, BACKOFF_CAP, failing_for=FAST_RETRY_WINDOW - 1)
        assert FAST_RETRY_SECONDS[0] <= delay <= FAST_RETRY_SECONDS[1]


@pytest.mark.parametrize("error", AWAY, ids=["refused", "503", "504", "429"])
def test_a_lasting_outage_backs_off(error: Exception) -> None:
    assert retry_delay(error, 16.0, failing_for=FAST_RETRY_WINDOW + 1) >= 16.0 * 0.8


@pytest.mark.parametrize("status", [401, 403, 404])
def test_a_refusal_backs_off_from_the_start(status: int) -> None:
    """A kind that is not installed (404) or not granted (403) is not fixed by asking every second."""
    assert retry_delay(APIError(status, "no"), 8.0, failing_for=0.0) >= 8.0 * 0.8
