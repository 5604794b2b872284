"""Resubmitting what a healed partition would otherwise lose (the effectful half of
:mod:`skulk_core.state.recovery`).

When this node installs the winning side's snapshot, the changes it originated in
the losing history are submitted again to the master, one at a time and in their
original order; each outcome (applied, or refused with the reason) is logged and
kept for ``GET /v1/diagnostics/node`` (``partitionRecoveries``). Nothing is dropped
silently.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from skulk_core.ids import NodeId
from skulk_core.state.commands import Command
from skulk_core.state.events import IndexedEvent
from skulk_core.state.recovery import LostChange, Replay, lost_changes, replay
from skulk_core.state.state import State

log = logging.getLogger(__name__)

MAX_KEPT: Final = 128
RECENT_EVENTS: Final = 4096
"""Applied events kept in memory for a healed partition's recovery."""

Submit = Callable[[Command], Awaitable[object]]


class PartitionRecovery:
    def __init__(self, node_id: NodeId, replayed: Sequence[IndexedEvent] = ()) -> None:
        self._node_id = node_id
        # The latest events applied here, whatever the log kept: what a healed
        # partition's losing side reads its own changes back from.
        self._recent: deque[IndexedEvent] = deque(replayed[-RECENT_EVENTS:], maxlen=RECENT_EVENTS)
        self._running: set[asyncio.Task[None]] = set()
        self.outcomes: deque[dict[str, Any]] = deque(maxlen=MAX_KEPT)

    def applied(self, events: Iterable[IndexedEvent]) -> None:
        self._recent.extend(events)

    def lost(self, snapshot: State) -> list[LostChange]:
        """What this node originated that ``snapshot`` (the master's history) lacks."""
        return lost_changes(self._recent, snapshot, self._node_id)

    def installed(self, snapshot: State, lost: list[LostChange], submit: Submit) -> None:
        """``snapshot`` replaced this node's history: forget it, and submit ``lost``
        again in the background."""
        self._recent.clear()
        if not lost:
            return
        log.warning(
            "the snapshot replaces %d change(s) this node made while partitioned; "
            "submitting them again",
            len(lost),
        )
        task = asyncio.get_running_loop().create_task(self.run(replay(lost, snapshot), submit))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def run(self, replays: list[Replay], submit: Submit) -> None:
        for item in replays:
            change = item.change
            outcome: dict[str, Any] = {
                "at": datetime.now(UTC).isoformat(),
                "change": change.what,
                "command": type(change.command).__name__,
                "lostIdx": change.idx,
            }
            if item.refused is not None:
                outcome.update(outcome="refused", reason=item.refused)
            else:
                try:
                    await submit(change.command)
                except Exception as exc:  # a refusal or no master: recorded, not lost
                    code = getattr(exc, "code", type(exc).__name__)
                    outcome.update(outcome="refused", reason=f"{code}: {exc}")
                else:
                    outcome.update(outcome="applied")
            self.outcomes.append(outcome)
            if outcome["outcome"] == "applied":
                log.info("partition healed: resubmitted the %s", change.what)
            else:
                log.warning(
                    "partition healed: the %s made while partitioned is refused: %s",
                    change.what,
                    outcome["reason"],
                )
