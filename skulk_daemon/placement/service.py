"""Placement as a service: previews, plans, quick launch, exact create, delete.

Each call dry-runs the pure planner (:mod:`skulk_core.placement`) against this node's
view, and only then sends the master a command, so an impossible placement fails here
with the reason and leaves nothing half-created behind. The master checks every
``CreateInstance`` again against all it ordered before (cluster-wide capacity).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final, TypeVar

from skulk_core.ids import CommandId, InstanceId, NodeId, new_command_id
from skulk_core.models.cards import ModelCard
from skulk_core.models.suggest import not_in_catalog
from skulk_core.placement import (
    MODEL_CARD_IDENTITY_MISMATCH,
    NO_VALID_PLACEMENT,
    PLACEMENT_INFO_PENDING,
    ClusterFacts,
    CommandOwnedIds,
    InstanceWireError,
    Placement,
    PlacementRefusal,
    PlacementRequest,
    PreviewQuery,
    RandomIds,
    admit_instance,
    instance_from_wire,
    place,
    preview_placements,
)
from skulk_core.placement.previews import PlacementPreview
from skulk_core.placement.repair import intent_of
from skulk_core.placement.shapes import instance_meta_of, sharding_of
from skulk_core.state.commands import CreateInstance, DeleteInstance
from skulk_core.state.shards import Instance, RunnerStatus, Sharding
from skulk_core.state.state import PlacementIntent
from skulk_core.steward.lifecycle import is_steward
from skulk_core.steward.mode import effective_fabric
from skulk_daemon.errors import ApiError
from skulk_daemon.node.node import CommandRefused, Node
from skulk_daemon.placement.protocol import (
    DeletionAccepted,
    ExactInstanceAccepted,
    InstanceAccepted,
)

# A cluster that just formed gossips node telemetry a little after node identities;
# a placement waits this long for it before answering 503 placement_info_pending.
PLACEMENT_INFO_WAIT_SECONDS: Final = 5.0
PLACEMENT_INFO_POLL_SECONDS: Final = 0.25
PLACEMENT_FAILURE_HEADER: Final = "X-Skulk-Placement-Failure"
# The error code of a launch refused because the model already has an instance.
MODEL_ALREADY_PLACED: Final = "model_already_placed"

_T = TypeVar("_T")


def placement_error(refusal: PlacementRefusal) -> ApiError:
    status = 503 if refusal.code == PLACEMENT_INFO_PENDING else 400
    return ApiError(
        status,
        refusal.message,
        code=refusal.code,
        headers={PLACEMENT_FAILURE_HEADER: refusal.code},
    )


def _pending(result: object) -> bool:
    return isinstance(result, PlacementRefusal) and result.code == PLACEMENT_INFO_PENDING


async def plan_when_informed(node: Node, attempt: Callable[[ClusterFacts], _T]) -> _T:
    """``attempt`` against this node's view, retried while placement info is pending."""
    await node.registration.done()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PLACEMENT_INFO_WAIT_SECONDS
    result = attempt(node.placement_facts())
    while _pending(result) and loop.time() < deadline:
        await asyncio.sleep(PLACEMENT_INFO_POLL_SECONDS)
        result = attempt(node.placement_facts())
    return result


def node_ids(values: list[str] | tuple[str, ...] | None) -> frozenset[NodeId]:
    return frozenset(NodeId(value) for value in values or ())


class PlacementService:
    """This node's placement requests; one at a time from plan to applied event."""

    def __init__(self, node: Node) -> None:
        self._node = node
        # NOTE: planning and submitting must be one step per node: two launches that
        # both planned against the same State would both count the same free memory.
        # Holding this lock until submit() returns (which is after the CreateInstance
        # event is applied here) makes the second placement see the first one's
        # committed capacity.
        self._lock = asyncio.Lock()

    def card(self, model_id: str) -> ModelCard:
        catalog = self._node.catalog()
        entry = catalog.get(model_id)
        if entry is None:
            raise ApiError(
                404,
                f"{not_in_catalog(model_id, catalog.by_id)}; add a Hugging Face model first "
                "(POST /models/add)",
                code="model_not_found",
            )
        return entry.card

    async def previews(self, model_id: str, query: PreviewQuery) -> list[PlacementPreview]:
        """Every valid (and invalid, with why) placement of ``model_id``."""
        card = self.card(model_id)
        await self._node.registration.done()  # this node's own place in State first
        # NOTE: pure but not free on a large cluster (every ring of every size is
        # weighed), so it runs off the event loop; it reads a snapshot, not the Node.
        return await asyncio.to_thread(
            preview_placements, card, self._node.placement_facts(), query, RandomIds()
        )

    async def plan(self, model_id: str, request: PlacementRequest) -> Placement:
        """The placement a launch would make; reserves nothing."""
        card = self.card(model_id)
        result = await plan_when_informed(
            self._node, lambda facts: place(card, facts, request, RandomIds())
        )
        if isinstance(result, PlacementRefusal):
            raise placement_error(result)
        return result

    async def launch(
        self,
        model_id: str,
        request: PlacementRequest,
        *,
        allow_duplicate: bool = False,
        on_demand: bool = False,
        keep_alive_seconds: float | None = None,
    ) -> InstanceAccepted:
        """Plan ``model_id`` on the best nodes and order the instance.

        A model that already has an instance is refused with 409 naming it, unless
        ``allow_duplicate`` asks for another replica. ``on_demand``: a request for the
        unplaced model asked for it (see :mod:`skulk_daemon.placement.on_demand`); it is
        unloaded after ``keep_alive_seconds`` idle (``None``: kept until removed)."""
        # A model whose bytes no node holds yet is placed all the same: the worker
        # brings them (skulk_daemon.worker.fetch) while its runner shows as loading.
        card = self.card(model_id)
        command_id = new_command_id()
        # The accepted command owns exactly the placement identity it creates.
        ids = CommandOwnedIds(InstanceId(command_id))
        async with self._lock:
            # Under the lock, so two launches through this node cannot both pass.
            if not allow_duplicate:
                self._refuse_duplicate(card.model_id)
            # Planned once, under the lock: waiting for node facts happens here too, so
            # the plan that is submitted is the plan made against the latest State.
            result = await plan_when_informed(
                self._node, lambda facts: place(card, facts, request, ids)
            )
            if isinstance(result, PlacementRefusal):
                raise placement_error(result)
            await self._create(
                CreateInstance(
                    command_id=command_id,
                    instance=result.instance,
                    intent=intent_of(
                        request, on_demand=on_demand, keep_alive_seconds=keep_alive_seconds
                    ),
                    card=card,
                )
            )
        return InstanceAccepted(
            command_id=command_id,
            instance_id=result.instance.instance_id,
            model_id=result.model_id,
        )

    async def create_exact(self, wire: object) -> ExactInstanceAccepted:
        """Order an instance exactly as given (``/state``'s rendering), once admitted."""
        node = self._node
        try:
            instance = instance_from_wire(wire)
        except InstanceWireError as exc:
            raise ApiError(400, str(exc), code="invalid_instance") from None
        card = self.card(instance.shard_assignments.model_id)
        if instance.instance_id in node.state.instances:
            raise ApiError(
                409, f"instance {instance.instance_id} already exists", code="instance_exists"
            )
        async with self._lock:
            admitted = await plan_when_informed(
                node, lambda facts: admit_instance(instance, card, facts, node.state)
            )
            if isinstance(admitted, PlacementRefusal):
                raise placement_error(admitted)
            command_id = new_command_id()
            # The stamped window is the repair intent: a re-placement rebuilds it.
            intent = PlacementIntent(
                sharding=sharding_of(admitted) or Sharding.PIPELINE,
                instance_meta=instance_meta_of(admitted),
                min_nodes=len(admitted.shard_assignments.node_to_runner),
                context_tokens=admitted.context_token_limit,
            )
            await self._create(
                CreateInstance(command_id=command_id, instance=admitted, intent=intent, card=card)
            )
        return ExactInstanceAccepted(
            command_id=command_id,
            instance_id=admitted.instance_id,
            model_id=card.model_id,
            model_card=card,
        )

    def instance(self, instance_id: str) -> tuple[Instance, dict[str, RunnerStatus]]:
        """One instance and its runners' statuses (those reported so far)."""
        instance = self._instance(instance_id)
        runners = self._node.state.runners
        statuses = {
            str(runner): runners[runner]
            for runner in instance.shard_assignments.node_to_runner.values()
            if runner in runners
        }
        return instance, statuses

    async def delete(self, instance_id: str) -> DeletionAccepted:
        instance = self._instance(instance_id)
        if is_steward(self._node.state, instance.instance_id) and (
            effective_fabric(self._node.state, self._node.config.intelligent_fabric).enabled
        ):
            raise ApiError(
                409,
                f"instance {instance_id} is the steward, kept placed while intelligent-fabric "
                "mode is enabled; disable the mode (intelligent_fabric.enabled) and the "
                "fabric removes it",
                code="steward_instance",
            )
        command_id: CommandId = new_command_id()
        # A concurrent delete that wins the race makes the master refuse with
        # not_found, which the API answers as 404.
        await self._node.submit(
            DeleteInstance(command_id=command_id, instance_id=instance.instance_id)
        )
        return DeletionAccepted(command_id=command_id, instance_id=instance.instance_id)

    def _refuse_duplicate(self, model_id: str) -> None:
        # The hidden steward (a system instance of its brain card) is no replica of the
        # model for the user: it serves only skulk/steward and cannot be deleted.
        state = self._node.state
        placed = sorted(
            str(instance_id)
            for instance_id, instance in state.instances.items()
            if instance.shard_assignments.model_id == model_id
            and not is_steward(state, instance_id)
        )
        if placed:
            named = ", ".join(placed)
            raise ApiError(
                409,
                f"model {model_id!r} is already placed as instance {named}; use it, delete "
                "it first (DELETE /instance/{instance_id}), or set allow_duplicate to place "
                "another replica",
                code=MODEL_ALREADY_PLACED,
            )

    def _instance(self, instance_id: str) -> Instance:
        instance = self._node.state.instances.get(InstanceId(instance_id))
        if instance is None:
            raise ApiError(404, f"instance {instance_id!r} not found", code="instance_not_found")
        return instance

    async def _create(self, command: CreateInstance) -> None:
        try:
            await self._node.submit(command)
        except CommandRefused as exc:
            if exc.code in (NO_VALID_PLACEMENT, MODEL_CARD_IDENTITY_MISMATCH):
                raise placement_error(
                    PlacementRefusal(code=exc.code, message=exc.message)
                ) from None
            raise
