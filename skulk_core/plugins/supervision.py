"""When a supervised owner starts again after it exits without being asked to.

Waits of 5, 15, 45, 120 and 300 seconds, then every 300 seconds for as long as it keeps
failing; a lifetime that ran for ten minutes starts the waits over. A restart never
replays work: each lifetime starts the owner over the same selection.
"""

from __future__ import annotations

from typing import Final

import msgspec

BACKOFF_SECONDS: Final = (5.0, 15.0, 45.0, 120.0, 300.0)
STEADY_SECONDS: Final = 300.0
HEALTHY_LIFETIME_SECONDS: Final = 600.0


class Backoff(msgspec.Struct, frozen=True, kw_only=True):
    failures: int = 0
    """Consecutive failed lifetimes (zero before the first exit)."""
    next_start_at: float = 0.0
    """Monotonic time before which no new lifetime starts."""

    @property
    def delay(self) -> float:
        """The wait the current failure count asks for."""
        if self.failures <= 0:
            return 0.0
        if self.failures <= len(BACKOFF_SECONDS):
            return BACKOFF_SECONDS[self.failures - 1]
        return STEADY_SECONDS


def after_exit(backoff: Backoff, started_at: float, exited_at: float) -> Backoff:
    """The schedule after a lifetime that started and exited at these times."""
    failures = 1 if exited_at - started_at >= HEALTHY_LIFETIME_SECONDS else backoff.failures + 1
    scheduled = Backoff(failures=failures)
    return Backoff(failures=failures, next_start_at=exited_at + scheduled.delay)
