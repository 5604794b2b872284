"""A settable clock for the pairing service (tests, and anything that replays time)."""

from __future__ import annotations

import time


class ManualClock:
    """A callable clock that moves only when told to: ``OperatorPairingService(clock=...)``."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
