"""What a managed owner's description (its ``describe`` answer) makes of it."""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec

from skulk_core.extensions.capabilities import CapabilityDescriptor
from skulk_core.plugins.node_configuration import MAX_NODES_PER_PROVIDER, ConfigurableNode
from skulk_daemon.capabilities.registry import Registration, compile_descriptor
from skulk_daemon.plugins.owners.owner import ManagedOwner, ManagedOwnerProvider
from skulk_host.plugin_owners import wire

log = logging.getLogger("skulk_daemon.plugins.owners.adapter")


def learn(
    owner: ManagedOwner, described: object, provider: Callable[[ManagedOwner], ManagedOwnerProvider]
) -> None:
    """Take ``described`` (an owner's ``describe`` answer) as what ``owner`` is now:
    its nodes, protocol (refused outside this host's), facets and the capabilities it
    claims, compiled for ``provider(owner)``; raises ValueError when unreadable."""
    if not isinstance(described, dict):
        raise ValueError("description is not an object")
    nodes = msgspec.convert(described.get("nodes") or [], tuple[ConfigurableNode, ...])
    owner.nodes = nodes[:MAX_NODES_PER_PROVIDER]
    protocol = described.get("protocol")
    owner.protocol = protocol if isinstance(protocol, int) else None
    if owner.protocol not in wire.SUPPORTED_PROTOCOLS:
        if owner.refusal != "owner_protocol_unsupported":
            log.error(
                "%s: refused (owner_protocol_unsupported): protocol %r; this host accepts %s",
                owner.plugin_id,
                protocol,
                sorted(wire.SUPPORTED_PROTOCOLS),
            )
        owner.refusal = "owner_protocol_unsupported"
    elif owner.refusal == "owner_protocol_unsupported":
        owner.refusal = None
    owner.credentials = bool(described.get("credentials"))
    owner.host_callbacks = described.get("host_callbacks_available") is True
    facets = ("preflight", "setup", "proposals", "proposal_actions", "setup_actions")
    owner.facets = frozenset(f for f in facets if described.get(f) is True)
    registered = owner.provider or provider(owner)
    owner.provider = registered
    compiled: dict[str, Registration] = {}
    descriptors = msgspec.convert(described.get("capabilities") or [], list[CapabilityDescriptor])
    for descriptor in descriptors:
        if descriptor.io_mode != "unary" and owner.protocol != wire.STREAMING_PROTOCOL:
            log.warning(
                "%s: streaming capability %s hidden: streaming needs owner protocol %d",
                owner.plugin_id,
                descriptor.qualified_id,
                wire.STREAMING_PROTOCOL,
            )
            continue
        try:
            registration = compile_descriptor(descriptor, registered, None, builtin=False)
        except ValueError as exc:
            log.error("%s: capability refused: %s", owner.plugin_id, exc)
            continue
        compiled.setdefault(registration.qualified_id, registration)
    owner.registrations = list(compiled.values())
    owner.ready_ids = frozenset(str(i) for i in described.get("ready") or [])
    owner.described = True
