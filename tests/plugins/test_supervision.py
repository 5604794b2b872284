"""The owner restart schedule: 5, 15, 45, 120, 300 s, then every 300 s; ten minutes of
life starts it over."""

from __future__ import annotations

from skulk_core.plugins.supervision import HEALTHY_LIFETIME_SECONDS, Backoff, after_exit


def test_the_waits_grow_then_hold_at_five_minutes() -> None:
    backoff, now, delays = Backoff(), 1000.0, []
    for _ in range(8):
        backoff = after_exit(backoff, started_at=now, exited_at=now + 1)
        delays.append(backoff.next_start_at - (now + 1))
        now = backoff.next_start_at
    assert delays == [5, 15, 45, 120, 300, 300, 300, 300]


def test_ten_minutes_of_life_starts_the_waits_over() -> None:
    failing = Backoff(failures=4)
    assert after_exit(failing, 0.0, HEALTHY_LIFETIME_SECONDS - 1).delay == 300
    reset = after_exit(failing, 0.0, HEALTHY_LIFETIME_SECONDS)
    assert (reset.failures, reset.delay, reset.next_start_at) == (
        1,
        5,
        HEALTHY_LIFETIME_SECONDS + 5,
    )
