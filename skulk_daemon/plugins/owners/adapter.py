"""The managed-owner adapter: each supervised owner's nodes, settings and capabilities,
seen from the API process.

Once a second :class:`ManagedOwners` reads the manager's inventory (through the
protected connection record, so a manager or an installation set up later is found
without a restart) and polls each enabled owner's ``health`` with a one-second
timeout; a changed description is read again (``describe``: installed nodes and the
cached unary descriptors). Observations older than three seconds are refused: the
owner's capabilities stop being ready (and its node reads ``available: false``) until
it answers again. Manager health fences admission independently: without a fresh
manager answer no owner capability is ready, whatever its owner says.

Capabilities join the node's fabric as a *dynamic* source of the registry: static IDs
keep priority, a contract two owners claim is hidden from both, and calls go to the
owner over its socket (unary, the call's own deadline, the 64 KiB invocation bound,
never replayed after a lost answer). An owner speaking protocol 4 also serves its
server-streaming, client-streaming and bidirectional descriptors through the same
registry (so the fabric's stream API, its guards and a second node reach them): each
stream is admitted on its own owner connection (``admit_stream``), then relayed frame
by frame; the terminal is withheld until the owner's cleanup acknowledgment and a
clean close, and closing the relay (cancellation, deadline) closes the connection,
which cancels the owner's handler. A protocol-3 owner's streaming claims are hidden;
its unary capabilities are unchanged.

On attaching, the adapter binds this node's transport node id to each owner; an owner
that reports another identity (or a protocol outside 3-4) is refused: unavailable,
its capabilities not ready, requests to it answered with the refusal's code.

An owner that describes ``host_callbacks_available: true`` is attached on its
``host.sock`` (:mod:`.host_link`) once observed and bound: the adapter answers its
``actions`` (no steward here: nothing permitted), ``revisions`` (its descriptors the
fabric serves now) and ``invoke`` (through this node's fabric, exactly as any caller's
call). A connection that ends is attached again (a fresh bind) on a later poll; nothing
is replayed. Disable, uninstall, a refusal and shutdown close it.

An explicit disable or uninstall releases the owner's cached capability IDs; an owner
whose enabled state is unknown keeps reserving them. Capability ids are advertised as
telemetry tags, reconciled each poll, and withdrawn on shutdown.
``SKULK_EXTENSIONS_DISABLE=1`` turns capability admission off; configuration stays
available.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec

from skulk_core.extensions.capabilities import (
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityError,
    CapabilityErrorCode,
    CapabilityStreamFrame,
)
from skulk_core.plugins.errors import PluginRefusal
from skulk_core.plugins.node_configuration import (
    MAX_NODES_PER_PROVIDER,
    ConfigurableNode,
)
from skulk_daemon.capabilities.registry import Registration, compile_descriptor
from skulk_daemon.plugins.access import ManagerAccess
from skulk_daemon.plugins.owners import host_link, host_wire
from skulk_host.plugin_manager.connection import read_connection
from skulk_host.plugin_manager.protocol import ListRequest
from skulk_host.plugin_manager.store import Store
from skulk_host.plugin_owners import wire

if TYPE_CHECKING:
    from skulk_daemon.capabilities.service import CapabilityService

log = logging.getLogger(__name__)

POLL_SECONDS: Final = 1.0
STALE_SECONDS: Final = 3.0
"""An observation older than this is refused."""
DISABLE_ENV: Final = "SKULK_EXTENSIONS_DISABLE"
CALL_GRACE_SECONDS: Final = 0.5
"""The socket outlives the call's deadline by this much, so the deadline (not the
socket) ends a hanging call, with the fabric's typed ``timeout``."""
UNCLAIMED_STREAM_SECONDS: Final = 5.0
"""An admitted owner connection no relay claims (the fabric refused it after
admission) is closed after this long, which cancels the owner's handler."""

Refusal = Literal["transport_identity_mismatch", "owner_protocol_unsupported"]
"""Why an owner that answers is still refused."""
_OWNER_CODES: Final[dict[str, CapabilityErrorCode]] = {
    "unsupported": "not_found",
    "busy": "overloaded",
    "too_large": "payload_too_large",
    "malformed": "invalid_payload",
    "timeout": "timeout",
}


class ManagedOwnerProvider:
    """One owner as a capability provider of the registry (every mode its protocol
    allows)."""

    def __init__(self, owner: _Owner, owners: ManagedOwners) -> None:
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
class _Owner:
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


class ManagedOwners:
    def __init__(
        self,
        access: ManagerAccess,
        fabric: CapabilityService | None = None,
        *,
        transport_node_id: str | None = None,
    ) -> None:
        self.access = access
        self.fabric = fabric
        self._transport_node_id = transport_node_id
        self._pending: dict[tuple[str, str], tuple[wire.StreamConnection, asyncio.TimerHandle]] = {}
        self.admission = os.environ.get(DISABLE_ENV) != "1"
        self._owners: dict[str, _Owner] = {}
        self._manager_at: float | None = None
        self._advertised: set[str] = set()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        if fabric is not None and self.admission:
            fabric.add_dynamic_source(self.registrations)

    # -- observation --------------------------------------------------------------------

    @staticmethod
    def _fresh(at: float | None) -> bool:
        return at is not None and time.monotonic() - at <= STALE_SECONDS

    def manager_available(self) -> bool:
        return self._fresh(self._manager_at)

    def transport_node_id(self) -> str | None:
        """This host's Skulk transport identity (the fabric's node id)."""
        if self._transport_node_id is None and self.fabric is not None:
            self._transport_node_id = str(self.fabric.node_id)
        return self._transport_node_id

    def owner_available(self, owner: _Owner) -> bool:
        return owner.refusal is None and self.manager_available() and self._fresh(owner.observed_at)

    def capability_ready(self, owner: _Owner, qualified_id: str) -> bool:
        return (
            self.admission
            and owner.enabled is True
            and self.owner_available(owner)
            and qualified_id in owner.ready_ids
        )

    def registrations(self) -> list[Registration]:
        """The dynamic source: every claim still reserved (explicitly disabled or
        uninstalled owners release theirs; unknown state keeps them)."""
        claims: list[Registration] = []
        for owner in list(self._owners.values()):
            if owner.enabled is not False:
                claims.extend(owner.registrations)
        return claims

    def owners(self) -> list[_Owner]:
        return [self._owners[k] for k in sorted(self._owners)]

    def owner(self, plugin_id: str) -> _Owner | None:
        return self._owners.get(plugin_id)

    async def ask(self, plugin_id: str, message: dict[str, Any], timeout: float) -> Any:  # noqa: ASYNC109 (the socket's own)
        """One request to ``plugin_id``'s owner (raises the wire's errors)."""
        owner = self._owners.get(plugin_id)
        if owner is None:
            raise wire.OwnerUnavailable("no such managed owner")
        if owner.refusal is not None:
            raise wire.OwnerUnavailable(_REFUSALS[owner.refusal])
        return await wire.arequest(wire.socket_path(owner.installation), message, timeout)

    # -- streams ------------------------------------------------------------------------

    async def admit_stream(self, owner: _Owner, call: CapabilityCall) -> CapabilityError | None:
        """Open the call's owner connection and pass its admission; the connection waits
        for the relay the fabric starts next."""
        if owner.refusal is not None:
            return CapabilityError(code="not_found", message=_REFUSALS[owner.refusal])
        message = {"op": "stream", "call": msgspec.to_builtins(call)}
        try:
            connection = await wire.open_stream(
                wire.socket_path(owner.installation), message, call.timeout_seconds
            )
        except wire.StreamRefused as refused:
            typed = refused.capability_error
            if isinstance(typed, dict):
                try:
                    return msgspec.convert(typed, CapabilityError)
                except msgspec.ValidationError:
                    pass
            code = _OWNER_CODES.get(refused.code, "provider_error")
            return CapabilityError(
                code=code, message=f"the managed owner refused: {refused.message}"
            )
        except wire.OwnerError as refused:
            code = _OWNER_CODES.get(refused.code, "provider_error")
            return CapabilityError(code=code, message=refused.message)
        except wire.OwnerUnavailable as lost:
            code = "timeout" if lost.timed_out else "provider_error"
            return CapabilityError(code=code, message=f"the managed owner: {lost.message}")
        key = (owner.plugin_id, call.call_id)
        stale = self._pending.pop(key, None)
        if stale is not None:
            stale[0].close()
            stale[1].cancel()
        timer = asyncio.get_running_loop().call_later(
            UNCLAIMED_STREAM_SECONDS, self._unclaimed, key
        )
        self._pending[key] = (connection, timer)
        return None

    def _unclaimed(self, key: tuple[str, str]) -> None:
        entry = self._pending.pop(key, None)
        if entry is not None:
            entry[0].close()

    async def relay(
        self,
        owner: _Owner,
        call: CapabilityCall,
        frames: AsyncIterator[CapabilityStreamFrame] | None,
    ) -> AsyncIterator[CapabilityStreamFrame]:
        """The owner's frames for ``call`` (caller input forwarded while it lasts)."""
        entry = self._pending.pop((owner.plugin_id, call.call_id), None)
        if entry is None:
            raise RuntimeError("the managed stream was not admitted by its owner")
        connection, timer = entry
        timer.cancel()
        forward = None if frames is None else asyncio.create_task(_forward(connection, frames))
        terminal: CapabilityStreamFrame | None = None
        try:
            while True:
                try:
                    packet = await connection.receive()
                except wire.StreamBroken as broken:
                    raise RuntimeError(
                        f"the managed owner's stream broke: {broken.message}"
                    ) from None
                if packet is None:
                    if forward is not None and forward.done() and not forward.cancelled():
                        refused = forward.result()
                        if refused is not None:
                            raise RuntimeError(f"caller input was refused: {refused}")
                    raise RuntimeError("the managed owner closed the stream before its cleanup")
                if packet[0].get("kind") == "cleanup":
                    if terminal is None:
                        raise RuntimeError(
                            "the managed owner acknowledged cleanup before its terminal"
                        )
                    try:
                        trailing = await connection.receive()
                    except wire.StreamBroken:
                        trailing = packet  # not a clean close
                    if trailing is not None:
                        raise RuntimeError("the managed owner did not close after its cleanup")
                    break
                try:
                    item = wire.packet_frame(call.call_id, "provider_to_caller", packet)
                except wire.StreamBroken as broken:
                    raise RuntimeError(f"the managed owner: {broken.message}") from None
                if terminal is not None:
                    raise RuntimeError("the managed owner sent output after its terminal")
                if item.terminal:
                    # NOTE: withheld until the owner acknowledges its cleanup and closes;
                    # caller input stops being forwarded now.
                    terminal = item
                    if forward is not None:
                        forward.cancel()
                    continue
                yield item
            yield terminal
        finally:
            if forward is not None:
                forward.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await forward
            connection.close()  # before the terminal: the owner cancels its handler

    async def poll_once(self) -> None:
        try:
            root = read_connection(self.access.config_home).root
            answer = await self.access.call(ListRequest())
        except PluginRefusal:
            self._manager_at = None
            self._reconcile_tags()
            return
        if not answer.get("ok"):
            self._manager_at = None
            self._reconcile_tags()
            return
        self._manager_at = time.monotonic()
        store = Store(root)
        listed = {str(i["plugin_id"]): i for i in answer["result"]["installations"]}
        for plugin_id in list(self._owners):
            if plugin_id not in listed:
                _unlink(self._owners.pop(plugin_id))  # purged: nothing left to manage
        for plugin_id, entry in listed.items():
            installation = store.directory(plugin_id)
            owner = self._owners.get(plugin_id)
            if owner is None or owner.installation != installation:
                owner = self._owners[plugin_id] = _Owner(plugin_id, installation)
            owner.inventory = entry
            owner.enabled = bool(entry.get("enabled")) and not entry.get("uninstalled")
            if owner.enabled is False:
                owner.observed_at = None
                _unlink(owner)
        await asyncio.gather(*(self._observe(o) for o in self._owners.values() if o.enabled))
        self._reconcile_tags()

    async def observe(self, owner: _Owner) -> None:
        """Read ``owner``'s health (binding this host's identity first, once), and its
        description when it changed."""
        await self._observe(owner)

    async def _bound(self, owner: _Owner, path: Path, reported: object) -> bool:
        """Whether the owner reports (or now binds) this host's transport identity."""
        ours = self.transport_node_id()
        if ours is None:
            return True  # nothing to bind: no fabric (tests of the bare adapter)
        if reported is None:
            try:
                bound = await wire.arequest(
                    path, {"op": "bind", "transport_node_id": ours}, wire.HEALTH_TIMEOUT_SECONDS
                )
            except wire.OwnerError:
                bound = None  # bound meanwhile to someone else (or it cannot bind)
            reported = bound.get("transport_node_id") if isinstance(bound, dict) else None
        if reported == ours:
            return True
        if owner.refusal != "transport_identity_mismatch":
            log.error(
                "%s: refused (transport_identity_mismatch): the owner is bound to another "
                "Skulk transport identity",
                owner.plugin_id,
            )
        owner.refusal = "transport_identity_mismatch"
        owner.observed_at = None
        return False

    async def _observe(self, owner: _Owner) -> None:
        path = wire.socket_path(owner.installation)
        try:
            health = await wire.arequest(path, {"op": "health"}, wire.HEALTH_TIMEOUT_SECONDS)
            revision = str(health.get("describe_revision")) if isinstance(health, dict) else None
            if revision is None or health.get("healthy") is not True:
                return
            if not await self._bound(owner, path, health.get("transport_node_id")):
                return
            if owner.refusal == "transport_identity_mismatch":
                owner.refusal = None
            if revision != owner.describe_revision or not owner.described:
                described = await wire.arequest(
                    path, {"op": "describe"}, wire.HEALTH_TIMEOUT_SECONDS
                )
                self._learn(owner, described)
                owner.describe_revision = revision
            if owner.refusal is not None:
                owner.observed_at = None
                _unlink(owner)
                return
            owner.observed_at = time.monotonic()
            self._link(owner, path)
        except (wire.OwnerUnavailable, wire.OwnerError):
            return  # the observation ages; readiness lapses after three seconds
        except Exception:
            log.warning("%s: the owner's description is unreadable", owner.plugin_id)

    def _link(self, owner: _Owner, control: Path) -> None:
        """Attach ``owner``'s host callbacks when it offers them and none is live."""
        ours = self.transport_node_id()
        if not owner.host_callbacks or ours is None:
            _unlink(owner)
            return
        if owner.host_link is not None and not owner.host_link.done():
            return
        path = control.parent / host_wire.HOST_SOCKET_NAME
        target = host_link.FabricCallbacks(self.fabric, lambda: owner.provider)
        owner.host_link = asyncio.create_task(host_link.run(owner.plugin_id, path, ours, target))

    def _learn(self, owner: _Owner, described: Any) -> None:
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
        provider = owner.provider or ManagedOwnerProvider(owner, self)
        owner.provider = provider
        compiled: dict[str, Registration] = {}
        descriptors = msgspec.convert(
            described.get("capabilities") or [], list[CapabilityDescriptor]
        )
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
                registration = compile_descriptor(descriptor, provider, None, builtin=False)
            except ValueError as exc:
                log.error("%s: capability refused: %s", owner.plugin_id, exc)
                continue
            compiled.setdefault(registration.qualified_id, registration)
        owner.registrations = list(compiled.values())
        owner.ready_ids = frozenset(str(i) for i in described.get("ready") or [])
        owner.described = True

    def _reconcile_tags(self) -> None:
        fabric = self.fabric
        if fabric is None:
            return
        ready = {
            r.descriptor.id
            for r in fabric.ready_registrations()
            if isinstance(r.provider, ManagedOwnerProvider)
        }
        for tag in ready - self._advertised:
            fabric.advertise(tag)
        for tag in self._advertised - ready:
            if tag not in fabric.static_ids():
                fabric.withdraw(tag)
        self._advertised = ready

    # -- lifetime -----------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                await self.poll_once()
            except Exception:
                log.exception("observing the managed owners failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), POLL_SECONDS)

    async def start(self) -> None:
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop observing and withdraw the dynamic tags (the owners keep running)."""
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._manager_at = None
        for connection, timer in self._pending.values():
            timer.cancel()
            connection.close()
        self._pending.clear()
        for owner in self._owners.values():
            if owner.host_link is not None:
                owner.host_link.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await owner.host_link
                owner.host_link = None
        fabric = self.fabric
        if fabric is not None:
            for tag in self._advertised:
                if tag not in fabric.static_ids():
                    fabric.withdraw(tag)
        self._advertised = set()


_REFUSALS: Final[dict[str, str]] = {
    "transport_identity_mismatch": "the managed owner is bound to another Skulk transport "
    "identity (transport_identity_mismatch)",
    "owner_protocol_unsupported": "the managed owner speaks an owner protocol this host does "
    "not accept (owner_protocol_unsupported)",
}


def _unlink(owner: _Owner) -> None:
    if owner.host_link is not None:
        owner.host_link.cancel()
        owner.host_link = None


async def _forward(
    connection: wire.StreamConnection, frames: AsyncIterator[CapabilityStreamFrame]
) -> str | None:
    """Caller input to the owner: chunks, then ``completed`` (input half-closed). A frame
    the owner protocol cannot carry (a header over 64 KiB) closes the connection, which
    cancels the owner's handler; the reason is returned."""
    try:
        async for item in frames:
            if item.kind == "started":
                continue
            header, media = wire.frame_packet(item)
            if item.kind == "completed":
                header, media = {"kind": "completed", "sequence": item.sequence}, None
            try:
                await wire.write_packet(connection.writer, header, media)
            except (ConnectionError, OSError):
                return None  # the output side sees the owner go
            if item.kind == "completed":
                return None
    except wire.StreamBroken as over:
        connection.close()
        return over.message
    return None
