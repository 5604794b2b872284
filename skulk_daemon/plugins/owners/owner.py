"""One managed owner as the API process sees it, and as a provider of the registry."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, Protocol

import msgspec

from skulk_core.extensions.capabilities import (
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityError,
    CapabilityStreamFrame,
)
from skulk_core.plugins.node_configuration import ConfigurableNode
from skulk_daemon.capabilities.registry import Registration
from skulk_host.plugin_owners import wire

CALL_GRACE_SECONDS: Final = 0.5
"""The socket outlives the call's deadline by this much, so the deadline (not the
socket) ends a hanging call, with the fabric's typed ``timeout``."""

Refusal = Literal["transport_identity_mismatch", "owner_protocol_unsupported"]
"""Why an owner that answers is still refused."""

REFUSALS: Final[dict[str, str]] = {
    "transport_identity_mismatch": "the managed owner is bound to another Skulk transport "
    "identity (transport_identity_mismatch)",
    "owner_protocol_unsupported": "the managed owner speaks an owner protocol this host does "
    "not accept (owner_protocol_unsupported)",
}
"""What a request to a refused owner is told."""


class OwnerCalls(Protocol):
    """What a provider asks of the adapter (:class:`~.adapter.ManagedOwners`)."""

    def capability_ready(self, owner: ManagedOwner, qualified_id: str) -> bool: ...

    async def ask(self, plugin_id: str, message: dict[str, object], timeout: float) -> object: ...  # noqa: ASYNC109 (the socket's own)

    async def admit_stream(
        self, owner: ManagedOwner, call: CapabilityCall
    ) -> CapabilityError | None: ...

    def relay(
        self,
        owner: ManagedOwner,
        call: CapabilityCall,
        frames: AsyncIterator[CapabilityStreamFrame] | None,
    ) -> AsyncIterator[CapabilityStreamFrame]: ...


class ManagedOwnerProvider:
    """One owner as a capability provider of the registry (every mode its protocol
    allows)."""

    def __init__(self, owner: ManagedOwner, owners: OwnerCalls) -> None:
        self._owner = owner
        self._owners = owners

    def capabilities(self) -> list[CapabilityDescriptor]:
        return [r.descriptor for r in self._owner.registrations]

    def capability_ready(self, qualified_id: str) -> bool:
        return self._owners.capability_ready(self._owner, qualified_id)

    async def handle_call(self, context: object, call: CapabilityCall) -> dict[str, Any]:
        message = {"op": "call", "call": msgspec.to_builtins(call)}
        try:
            answer = await self._owners.ask(
                self._owner.plugin_id, message, call.timeout_seconds + CALL_GRACE_SECONDS
            )
        except wire.OwnerError as refused:
            raise RuntimeError(f"the managed owner refused the call ({refused.code})") from None
        except wire.OwnerUnavailable as lost:
            # NOTE: never resent: the owner may have run it; the caller decides.
            raise RuntimeError(f"the managed owner's answer was lost: {lost.message}") from None
        output = answer.get("output") if isinstance(answer, dict) else None
        if not isinstance(output, dict):
            raise RuntimeError("the managed owner answered without an output object")
        return output

    async def admit_stream(self, context: object, call: CapabilityCall) -> CapabilityError | None:
        return await self._owners.admit_stream(self._owner, call)

    def handle_stream(
        self, context: object, call: CapabilityCall
    ) -> AsyncIterator[CapabilityStreamFrame]:
        return self._owners.relay(self._owner, call, None)

    def handle_input_stream(
        self, context: object, call: CapabilityCall, frames: AsyncIterator[CapabilityStreamFrame]
    ) -> AsyncIterator[CapabilityStreamFrame]:
        return self._owners.relay(self._owner, call, frames)


@dataclass
class ManagedOwner:
    plugin_id: str
    installation: Path
    enabled: bool | None = None
    """From the inventory: ``None`` when unknown (no manager answer yet, or unreadable)."""
    inventory: dict[str, Any] = field(default_factory=dict)
    observed_at: float | None = None
    described: bool = False
    describe_revision: str | None = None
    nodes: tuple[ConfigurableNode, ...] = ()
    protocol: int | None = None
    """The owner protocol its description announced (3: unary only, 4: streaming)."""
    refusal: Refusal | None = None
    """Set while the owner answers but is refused (foreign identity, protocol)."""
    credentials: bool = False
    facets: frozenset[str] = frozenset()
    """The optional facets the owner declares (preflight, setup, proposals,
    proposal_actions, setup_actions)."""
    registrations: list[Registration] = field(default_factory=list)
    ready_ids: frozenset[str] = frozenset()
    provider: ManagedOwnerProvider | None = None
    host_callbacks: bool = False
    """Whether the owner describes ``host_callbacks_available``."""
    host_link: asyncio.Task[None] | None = None
    """The attached ``host.sock`` connection, while it lasts."""


def unlink(owner: ManagedOwner) -> None:
    """Close the owner's host-callback connection, if any."""
    if owner.host_link is not None:
        owner.host_link.cancel()
        owner.host_link = None
