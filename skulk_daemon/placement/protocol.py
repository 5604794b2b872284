"""The placement routes' wire types (``/place_instance``, ``/instance``)."""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgspec

from skulk_core.ids import CommandId, InstanceId, ModelId
from skulk_core.models.cards import ModelCard
from skulk_core.placement import MAX_CONTEXT_TOKENS, MIN_CONTEXT_TOKENS
from skulk_core.state.shards import InstanceMeta, Sharding

COMMAND_RECEIVED: Final = "Command received."

ContextTokens = Annotated[int, msgspec.Meta(ge=MIN_CONTEXT_TOKENS, le=MAX_CONTEXT_TOKENS)]


class PlaceInstanceRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    model_id: Annotated[str, msgspec.Meta(min_length=1)]
    sharding: Sharding = Sharding.PIPELINE
    instance_meta: InstanceMeta = InstanceMeta.MLX_RING
    min_nodes: Annotated[int, msgspec.Meta(ge=1)] = 1
    excluded_nodes: tuple[str, ...] = ()
    context_tokens: ContextTokens | None = None
    # Skulk's addition (the spec is silent on a model that is already placed): a second
    # copy doubles memory and CPU, so it is refused with 409 naming the instance unless
    # the client asks for another replica.
    allow_duplicate: bool = False


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
