"""The keep-alive loop: the master unloads on-demand instances that sat idle too long.

Every node runs the agent; only the master acts, so each instance is unloaded once
however many nodes there are. The master hears every task of every request (it
orders them), and :func:`~skulk_core.placement.keep_alive.note_events` restarts an
instance's idle clock on each; every :data:`TICK_SECONDS` the pure
:func:`~skulk_core.placement.keep_alive.idle_unloads` names the instances idle past
their keep-alive, and the agent deletes them with the ``DeleteInstance`` command an
operator's ``skulk instances delete`` sends. Explicit placements are never named.

A master that just took over starts every clock at the moment it first sees the
instance: after a failover an idle instance lives at most one keep-alive longer.

NOTE: a request is admitted at its API node a moment before its task is ordered
here, so one that arrives exactly as an instance's keep-alive runs out can lose the
race and fail as it would after ``skulk instances delete``; the window is the time a
task report takes to reach the master, against a keep-alive of minutes by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Final

from skulk_core.ids import InstanceId, new_command_id
from skulk_core.placement.keep_alive import idle_unloads, note_events, refresh
from skulk_core.state.commands import DeleteInstance
from skulk_core.state.events import IndexedEvent
from skulk_core.state.state import State
from skulk_daemon.node.node import CommandRefused, Node

log = logging.getLogger(__name__)

TICK_SECONDS: Final = 0.5
"""How often the master looks for idle on-demand instances (the unload's latency)."""


class KeepAliveAgent:
    def __init__(self, node: Node, clock: Callable[[], float] = time.monotonic) -> None:
        self._node = node
        self._clock = clock
        self._last_active: dict[InstanceId, float] = {}
        node.on_ordered(self._on_ordered)
        self._loop = asyncio.get_running_loop().create_task(self._run())

    def _on_ordered(self, before: State, events: list[IndexedEvent]) -> None:
        self._last_active = note_events(
            self._last_active, before, (e.event for e in events), self._clock()
        )

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            try:
                await self.tick()
            except Exception:
                # One failed pass (no master for a moment) must not end the loop.
                log.exception("the keep-alive pass failed")

    async def tick(self) -> None:
        """One pass: unload what has been idle past its keep-alive (master only)."""
        node = self._node
        if not node.is_master:
            # A follower's clocks would be stale by the time it is elected.
            self._last_active = {}
            return
        now = self._clock()
        state = node.state
        self._last_active = refresh(state, self._last_active, now)
        for instance_id in idle_unloads(state, self._last_active, now):
            intent = state.placement_intents[instance_id]
            model_id = state.instances[instance_id].shard_assignments.model_id
            try:
                await node.submit(
                    DeleteInstance(command_id=new_command_id(), instance_id=instance_id)
                )
            except CommandRefused as exc:
                log.debug("unloading %s was refused: %s", instance_id, exc.message)
                continue
            self._last_active.pop(instance_id, None)
            log.info(
                "unloaded %s (instance %s, placed on demand): idle for its keep-alive of %g s",
                model_id,
                instance_id,
                intent.keep_alive_seconds,
            )

    async def close(self) -> None:
        self._loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._loop
