"""The steward's liveness canary: a one-token probe of the steward instance.

Run by the master's steward tick every :data:`CANARY_INTERVAL_SECONDS` while the
steward is ready. A probe that errors or exceeds :data:`CANARY_TIMEOUT_SECONDS` adds
one consecutive failure (``GET /v1/steward`` says ``degraded``); a passing probe clears
them; three make the planner replace the placement. Probes go straight to the worker:
they are internal machinery, never seen by chat middleware.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Final

from skulk_core.chat.generation import ErrorChunk
from skulk_core.ids import InstanceId
from skulk_daemon.chat.admission import admit
from skulk_daemon.chat.cancellation import ActiveCommands
from skulk_daemon.chat.generation import generation_events
from skulk_daemon.chat.task import ChatTask, TaskMessage
from skulk_daemon.node.node import Node
from skulk_daemon.steward.agent import StewardAgent
from skulk_daemon.worker.supervisor import Supervisor

log = logging.getLogger(__name__)

CANARY_INTERVAL_SECONDS: Final = 60.0
CANARY_TIMEOUT_SECONDS: Final = 60.0


class Canary:
    def __init__(
        self, node: Node, worker: Supervisor, commands: ActiveCommands, agent: StewardAgent
    ) -> None:
        self._node = node
        self._worker = worker
        self._commands = commands
        self._agent = agent
        self._next = time.monotonic() + CANARY_INTERVAL_SECONDS

    async def tick(self, instance_id: str | None, model: str | None) -> None:
        if not self._node.is_master or instance_id is None or model is None:
            return
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + CANARY_INTERVAL_SECONDS
        ok = await self.probe(InstanceId(instance_id), model)
        self._agent.canary_failures = 0 if ok else self._agent.canary_failures + 1
        if not ok:
            log.warning(
                "the steward's liveness probe failed (%d in a row)", self._agent.canary_failures
            )

    async def probe(self, instance_id: InstanceId, model: str) -> bool:
        task = ChatTask(
            model=model,
            messages=(TaskMessage(role="user", content="ok"),),
            max_tokens=1,
            temperature=0.0,
            enable_thinking=False,
        )
        try:
            admitted = await asyncio.to_thread(admit, self._node, task, pinned=instance_id)
            async with asyncio.timeout(CANARY_TIMEOUT_SECONDS):
                events = generation_events(self._worker, self._commands, admitted)
                async with contextlib.aclosing(events):
                    async for chunk in events:
                        if isinstance(chunk, ErrorChunk):
                            return False
        except Exception:  # any failure of the probe is a failed probe
            return False
        return True
