"""``skulk.extensions``: what an extension imports (the spec's module of that name).

Re-exports only: the implementation is ``skulk_daemon.extensions`` (context, chat
middleware, lifecycle hooks, capability types from ``skulk_core.extensions``) and the
optional management facets of ``skulk_core.plugins.node_configuration``:

- :class:`NodeConfigurationProvider`: ``configuration_nodes()``,
  ``node_configuration(node_id)``, ``configure_node(node_id, mutation)`` over
  :class:`ConfigurableNode`, :class:`NodeConfiguration`,
  :class:`NodeConfigurationMutation` and :class:`NodeConfigurationResult`;
- :class:`NodeCredentialsProvider`: ``node_credentials(node_id)`` and
  ``configure_node_credential(node_id, mutation)`` over :class:`NodeCredentials`,
  :class:`NodeCredential` and the write-only :class:`NodeCredentialMutation`.

A minimal provider::

    from skulk.extensions import CapabilityCall, CapabilityDescriptor, ExtensionContext

    ECHO = CapabilityDescriptor(id="echo", version="1.0.0", title="Echo",
                                description="Returns its text.",
                                input_schema={"type": "object"},
                                output_schema={"type": "object"})

    class EchoExtension:
        name = "echo"
        skulk_requires = ">=0.1,<1"

        def capabilities(self) -> list[CapabilityDescriptor]:
            return [ECHO]

        async def handle_call(self, context: ExtensionContext, call: CapabilityCall):
            return dict(call.payload)

registered under ``[project.entry-points."skulk.extensions"]``.
"""

from skulk_core.plugins.node_configuration import (
    MAX_CREDENTIAL_VALUE_BYTES,
    MAX_CREDENTIALS,
    ConfigurableNode,
    ConfigurationOperation,
    CredentialOperation,
    NodeConfiguration,
    NodeConfigurationMutation,
    NodeConfigurationProvider,
    NodeConfigurationRefused,
    NodeConfigurationResult,
    NodeCredential,
    NodeCredentialMutation,
    NodeCredentials,
    NodeCredentialsProvider,
    UnknownNode,
    schema_digest,
)
from skulk_daemon.extensions import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_MEDIA_BYTES,
    MAX_PAYLOAD_BYTES,
    BaseChatMiddleware,
    BlobMediaAttachment,
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityError,
    CapabilityErrorCode,
    CapabilityNodeAction,
    CapabilityNodeStatus,
    CapabilityNodeSummary,
    CapabilityNodeSurface,
    CapabilityReadiness,
    CapabilityResult,
    CapabilityStreamFrame,
    CapabilityStreamInput,
    CapabilityStreamSession,
    ChatMessage,
    ChatResponseSummary,
    ChatTaskParams,
    ClusterNodeView,
    ExtensionContext,
    InlineMediaAttachment,
    IoMode,
    SupportsExtensionShutdown,
    descriptor_revision,
)

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_CREDENTIALS",
    "MAX_CREDENTIAL_VALUE_BYTES",
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
    "ConfigurableNode",
    "ConfigurationOperation",
    "CredentialOperation",
    "ExtensionContext",
    "InlineMediaAttachment",
    "IoMode",
    "NodeConfiguration",
    "NodeConfigurationMutation",
    "NodeConfigurationProvider",
    "NodeConfigurationRefused",
    "NodeConfigurationResult",
    "NodeCredential",
    "NodeCredentialMutation",
    "NodeCredentials",
    "NodeCredentialsProvider",
    "SupportsExtensionShutdown",
    "UnknownNode",
    "descriptor_revision",
    "schema_digest",
]
