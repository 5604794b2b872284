"""Resubmitting what a healed partition would otherwise lose (the effectful half of
:mod:`skulk_core.state.recovery`).

When this node installs the winning side's snapshot, the changes it originated in
the losing history are submitted again to the master, one at a time and in their
original order; each outcome (applied, or refused with the reason) is logged and
kept for ``GET /v1/diagnostics/node`` (``partitionRecoveries``). Nothing is dropped
silently.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Final

from skulk_core.state.commands import Command
from skulk_core.state.recovery import Replay

log = logging.getLogger(__name__)

MAX_KEPT: Final = 128

Submit = Callable[[Command], Awaitable[object]]


class PartitionRecovery:
    def __init__(self) -> None:
        self.outcomes: deque[dict[str, Any]] = deque(maxlen=MAX_KEPT)

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
