"""What the planner answers: a placement, or a refusal with a stable code."""

from __future__ import annotations

from typing import Final

import msgspec

from skulk_core.ids import ModelId, NodeId
from skulk_core.state.shards import Instance, InstanceMeta, Sharding

# Stable categories, sent as ``X-Skulk-Placement-Failure`` and as ``error_code``.
NO_VALID_PLACEMENT: Final = "no_valid_placement"
PLACEMENT_INFO_PENDING: Final = "placement_info_pending"
MODEL_CARD_IDENTITY_MISMATCH: Final = "model_card_identity_mismatch"


class PlacementRefusal(msgspec.Struct, frozen=True, kw_only=True):
    """No placement. ``code`` is for programs, ``message`` (with the arithmetic) for people."""

    code: str
    message: str


class Placement(msgspec.Struct, frozen=True, kw_only=True):
    """A placement the master can commit as is.

    ``instance`` is stamped with ``context_tokens``: the request's window, else the
    default. ``memory_delta_by_node`` is what launching it takes from each node:
    weights * overhead plus the KV cache the engine commits for that window.
    """

    model_id: ModelId
    sharding: Sharding
    instance_meta: InstanceMeta
    backend: str
    node_ids: tuple[NodeId, ...]
    instance: Instance
    memory_delta_by_node: dict[NodeId, int]
    context_tokens: int | None
    max_context_tokens: int | None
    default_context_tokens: int | None
    reserves_context_at_load: bool
    kv_bytes_per_token: int | None
