"""Placement and instance management: previews, quick launch, exact create, inspect, delete.

The logic is :class:`~skulk_daemon.placement.service.PlacementService`; handlers decode
the query or body, call it once and render the answer.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import Controller, delete, get, post
from litestar.params import Parameter

from skulk_core.placement import (
    MAX_CONTEXT_TOKENS,
    MIN_CONTEXT_TOKENS,
    PlacementRequest,
    PreviewQuery,
)
from skulk_core.placement.previews import PlacementPreview
from skulk_core.placement.results import Placement
from skulk_core.state.shards import Instance, InstanceMeta, RunnerStatus, Sharding
from skulk_core.wire import JsonValue, to_wire
from skulk_daemon.api.authority import declare
from skulk_daemon.api.openapi import JSON, OPENAI, documented, errors, wire_of
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.placement.protocol import (
    CreateInstanceRequest,
    DeletionAccepted,
    ExactInstanceAccepted,
    InstanceAccepted,
    PlaceInstanceRequest,
)
from skulk_daemon.placement.service import PlacementService
from skulk_daemon.placement.service import node_ids as ids_of

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


class PreviewList(msgspec.Struct, frozen=True, kw_only=True):
    previews: list[PlacementPreview]


class InstanceView(msgspec.Struct, frozen=True, kw_only=True):
    instance: Instance
    runners: dict[str, RunnerStatus]
    """Runner id → its status, for those reported so far."""


class PlacementController(Controller):
    tags = ("Placement",)
    opt = declare(Requirement.TRUSTED_FABRIC)

    @get(
        "/instance/previews",
        opt=declare(Requirement.OPEN),
        summary="Every valid (and invalid, with why) placement",
        responses=errors(OPENAI, 400, 404),
        operation_class=documented(ok={JSON: wire_of(PreviewList)}),
    )
    async def previews(
        self,
        placement: PlacementService,
        *,
        model_id: str,
        node_ids: NodeIdsParam = None,
        excluded_node_ids: ExcludedParam = None,
        sharding: Sharding | None = None,
        instance_meta: InstanceMeta | None = None,
        min_nodes: MinNodesParam = 1,
        context_tokens: ContextParam = None,
    ) -> dict[str, JsonValue]:
        query = PreviewQuery(
            sharding=sharding,
            instance_meta=instance_meta,
            min_nodes=min_nodes,
            node_ids=ids_of(node_ids),
            excluded_node_ids=ids_of(excluded_node_ids),
            context_tokens=context_tokens,
        )
        previews = await placement.previews(model_id, query)
        return {"previews": [to_wire(preview) for preview in previews]}

    @get(
        "/instance/placement",
        opt=declare(Requirement.OPEN),
        summary="The placement a launch would make; reserves nothing",
        responses=errors(OPENAI, 400, 404, 503),
        operation_class=documented(ok={JSON: wire_of(Placement)}),
    )
    async def placement(
        self,
        placement: PlacementService,
        *,
        model_id: str,
        node_ids: NodeIdsParam = None,
        excluded_node_ids: ExcludedParam = None,
        sharding: Sharding = Sharding.PIPELINE,
        instance_meta: InstanceMeta = InstanceMeta.MLX_RING,
        min_nodes: MinNodesParam = 1,
        context_tokens: ContextParam = None,
    ) -> dict[str, JsonValue]:
        request = PlacementRequest(
            sharding=sharding,
            instance_meta=instance_meta,
            min_nodes=min_nodes,
            node_ids=ids_of(node_ids),
            excluded_node_ids=ids_of(excluded_node_ids),
            context_tokens=context_tokens,
        )
        rendered = to_wire(await placement.plan(model_id, request))
        assert isinstance(rendered, dict)
        return rendered

    @post(
        "/place_instance",
        status_code=200,
        summary="Place a model on the best nodes",
        responses=errors(OPENAI, 400, 404, 409, 413, 503),
    )
    async def place_instance(
        self, placement: PlacementService, data: PlaceInstanceRequest
    ) -> InstanceAccepted:
        request = PlacementRequest(
            sharding=data.sharding,
            instance_meta=data.instance_meta,
            min_nodes=data.min_nodes,
            excluded_node_ids=ids_of(data.excluded_nodes),
            context_tokens=data.context_tokens,
        )
        return await placement.launch(data.model_id, request, allow_duplicate=data.allow_duplicate)

    @post(
        "/instance",
        status_code=200,
        summary="Create an instance from an exact placement",
        responses=errors(OPENAI, 400, 404, 409, 413, 503),
    )
    async def create_instance(
        self, placement: PlacementService, data: CreateInstanceRequest
    ) -> ExactInstanceAccepted:
        return await placement.create_exact(data.instance)

    @get(
        "/instance/{instance_id:str}",
        opt=declare(Requirement.OPEN),
        summary="One instance and its runners' statuses",
        responses=errors(OPENAI, 404),
        operation_class=documented(ok={JSON: wire_of(InstanceView)}),
    )
    async def get_instance(
        self, placement: PlacementService, instance_id: str
    ) -> dict[str, JsonValue]:
        instance, statuses = placement.instance(instance_id)
        return {
            "instance": to_wire(instance),
            "runners": {runner: to_wire(status) for runner, status in statuses.items()},
        }

    @delete(
        "/instance/{instance_id:str}",
        status_code=200,
        summary="Delete an instance",
        responses=errors(OPENAI, 404, 409, 503),
    )
    async def delete_instance(
        self, placement: PlacementService, instance_id: str
    ) -> DeletionAccepted:
        return await placement.delete(instance_id)
