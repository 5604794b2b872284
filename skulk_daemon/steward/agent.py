"""The steward agent: the master keeps the hidden steward placed while the mode is on.

Every node runs it; only the master acts (like the keep-alive and repair agents), so the
steward is placed once however many nodes there are. Each tick the pure
:func:`~skulk_core.steward.lifecycle.plan_steward` compares State with this master's
``intelligent_fabric`` settings and the agent orders what it says: a
``CreateInstance`` marked ``system_role: steward`` when none is placed (first start, or
repair after the placement disappeared), a ``DeleteInstance`` when the mode is off, the
brain changed, or the liveness canary failed three times in a row. A promoted master
picks the same work up on its first tick, since the steward's marker is in State.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final

from skulk_core.ids import InstanceId, new_command_id
from skulk_core.placement import (
    PLACEMENT_INFO_PENDING,
    CommandOwnedIds,
    PlacementRefusal,
    PlacementRequest,
    place,
)
from skulk_core.state.commands import CreateInstance, DeleteInstance
from skulk_core.state.events import IndexedEvent, InstanceDeleted, InstanceFailed
from skulk_core.state.state import PlacementIntent, State
from skulk_core.steward.lifecycle import (
    STEWARD_ROLE,
    PlaceSteward,
    RemoveSteward,
    is_steward,
    plan_steward,
)
from skulk_core.steward.mode import effective_fabric
from skulk_daemon.fabric.cluster_settings import publish_fabric_mode
from skulk_daemon.node.node import CommandRefused, Node

log = logging.getLogger(__name__)

TICK_SECONDS: Final = 1.0
RETRY_SECONDS: Final = 10.0
"""After a refused placement (no memory, model not installed), before trying again."""


class StewardAgent:
    def __init__(self, node: Node) -> None:
        self._node = node
        self._retry_at = 0.0
        self._warned: str | None = None
        self.canary_failures = 0
        """Consecutive failed liveness probes of the current placement (the canary)."""
        self.repairing = False
        """The placement disappeared (failed or deleted) and a new one is not yet placed."""
        self._loop: asyncio.Task[None] | None = None
        self.also: list[Callable[[], Awaitable[None]]] = []
        """Further master passes run on the same tick (the proposal dispatcher's)."""
        node.on_ordered(self._on_ordered)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop().create_task(self._run())

    def _on_ordered(self, before: State, events: list[IndexedEvent]) -> None:
        for indexed in events:
            event = indexed.event
            if isinstance(event, InstanceFailed) and is_steward(before, event.failure.instance_id):
                self.repairing = True
            elif isinstance(event, InstanceDeleted) and is_steward(before, event.instance_id):
                node = self._node
                self.repairing = effective_fabric(
                    node.state, node.config.intelligent_fabric
                ).enabled
                self.canary_failures = 0

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            for work in (self.tick, *self.also):
                try:
                    await work()
                except Exception:
                    log.exception("the steward pass failed")

    async def tick(self) -> None:
        node = self._node
        if not node.is_master:
            return
        await publish_fabric_mode(node)
        fabric = effective_fabric(node.state, node.config.intelligent_fabric)
        actions = plan_steward(
            node.state,
            enabled=fabric.enabled,
            brain_model=fabric.brain_model,
            canary_failures=self.canary_failures,
        )
        for action in actions:
            match action:
                case RemoveSteward(instance_id=instance_id, reason=reason):
                    await self._remove(instance_id, reason)
                case PlaceSteward():
                    if time.monotonic() >= self._retry_at:
                        await self._place(action)

    async def _remove(self, instance_id: InstanceId, reason: str) -> None:
        try:
            await self._node.submit(
                DeleteInstance(command_id=new_command_id(), instance_id=instance_id)
            )
        except CommandRefused as exc:
            log.debug("removing the steward %s was refused: %s", instance_id, exc.message)
            return
        log.info("removed the steward placement %s (%s)", instance_id, reason)

    async def _place(self, action: PlaceSteward) -> None:
        node = self._node
        entry = node.catalog().get(action.model_id)
        if entry is None:
            self._refused(f"the steward's brain {action.model_id} is not in the catalog")
            return
        command_id = new_command_id()
        planned = place(
            entry.card,
            node.placement_facts(),
            PlacementRequest(),
            CommandOwnedIds(InstanceId(command_id)),
        )
        if isinstance(planned, PlacementRefusal):
            if planned.code == PLACEMENT_INFO_PENDING:
                return  # node telemetry is still arriving: the next tick tries again
            self._refused(f"cannot place the steward ({action.model_id}): {planned.message}")
            return
        try:
            await node.submit(
                CreateInstance(
                    command_id=command_id,
                    instance=planned.instance,
                    intent=PlacementIntent(system_role=STEWARD_ROLE),
                    card=entry.card,
                )
            )
        except CommandRefused as exc:
            self._refused(f"placing the steward was refused: {exc.message}")
            return
        self.repairing = False
        self._warned = None
        self.canary_failures = 0
        log.info(
            "placed the steward (%s) as instance %s", action.model_id, planned.instance.instance_id
        )

    def _refused(self, message: str) -> None:
        self._retry_at = time.monotonic() + RETRY_SECONDS
        if message != self._warned:
            log.warning("%s; retrying every %g s", message, RETRY_SECONDS)
            self._warned = message

    async def close(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
