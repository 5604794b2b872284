"""Bounded reordering of a stream's numbered frames.

Frames of one call and direction are numbered from 0. A receiver releases them
strictly in order; a frame that arrives early waits, but only within a window: one
further ahead than the window, or a number already seen, means frames were lost or
duplicated, and the stream cannot be trusted any more (:class:`SequenceGap`).
"""

from __future__ import annotations

from typing import Final, Generic, TypeVar

REORDER_WINDOW: Final = 64

T = TypeVar("T")


class SequenceGap(ValueError):
    """A frame that cannot be placed: a duplicate, or one past the reorder window."""


class FrameOrder(Generic[T]):
    def __init__(self, window: int = REORDER_WINDOW, start: int = 0) -> None:
        if window < 1:
            raise ValueError("the reorder window holds at least one frame")
        self._window = window
        self._expected = start
        self._early: dict[int, T] = {}

    @property
    def expected(self) -> int:
        """The next sequence number to release."""
        return self._expected

    @property
    def waiting(self) -> int:
        """How many early frames are held back."""
        return len(self._early)

    def accept(self, sequence: int, item: T) -> list[T]:
        """Take frame ``sequence``; return the frames now releasable, in order."""
        if sequence < self._expected or sequence in self._early:
            raise SequenceGap(f"frame {sequence} arrived twice")
        if sequence >= self._expected + self._window:
            raise SequenceGap(
                f"frame {sequence} arrived while {self._expected} is still missing "
                f"(more than {self._window} frames apart)"
            )
        self._early[sequence] = item
        released: list[T] = []
        while self._expected in self._early:
            released.append(self._early.pop(self._expected))
            self._expected += 1
        return released
