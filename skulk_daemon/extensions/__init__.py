"""``skulk_daemon.extensions``: Skulk's ``skulk.extensions``, the extension author's surface.

The spec's ``skulk.extensions`` module is this package; everything an extension imports
is re-exported here. An extension is an installed distribution registering a
zero-argument factory in the ``skulk.extensions`` entry-point group; the object it makes
has ``name``, ``skulk_requires`` (a PEP 440 specifier checked against the running
Skulk) and optionally ``chat_middleware()``, ``capabilities()`` with the provider
handlers, ``on_start(context)`` and ``async on_stop()``::

    [project.entry-points."skulk.extensions"]
    audit-example = "my_skulk_extension.extension:AuditExtension"

``ChatTaskParams`` is the normalized chat request a middleware transforms (the spec's
``TextGenerationTaskParams``); ``ChatMessage`` is one of its messages.
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
from skulk_daemon.extensions.context import ClusterNodeView, ExtensionContext
from skulk_daemon.extensions.lifecycle import SupportsExtensionShutdown
from skulk_daemon.extensions.middleware import (
    BaseChatMiddleware,
    ChatMessage,
    ChatResponseSummary,
    ChatTaskParams,
)

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_MEDIA_BYTES",
    "MAX_PAYLOAD_BYTES",
    "BaseChatMiddleware",
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
    "ChatMessage",
    "ChatResponseSummary",
    "ChatTaskParams",
    "ClusterNodeView",
    "ExtensionContext",
    "InlineMediaAttachment",
    "IoMode",
    "SupportsExtensionShutdown",
    "descriptor_revision",
]
