"""Placement and instance management: previews, quick launch, exact create, inspect, delete.

Handlers decode, dry-run the pure planner (:mod:`skulk_core.placement`) against
this node's view, and only then send the master a command, so an impossible
placement fails here with the reason and leaves nothing half-created behind.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Annotated, Any, Final, TypeVar

import msgspec
from litestar import Controller, delete, get, post
from litestar.params import Parameter

from skulk_core.cards import ModelCard
from skulk_core.commands import CreateInstance, DeleteInstance
from skulk_core.ids import CommandId, InstanceId, ModelId, NodeId, new_command_id
from skulk_core.placement import (
    MAX_CONTEXT_TOKENS,
    MIN_CONTEXT_TOKENS,
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
from skulk_core.placement.repair import intent_of
from skulk_core.placement.shapes import instance_meta_of, sharding_of
from skulk_core.shards import Instance, InstanceMeta, Sharding
from skulk_core.state import PlacementIntent
from skulk_core.wire import JsonValue, to_wire
from skulk_daemon.api.errors import ApiError
from skulk_daemon.node import CommandRefused, Node

# A cluster that just formed gossips node telemetry a little after node identities;
# a placement waits this long for it before answering 503 placement_info_pending.
PLACEMENT_INFO_WAIT_SECONDS: Final = 5.0
PLACEMENT_INFO_POLL_SECONDS: Final = 0.25
PLACEMENT_FAILURE_HEADER: Final = "X-Skulk-Placement-Failure"
COMMAND_RECEIVED: Final = "Command received."

_T = TypeVar("_T")

# NOTE: planning and submitting must be one step per node: two launches that both
# planned against the same State would both count the same free memory. Holding
# this lock until submit() returns (which is after the CreateInstance event is
# applied here) makes the second placement see the first one's committed capacity.
# Keyed weakly by Node so each node (and each event loop, in tests) gets its own.
_placement_locks: weakref.WeakKeyDictionary[Node, asyncio.Lock] = weakref.WeakKeyDictionary()


def _placement_lock(node: Node) -> asyncio.Lock:
    lock = _placement_locks.get(node)
    if lock is None:
        lock = _placement_locks[node] = asyncio.Lock()
    return lock


ContextTokens = Annotated[int, msgspec.Meta(ge=MIN_CONTEXT_TOKENS, le=MAX_CONTEXT_TOKENS)]


class PlaceInstanceRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    model_id: Annotated[str, msgspec.Meta(min_length=1)]
    sharding: Sharding = Sharding.PIPELINE
    instance_meta: InstanceMeta = InstanceMeta.MLX_RING
    min_nodes: Annotated[int, msgspec.Meta(ge=1)] = 1
    excluded_nodes: tuple[str, ...] = ()
    context_tokens: ContextTokens | None = None


class CreateInstanceRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # The instance exactly as ``/state`` renders it (externally tagged, camelCase).
    instance: dict[str, Any]


class InstanceAccepted(msgspec.Struct, frozen=True, kw_only=True):
    message: str = COMMAND_RECEIVED
    command_id: CommandId
    instance_id: InstanceId
    model_id: ModelId


class ExactInstanceAccepted(msgspec.Struct, frozen=True, kw_only=True):
    message: str = COMMAND_RECEIVED
    command_id: CommandId
    instance_id: InstanceId
    model_id: ModelId
    model_card: ModelCard


class DeletionAccepted(msgspec.Struct, frozen=True, kw_only=True):
    message: str = COMMAND_RECEIVED
    command_id: CommandId
    instance_id: InstanceId


def _card(node: Node, model_id: str) -> ModelCard:
    entry = node.catalog().get(model_id)
    if entry is None:
        raise ApiError(404, f"model {model_id!r} is not in the catalog", code="model_not_found")
    return entry.card


def _facts(node: Node) -> ClusterFacts:
    return node.placement_facts()


async def _create(node: Node, command: CreateInstance) -> None:
    """Send the placement to the master, which checks it again against every
    placement it ordered before (cluster-wide committed capacity)."""
    try:
        await node.submit(command)
    except CommandRefused as exc:
        if exc.code in (NO_VALID_PLACEMENT, MODEL_CARD_IDENTITY_MISMATCH):
            raise placement_error(PlacementRefusal(code=exc.code, message=exc.message)) from None
        raise


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
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PLACEMENT_INFO_WAIT_SECONDS
    result = attempt(_facts(node))
    while _pending(result) and loop.time() < deadline:
        await asyncio.sleep(PLACEMENT_INFO_POLL_SECONDS)
        result = attempt(_facts(node))
    return result


def _nodes(values: list[str] | None) -> frozenset[NodeId]:
    return frozenset(NodeId(value) for value in values or ())


def _instance(node: Node, instance_id: str) -> Instance:
    instance = node.state.instances.get(InstanceId(instance_id))
    if instance is None:
        raise ApiError(404, f"instance {instance_id!r} not found", code="instance_not_found")
    return instance


NodeIdsParam = Annotated[
    list[str] | None,
    Parameter(description="Repeatable. Only placements that include all of these nodes."),
]
ExcludedParam = Annotated[
    list[str] | None,
    Parameter(description="Repeatable. Nodes to treat as absent for this placement."),
]
MinNodesParam = Annotated[int, Parameter(ge=1, description="Minimum nodes in the placement.")]
ContextParam = Annotated[
    int | None,
    Parameter(
        ge=MIN_CONTEXT_TOKENS,
        le=MAX_CONTEXT_TOKENS,
        description="Context window; honoured exactly up to the placement's maximum.",
    ),
]


class PlacementController(Controller):
    tags = ("Placement",)

    @get("/instance/previews", summary="Every valid (and invalid, with why) placement")
    async def previews(
        self,
        node: Node,
        *,
        model_id: str,
        node_ids: NodeIdsParam = None,
        excluded_node_ids: ExcludedParam = None,
        sharding: Sharding | None = None,
        instance_meta: InstanceMeta | None = None,
        min_nodes: MinNodesParam = 1,
        context_tokens: ContextParam = None,
    ) -> dict[str, JsonValue]:
        card = _card(node, model_id)
        query = PreviewQuery(
            sharding=sharding,
            instance_meta=instance_meta,
            min_nodes=min_nodes,
            node_ids=_nodes(node_ids),
            excluded_node_ids=_nodes(excluded_node_ids),
            context_tokens=context_tokens,
        )
        # NOTE: pure but not free on a large cluster (every ring of every size is
        # weighed), so it runs off the event loop; it reads a snapshot, not the Node.
        previews = await asyncio.to_thread(
            preview_placements, card, _facts(node), query, RandomIds()
        )
        return {"previews": [to_wire(preview) for preview in previews]}

    @get("/instance/placement", summary="The placement a launch would make; reserves nothing")
    async def placement(
        self,
        node: Node,
        *,
        model_id: str,
        node_ids: NodeIdsParam = None,
        excluded_node_ids: ExcludedParam = None,
        sharding: Sharding = Sharding.PIPELINE,
        instance_meta: InstanceMeta = InstanceMeta.MLX_RING,
        min_nodes: MinNodesParam = 1,
        context_tokens: ContextParam = None,
    ) -> dict[str, JsonValue]:
        card = _card(node, model_id)
        request = PlacementRequest(
            sharding=sharding,
            instance_meta=instance_meta,
            min_nodes=min_nodes,
            node_ids=_nodes(node_ids),
            excluded_node_ids=_nodes(excluded_node_ids),
            context_tokens=context_tokens,
        )
        result = await plan_when_informed(
            node, lambda facts: place(card, facts, request, RandomIds())
        )
        if isinstance(result, PlacementRefusal):
            raise placement_error(result)
        rendered = to_wire(result)
        assert isinstance(rendered, dict)
        return rendered

    @post("/place_instance", status_code=200, summary="Place a model on the best nodes")
    async def place_instance(self, node: Node, data: PlaceInstanceRequest) -> InstanceAccepted:
        card = _card(node, data.model_id)
        request = PlacementRequest(
            sharding=data.sharding,
            instance_meta=data.instance_meta,
            min_nodes=data.min_nodes,
            excluded_node_ids=_nodes(list(data.excluded_nodes)),
            context_tokens=data.context_tokens,
        )
        command_id = new_command_id()
        # The accepted command owns exactly the placement identity it creates.
        ids = CommandOwnedIds(InstanceId(command_id))
        async with _placement_lock(node):
            # Planned once, under the lock: waiting for node facts happens here too, so
            # the plan that is submitted is the plan made against the latest State.
            result = await plan_when_informed(node, lambda facts: place(card, facts, request, ids))
            if isinstance(result, PlacementRefusal):
                raise placement_error(result)
            await _create(
                node,
                CreateInstance(
                    command_id=command_id, instance=result.instance, intent=intent_of(request)
                ),
            )
        return _accepted(command_id, result)

    @post("/instance", status_code=200, summary="Create an instance from an exact placement")
    async def create_instance(
        self, node: Node, data: CreateInstanceRequest
    ) -> ExactInstanceAccepted:
        try:
            instance = instance_from_wire(data.instance)
        except InstanceWireError as exc:
            raise ApiError(400, str(exc), code="invalid_instance") from None
        card = _card(node, instance.shard_assignments.model_id)
        if instance.instance_id in node.state.instances:
            raise ApiError(
                409, f"instance {instance.instance_id} already exists", code="instance_exists"
            )
        async with _placement_lock(node):
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
            await _create(
                node, CreateInstance(command_id=command_id, instance=admitted, intent=intent)
            )
        return ExactInstanceAccepted(
            command_id=command_id,
            instance_id=admitted.instance_id,
            model_id=card.model_id,
            model_card=card,
        )

    @get("/instance/{instance_id:str}", summary="One instance and its runners' statuses")
    async def get_instance(self, node: Node, instance_id: str) -> dict[str, JsonValue]:
        instance = _instance(node, instance_id)
        runners = node.state.runners
        statuses: dict[str, JsonValue] = {
            runner: to_wire(runners[runner])
            for runner in instance.shard_assignments.node_to_runner.values()
            if runner in runners
        }
        return {"instance": to_wire(instance), "runners": statuses}

    @delete("/instance/{instance_id:str}", status_code=200, summary="Delete an instance")
    async def delete_instance(self, node: Node, instance_id: str) -> DeletionAccepted:
        instance = _instance(node, instance_id)
        command_id = new_command_id()
        # A concurrent delete that wins the race makes the master refuse with
        # not_found, which errors.py answers as 404.
        await node.submit(DeleteInstance(command_id=command_id, instance_id=instance.instance_id))
        return DeletionAccepted(command_id=command_id, instance_id=instance.instance_id)


def _accepted(command_id: CommandId, placement: Placement) -> InstanceAccepted:
    return InstanceAccepted(
        command_id=command_id,
        instance_id=placement.instance.instance_id,
        model_id=placement.model_id,
    )
