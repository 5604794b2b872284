"""The placement planner: pure, values in and values out.

``place`` picks one placement for a request, ``preview_placements`` explains every
combination, ``admit_instance`` checks an instance a caller built. All three plan
against :class:`ClusterFacts` (built by ``cluster_facts`` from State, telemetry and
the cards of what is already placed) and take ids from an injected factory.
"""

from skulk_core.models.context_window import (
    DEFAULT_CONTEXT_TOKENS,
    MAX_CONTEXT_TOKENS,
    MIN_CONTEXT_TOKENS,
)
from skulk_core.placement.capacity import MemoryPool, PoolKind, memory_pool
from skulk_core.placement.cluster import ClusterFacts, cluster_facts, committed_bytes
from skulk_core.placement.exact import admit_instance, identity_problem
from skulk_core.placement.fit import HEADROOM_BYTES, RUNTIME_OVERHEAD_FACTOR
from skulk_core.placement.id_factory import CommandOwnedIds, IdFactory, RandomIds
from skulk_core.placement.instance_wire import InstanceWireError, instance_from_wire
from skulk_core.placement.layers import split_layers
from skulk_core.placement.planner import PlacementRequest, place
from skulk_core.placement.previews import PlacementPreview, PreviewQuery, preview_placements
from skulk_core.placement.results import (
    MODEL_CARD_IDENTITY_MISMATCH,
    NO_VALID_PLACEMENT,
    PLACEMENT_INFO_PENDING,
    Placement,
    PlacementRefusal,
)

__all__ = [
    "DEFAULT_CONTEXT_TOKENS",
    "HEADROOM_BYTES",
    "MAX_CONTEXT_TOKENS",
    "MIN_CONTEXT_TOKENS",
    "MODEL_CARD_IDENTITY_MISMATCH",
    "NO_VALID_PLACEMENT",
    "PLACEMENT_INFO_PENDING",
    "RUNTIME_OVERHEAD_FACTOR",
    "ClusterFacts",
    "CommandOwnedIds",
    "IdFactory",
    "InstanceWireError",
    "MemoryPool",
    "Placement",
    "PlacementPreview",
    "PlacementRefusal",
    "PlacementRequest",
    "PoolKind",
    "PreviewQuery",
    "RandomIds",
    "admit_instance",
    "cluster_facts",
    "committed_bytes",
    "identity_problem",
    "instance_from_wire",
    "memory_pool",
    "place",
    "preview_placements",
    "split_layers",
]
