"""The pure half of the extension contract: capability types, bounds and rules.

Extension authors import these through ``skulk_daemon.extensions`` (Skulk's
``skulk.extensions``); this package holds the values and checks that need no runtime.
The plugin-owner facets (``node_setup``, ``proposals``, ``setup_actions``,
``host_callbacks``) live here too: the daemon's plugin doors and the public
``skulk.extensions.*`` modules both read them.
"""

from skulk_core.extensions.capabilities import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_MEDIA_BYTES,
    MAX_PAYLOAD_BYTES,
    BlobMediaAttachment,
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityError,
    CapabilityErrorCode,
    CapabilityReadiness,
    CapabilityResult,
    CapabilityStreamFrame,
    CapabilityStreamInput,
    CapabilityStreamSession,
    InlineMediaAttachment,
    IoMode,
    descriptor_revision,
)
from skulk_core.extensions.capability_nodes import (
    CapabilityNodeAction,
    CapabilityNodeStatus,
    CapabilityNodeSummary,
    CapabilityNodeSurface,
)

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_MEDIA_BYTES",
    "MAX_PAYLOAD_BYTES",
    "BlobMediaAttachment",
    "CapabilityCall",
    "CapabilityDescriptor",
    "CapabilityError",
    "CapabilityErrorCode",
    "CapabilityNodeAction",
    "CapabilityNodeStatus",
    "CapabilityNodeSummary",
    "CapabilityNodeSurface",
    "CapabilityReadiness",
    "CapabilityResult",
    "CapabilityStreamFrame",
    "CapabilityStreamInput",
    "CapabilityStreamSession",
    "InlineMediaAttachment",
    "IoMode",
    "descriptor_revision",
]
