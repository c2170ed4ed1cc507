"""The token bucket behind `tts serve --rate-limit-tokens`, on a fake clock: refill, reservation, waits, refunds."""

from __future__ import annotations

import pytest

from tts.serve.ratelimit import TokenRateLimit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_starts_full_and_refills_at_its_rate_per_second_up_to_its_size():
    clock = Clock()
    limit = TokenRateLimit(600, clock=clock)  # 10 tokens a second
    assert limit.available("k") == 600
    assert limit.reserve("k", 600) == 0 and limit.available("k") == 0  # a whole minute's worth fits once
    clock.now += 6
    assert limit.available("k") == pytest.approx(60)
    clock.now += 3600
    assert limit.available("k") == 600  # never more than the bucket


def test_each_key_has_its_own_bucket():
    limit = TokenRateLimit(600, clock=Clock())
    assert limit.reserve("a", 500) == 0
    assert limit.available("a") == 100 and limit.available("b") == 600
    assert limit.reserve("b", 500) == 0


def test_a_reservation_that_does_not_fit_says_the_whole_seconds_to_wait_and_takes_nothing():
    clock = Clock()
    limit = TokenRateLimit(600, clock=clock)
    assert limit.reserve("k", 590) == 0
    assert limit.reserve("k", 10) == 0  # exactly what is left
    assert limit.reserve("k", 5) == 1  # 0.5 s, rounded up to a whole second
    assert limit.reserve("k", 25) == 3  # 2.5 s
    assert limit.available("k") == 0
    clock.now += 2.5
    assert limit.reserve("k", 25) == 0


def test_more_than_a_minutes_tokens_is_refused_as_an_error_not_a_wait():
    limit = TokenRateLimit(600, clock=Clock())
    with pytest.raises(ValueError) as err:
        limit.reserve("k", 601)
    assert str(err.value) == "601 tokens is more than a minute's 600"


def test_refunds_go_back_to_the_bucket_up_to_its_size():
    limit = TokenRateLimit(600, clock=Clock())
    limit.reserve("k", 600)
    limit.refund("k", 1)
    assert limit.available("k") == 1
    limit.refund("k", 0)
    limit.refund("k", -5)
    assert limit.available("k") == 1
    limit.refund("k", 10_000)
    assert limit.available("k") == 600


def test_a_limit_below_one_token_a_minute_is_refused():
    assert TokenRateLimit(1, clock=Clock()).reserve("k", 1) == 0
    with pytest.raises(ValueError) as err:
        TokenRateLimit(0)
    assert str(err.value) == "per_minute must be at least 1, got 0"
