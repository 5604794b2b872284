"""The repair loop: the master places a failed instance again, with its original request.

When the master orders an ``InstanceFailed`` for an instance that carried a
placement intent, :func:`skulk_core.placement.repair.repair_request` says whether
and how to place it again (the same request, plus the node that refused it); this
agent waits a moment for the failed runners to stop and telemetry to catch up,
plans against the master's current facts and orders the new instance. Only the
master acts, and only on batches it ordered itself, so each failure is repaired
once however many nodes see it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from skulk_core.ids import InstanceId, new_command_id
from skulk_core.placement import (
    PLACEMENT_INFO_PENDING,
    CommandOwnedIds,
    PlacementRefusal,
    PlacementRequest,
    place,
)
from skulk_core.placement.repair import (
    after_peer_left,
    intent_of,
    repair_request,
    waits_for_peer,
)
from skulk_core.state.commands import CreateInstance
from skulk_core.state.events import IndexedEvent, InstanceFailed
from skulk_core.state.shards import Instance
from skulk_core.state.state import PlacementIntent, State
from skulk_daemon.node.node import CommandRefused, Node

log = logging.getLogger(__name__)

REPAIR_DELAY_SECONDS: Final = 1.0
"""Before re-planning: the failed instance's runners stop and free their memory."""
REPAIR_TRIES: Final = 5
REPAIR_RETRY_SECONDS: Final = 2.0
"""While node facts are pending (a node just joined or left), planning is retried."""
PEER_WAIT_TRIES: Final = 15
"""A pool or ring whose peer was lost: while that peer's node is still a member (it
is dropped after some seconds of silence), a refused plan is retried this many times,
then placed on the nodes that remain once the peer has left."""


class RepairAgent:
    def __init__(self, node: Node) -> None:
        self._node = node
        self._tasks: set[asyncio.Task[None]] = set()
        node.on_ordered(self._on_ordered)

    def _on_ordered(self, before: State, events: list[IndexedEvent]) -> None:
        for indexed in events:
            event = indexed.event
            if not isinstance(event, InstanceFailed):
                continue
            failure = event.failure
            instance = before.instances.get(failure.instance_id)
            intent = before.placement_intents.get(failure.instance_id)
            if instance is None or intent is None or intent.system_role is not None:
                # A system instance (the steward) is repaired by its own agent.
                continue
            request = repair_request(intent, failure.error_code, None)
            if request is None:
                log.warning(
                    "instance %s failed (%s); not placing it again",
                    failure.instance_id,
                    failure.error_code,
                )
                continue
            task = asyncio.get_running_loop().create_task(
                self._replace(instance, intent, request, failure.error_code)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _replace(
        self, failed: Instance, intent: PlacementIntent, request: PlacementRequest, why: str
    ) -> None:
        model_id = failed.shard_assignments.model_id
        await asyncio.sleep(REPAIR_DELAY_SECONDS)
        pending_tries, peer_tries = REPAIR_TRIES, PEER_WAIT_TRIES
        while pending_tries > 0:
            if not self._node.is_master:
                return
            entry = self._node.catalog().get(model_id)
            if entry is None:
                log.warning("cannot place %s again: it left the catalog", model_id)
                return
            facts = self._node.placement_facts()
            request = after_peer_left(request, why, facts.topology_nodes) or request
            command_id = new_command_id()
            planned = place(entry.card, facts, request, CommandOwnedIds(InstanceId(command_id)))
            if isinstance(planned, PlacementRefusal):
                if planned.code == PLACEMENT_INFO_PENDING:
                    pending_tries -= 1
                    await asyncio.sleep(REPAIR_RETRY_SECONDS)
                    continue
                if peer_tries > 0 and waits_for_peer(why):
                    peer_tries -= 1
                    await asyncio.sleep(REPAIR_RETRY_SECONDS)
                    continue
                log.warning("cannot place %s again after %s: %s", model_id, why, planned.message)
                return
            command = CreateInstance(
                command_id=command_id,
                instance=planned.instance,
                intent=intent_of(
                    request,
                    intent.repair_attempt + 1,
                    on_demand=intent.on_demand,
                    keep_alive_seconds=intent.keep_alive_seconds,
                ),
                card=entry.card,
            )
            try:
                await self._node.submit(command)
            except CommandRefused as exc:
                log.warning("placing %s again was refused: %s", model_id, exc.message)
                return
            log.info(
                "placed %s again as instance %s (after %s on instance %s)",
                model_id,
                planned.instance.instance_id,
                why,
                failed.instance_id,
            )
            return
        log.warning("cannot place %s again: node facts stayed pending", model_id)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
