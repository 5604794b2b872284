"""How many realtime sessions one source address may hold at once.

Each realtime session holds at most one provider call, and each call the only slot of
an instance, so a source with as many sockets as there are instances could take every
slot. One remote address (an IPv6 /64, as the HTTP server counts it) gets at most
:data:`MAX_SESSIONS_PER_SOURCE` sessions; a socket past that is closed with the spec's
retryable 1013 before it opens a session. Local peers (loopback, a Unix socket) are the
operator's own and are not counted.
"""

from __future__ import annotations

from collections import Counter
from typing import Final

MAX_SESSIONS_PER_SOURCE: Final = 4


class SessionSources:
    """The live sessions per source address (one event loop; no lock needed)."""

    def __init__(self, limit: int = MAX_SESSIONS_PER_SOURCE) -> None:
        self._limit = limit
        self._live: Counter[str] = Counter()

    def acquire(self, source: str | None) -> bool:
        """Count one more session for ``source``; False (nothing counted) past the cap.
        ``None`` (a local peer) is always admitted."""
        if source is None:
            return True
        if self._live[source] >= self._limit:
            return False
        self._live[source] += 1
        return True

    def release(self, source: str | None) -> None:
        if source is None:
            return
        self._live[source] -= 1
        if self._live[source] <= 0:
            del self._live[source]
