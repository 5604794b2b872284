"""The settings and credential facets a plugin implements to be configured through Skulk.

A plugin exposes its installed nodes' ordinary settings by implementing
:class:`NodeConfigurationProvider` (``configuration_nodes()``,
``node_configuration(node_id)``, ``configure_node(node_id, mutation)``) and, separately,
write-only credential entry by implementing :class:`NodeCredentialsProvider`. Both are
optional and independent of capability readiness. The plugin owns its store, its
validation, its preflight and its cleanup obligations; Skulk only authorizes, fences and
bounds. Every mutation carries ``expected_revision`` and ``expected_schema_digest``; a
provider checks both before it validates or persists anything.

The HTTP representation uses camelCase names (``nodeId``, ``schemaDigest``, ...); the
Python fields stay snake_case. Credential values travel in one direction only: into
:class:`NodeCredentialMutation`, whose ``repr`` never shows them, and never back out of
any type here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Final, Literal, Protocol, runtime_checkable

import msgspec

from skulk_core.extensions.capability_nodes import CapabilityNodeStatus
from skulk_core.plugins.canonical import canonical_sha256

MAX_PROVIDERS: Final = 32
"""Inventory lists at most this many configuration providers."""
MAX_NODES_PER_PROVIDER: Final = 128
MAX_CONFIGURATION_BYTES: Final = 128 * 1024
"""An ordinary configuration response is bounded to 128 KiB."""
MAX_CREDENTIALS: Final = 16
MAX_CREDENTIAL_METADATA_BYTES: Final = 64 * 1024
MAX_CREDENTIAL_VALUE_BYTES: Final = 4096
"""A credential value is nonempty UTF-8 of at most 4096 bytes."""
OPERATION_ID_PATTERN: Final = "^[0-9a-f]{32}$"
"""Operation ids are 32 lowercase hexadecimal characters."""
SHA256_HEX_PATTERN: Final = "^[0-9a-f]{64}$"

_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
_Text = Annotated[str, msgspec.Meta(max_length=1024)]
_Revision = Annotated[int, msgspec.Meta(ge=0)]
_Digest = Annotated[str, msgspec.Meta(pattern=SHA256_HEX_PATTERN)]
OperationId = Annotated[str, msgspec.Meta(pattern=OPERATION_ID_PATTERN)]

ConfigurationOperation = Literal["validate", "edit", "enable", "disable"]
CredentialOperation = Literal["replace", "retire"]


def schema_digest(schema: dict[str, Any]) -> str:
    """The ``schemaDigest`` fence of a configuration or credential schema: lowercase hex
    SHA-256 of its canonical JSON. Providers may use any stable digest; this is the one
    Skulk's own providers use."""
    return canonical_sha256(schema)


class ConfigurableNode(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One installed node in a provider's inventory (disabled nodes included)."""

    node_id: _Id
    bundle_id: _Id
    version: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    status: CapabilityNodeStatus
    configurable: bool = True
    credentials_configurable: bool = False
    """``False`` for nodes without credential inputs (and legacy providers)."""
    setup_available: bool = False
    setup_actions_available: bool = False
    proposals_available: bool = False
    proposal_actions_available: bool = False


class NodeConfiguration(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A node's ordinary settings: never credential values or protected-file paths."""

    node_id: _Id
    revision: _Revision
    schema_digest: _Digest
    configuration_schema: dict[str, Any]
    values: dict[str, Any]
    enabled: bool


class NodeConfigurationMutation(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    """One fenced change: both fences must match before the provider validates."""

    operation: ConfigurationOperation
    expected_revision: _Revision
    expected_schema_digest: _Digest
    values: dict[str, Any] | None = None
    """Required for ``validate`` and ``edit``; refused for ``enable``/``disable``."""

    def __post_init__(self) -> None:
        needs_values = self.operation in ("validate", "edit")
        if needs_values and self.values is None:
            raise ValueError(f"values is required for {self.operation}")
        if not needs_values and self.values is not None:
            raise ValueError(f"{self.operation} takes no values")


class NodeConfigurationResult(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    configuration: NodeConfiguration
    validated: bool


class NodeCredential(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Credential metadata: no value, no value fingerprint, no backend path."""

    credential_id: _Id
    title: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    description: _Text = ""
    required: bool = False
    ready: bool = False


class NodeCredentials(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    node_id: _Id
    revision: _Revision
    schema_digest: _Digest
    credentials: Annotated[tuple[NodeCredential, ...], msgspec.Meta(max_length=MAX_CREDENTIALS)]


class NodeCredentialMutation(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    """Replace or retire one plugin-declared credential. The value is write-only."""

    operation: CredentialOperation
    operation_id: OperationId
    credential_id: _Id
    expected_revision: _Revision
    expected_schema_digest: _Digest
    value: str | None = None

    def __post_init__(self) -> None:
        if self.operation == "retire":
            if self.value is not None:
                raise ValueError("retire takes no value")
            return
        if self.value is None or not self.value:
            raise ValueError("replace needs a nonempty value")
        if len(self.value.encode("utf-8", "surrogatepass")) > MAX_CREDENTIAL_VALUE_BYTES:
            raise ValueError(f"a credential value is at most {MAX_CREDENTIAL_VALUE_BYTES} bytes")
        try:
            self.value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a credential value must be UTF-8 text") from None

    def __repr__(self) -> str:
        # NOTE: the value never reaches a log line, a traceback or an error message.
        shown = "None" if self.value is None else "'<redacted>'"
        return (
            f"NodeCredentialMutation(operation={self.operation!r}, "
            f"operation_id={self.operation_id!r}, credential_id={self.credential_id!r}, "
            f"expected_revision={self.expected_revision}, value={shown})"
        )

    __str__ = __repr__


class UnknownNode(LookupError):
    """The provider has no installed node with that id (HTTP 404)."""


class NodeConfigurationRefused(Exception):
    """A stale fence or a validation refusal (HTTP 409). ``message`` is shown to the
    caller as is: it must name the problem without echoing a submitted value."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@runtime_checkable
class NodeConfigurationProvider(Protocol):
    """The optional settings facet of an extension (``skulk.extensions``).

    Identify each installed node persistently; include disabled nodes. A mutation must
    match both fences before validation and atomic persistence; ``enable`` runs the
    plugin's own preflight; ``disable`` keeps cleanup obligations.
    """

    async def configuration_nodes(self) -> Sequence[ConfigurableNode]: ...

    async def node_configuration(self, node_id: str) -> NodeConfiguration: ...

    async def configure_node(
        self, node_id: str, mutation: NodeConfigurationMutation
    ) -> NodeConfigurationResult: ...


@runtime_checkable
class NodeCredentialsProvider(Protocol):
    """The optional write-only credential facet. Deduplicate exact operation ids
    durably, refuse a reused id with different intent, keep prior versions cleanup
    needs, and never return a value."""

    async def node_credentials(self, node_id: str) -> NodeCredentials: ...

    async def configure_node_credential(
        self, node_id: str, mutation: NodeCredentialMutation
    ) -> NodeCredentials: ...
