"""Ids short enough for an 80-column table, the way git shortens commit hashes.

An instance or runner id is a 36-character UUID: in a table of five columns it wraps
or is cut at 80 columns. Each is shown as its shortest prefix of at least
:data:`MIN_PREFIX` characters that no other id on screen shares (the commands that
take an id accept such a prefix); ``--wide`` shows them whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

MIN_PREFIX: Final = 8
NODE_PREFIX: Final = 12
"""Node ids are libp2p peer ids, which all begin ``12D3KooW``: 8 characters say nothing."""


def unique_prefixes(ids: Iterable[str], minimum: int = MIN_PREFIX) -> dict[str, str]:
    """Each id mapped to its shortest prefix (at least ``minimum`` long) that is the
    prefix of no other id in ``ids``; an id that is a prefix of another stays whole."""
    every = sorted(set(ids))
    shortened: dict[str, str] = {}
    for index, full in enumerate(every):
        neighbours = every[max(0, index - 1) : index] + every[index + 1 : index + 2]
        # In sorted order, the longest prefix shared with any other id is shared with a
        # neighbour; one character more than that is unique.
        shared = max((_common(full, other) for other in neighbours), default=0)
        shortened[full] = full[: max(minimum, shared + 1)]
    return shortened


def _common(a: str, b: str) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


class IdShortener:
    """Shortens the ids of one screen; ``wide`` keeps them whole."""

    def __init__(
        self, ids: Iterable[str], *, wide: bool = False, minimum: int = MIN_PREFIX
    ) -> None:
        self._wide = wide
        self._prefixes = {} if wide else unique_prefixes(ids, minimum)

    def __call__(self, full: str) -> str:
        return full if self._wide else self._prefixes.get(full, full)
