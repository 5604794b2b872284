"""``python -m skulk_daemon`` with two test seams for the steward's three-node tests.

- A scripted brain: a steward turn whose question ends with ``script: [...]`` (a JSON
  list of ``{"tool": ..., "arguments": {...}}`` steps) takes its steps from that list
  instead of generating them, and answers ``scripted answer``. Everything around the
  steps is the real harness: the steward must be placed and ready, the baseline, the
  read tools with their node-name resolution and peer proxying, the proposal tools with
  their target resolution, the trace. (Whether the brain picks a sensible step is the
  model's part, tested with the real model in ``tests/daemon/test_steward.py``.)
- ``SKULK_TEST_HOLD_AFTER_ARMING=1``: the master's proposal dispatcher records an
  approval ``dispatched`` (armed, with its exact command id) and then never sends the
  effect, as a master that dies between the two would.

Run as ``python -m tests.daemon.steward_cluster_daemon``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any, Final

from skulk_daemon.chat.task import ChatTask
from skulk_daemon.chat.turn import ContentDelta, TurnEvent
from skulk_daemon.serve import main
from skulk_daemon.steward import turn
from skulk_daemon.steward.dispatch import ProposalDispatcher

STEWARD_CLUSTER_LAUNCHER: Final = ("-m", "tests.daemon.steward_cluster_daemon")
SCRIPT_MARKER: Final = "script:"
HOLD_ENV: Final = "SKULK_TEST_HOLD_AFTER_ARMING"

_real_arm = ProposalDispatcher._arm


async def _scripted(
    self: turn.StewardTurn, task: ChatTask, totals: Any
) -> AsyncIterator[TurnEvent]:
    _, _, script = self.question.partition(SCRIPT_MARKER)
    steps: list[dict[str, Any]] = json.loads(script)
    if task.response_format is not None:
        done = len(self.evidence) - 1  # the baseline is the first piece of evidence
        step = steps[done] if done < len(steps) else {"tool": "answer"}
        yield ContentDelta(json.dumps(step))
        return
    yield ContentDelta("scripted answer")
    yield turn._end(totals)


async def _arm_then_hold(self: ProposalDispatcher, *args: Any) -> None:
    await _real_arm(self, *args)
    await asyncio.Event().wait()  # the effect is never sent


if __name__ == "__main__":
    real_generate = turn.StewardTurn._generate

    def _generate(self: turn.StewardTurn, task: ChatTask, totals: Any) -> AsyncIterator[TurnEvent]:
        if SCRIPT_MARKER in self.question:
            return _scripted(self, task, totals)
        return real_generate(self, task, totals)

    turn.StewardTurn._generate = _generate  # type: ignore[method-assign]
    if os.environ.get(HOLD_ENV) == "1":
        ProposalDispatcher._arm = _arm_then_hold  # type: ignore[method-assign,assignment]
    sys.exit(main())
