"""``skulk.shared.types.capability_nodes``: capability-node summaries a plugin publishes
with ``context.publish_capability_node(...)``. Re-exports
``skulk_core.extensions.capability_nodes``; bounds are checked at construction."""

from skulk_core.extensions.capability_nodes import (
    MAX_ACTION_PAYLOAD_BYTES,
    MAX_ACTIONS,
    MAX_NODES_PER_HOST,
    MAX_SURFACES,
    CapabilityNodeAction,
    CapabilityNodeStatus,
    CapabilityNodeSummary,
    CapabilityNodeSurface,
)

__all__ = [
    "MAX_ACTIONS",
    "MAX_ACTION_PAYLOAD_BYTES",
    "MAX_NODES_PER_HOST",
    "MAX_SURFACES",
    "CapabilityNodeAction",
    "CapabilityNodeStatus",
    "CapabilityNodeSummary",
    "CapabilityNodeSurface",
]
