"""When each on-demand instance was last used, as this node sees it.

The master's :class:`~skulk_daemon.placement.keep_alive.KeepAliveAgent` decides
unloads; this is what every node can tell a client about them (Ollama's
``/api/ps`` ``expires_at``). The master hears every task it orders
(:func:`~skulk_core.placement.keep_alive.note_events`); every node, the master
included, also restarts an instance's clock whenever an applied State shows it busy
or loading (:func:`~skulk_core.placement.keep_alive.refresh`), so a follower's
answer matches the master's to within one replicated batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from skulk_core.ids import InstanceId
from skulk_core.placement.keep_alive import expiries, note_events, refresh
from skulk_core.state.events import IndexedEvent
from skulk_core.state.state import State
from skulk_daemon.node.node import Node


class IdleClocks:
    def __init__(
        self,
        node: Node,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._node = node
        self._clock = clock
        self._wall = wall
        self._last_active: dict[InstanceId, float] = {}
        node.on_applied(self._on_applied)
        node.on_ordered(self._on_ordered)

    def _on_applied(self) -> None:
        self._last_active = refresh(self._node.state, self._last_active, self._clock())

    def _on_ordered(self, before: State, events: list[IndexedEvent]) -> None:
        self._last_active = note_events(
            self._last_active, before, (e.event for e in events), self._clock()
        )

    def expires_at(self) -> dict[InstanceId, float | None]:
        """Each placed instance's unload time (Unix seconds) if left idle; ``None``:
        never (placed explicitly, or kept until removed)."""
        now = self._clock()
        offset = self._wall() - now
        return {
            instance_id: None if at is None else at + offset
            for instance_id, at in expiries(self._node.state, self._last_active, now).items()
        }
