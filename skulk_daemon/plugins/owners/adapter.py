"""The managed-owner adapter: each supervised owner's nodes, settings and capabilities,
seen from the API process. It observes the owners and composes what else they need:
:mod:`.owner` (one owner and its registry provider), :mod:`.description` (what a
``describe`` answer makes of it) and :mod:`.relay` (its streams).

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
from pathlib import Path
from typing import TYPE_CHECKING, Final

from skulk_core.extensions.capabilities import (
    CapabilityCall,
    CapabilityError,
    CapabilityStreamFrame,
)
from skulk_core.plugins.errors import PluginRefusal
from skulk_daemon.capabilities.registry import Registration
from skulk_daemon.plugins.access import ManagerAccess
from skulk_daemon.plugins.owners import host_link
from skulk_daemon.plugins.owners.description import learn
from skulk_daemon.plugins.owners.owner import (
    REFUSALS,
    ManagedOwner,
    ManagedOwnerProvider,
    unlink,
)
from skulk_daemon.plugins.owners.relay import OwnerStreams
from skulk_host.plugin_manager.connection import read_connection
from skulk_host.plugin_manager.protocol import ListRequest
from skulk_host.plugin_manager.store import Store
from skulk_host.plugin_owners import host_wire, wire

if TYPE_CHECKING:
    from skulk_daemon.capabilities.service import CapabilityService

__all__ = ["ManagedOwner", "ManagedOwnerProvider", "ManagedOwners"]

log = logging.getLogger(__name__)

POLL_SECONDS: Final = 1.0
STALE_SECONDS: Final = 3.0
"""An observation older than this is refused."""
DISABLE_ENV: Final = "SKULK_EXTENSIONS_DISABLE"


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
        self._streams = OwnerStreams()
        self.admission = os.environ.get(DISABLE_ENV) != "1"
        self._owners: dict[str, ManagedOwner] = {}
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

    def owner_available(self, owner: ManagedOwner) -> bool:
        return owner.refusal is None and self.manager_available() and self._fresh(owner.observed_at)

    def capability_ready(self, owner: ManagedOwner, qualified_id: str) -> bool:
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

    def owners(self) -> list[ManagedOwner]:
        return [self._owners[k] for k in sorted(self._owners)]

    def owner(self, plugin_id: str) -> ManagedOwner | None:
        return self._owners.get(plugin_id)

    async def ask(self, plugin_id: str, message: dict[str, object], timeout: float) -> object:  # noqa: ASYNC109 (the socket's own)
        """One request to ``plugin_id``'s owner (raises the wire's errors)."""
        owner = self._owners.get(plugin_id)
        if owner is None:
            raise wire.OwnerUnavailable("no such managed owner")
        if owner.refusal is not None:
            raise wire.OwnerUnavailable(REFUSALS[owner.refusal])
        return await wire.arequest(wire.socket_path(owner.installation), message, timeout)

    # -- streams ------------------------------------------------------------------------

    async def admit_stream(
        self, owner: ManagedOwner, call: CapabilityCall
    ) -> CapabilityError | None:
        """Open the call's owner connection and pass its admission (see
        :class:`~skulk_daemon.plugins.owners.relay.OwnerStreams`)."""
        return await self._streams.admit(owner, call)

    def relay(
        self,
        owner: ManagedOwner,
        call: CapabilityCall,
        frames: AsyncIterator[CapabilityStreamFrame] | None,
    ) -> AsyncIterator[CapabilityStreamFrame]:
        """The owner's frames for ``call`` (caller input forwarded while it lasts)."""
        return self._streams.relay(owner, call, frames)

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
                unlink(self._owners.pop(plugin_id))  # purged: nothing left to manage
        for plugin_id, entry in listed.items():
            installation = store.directory(plugin_id)
            owner = self._owners.get(plugin_id)
            if owner is None or owner.installation != installation:
                owner = self._owners[plugin_id] = ManagedOwner(plugin_id, installation)
            owner.inventory = entry
            owner.enabled = bool(entry.get("enabled")) and not entry.get("uninstalled")
            if owner.enabled is False:
                owner.observed_at = None
                unlink(owner)
        await asyncio.gather(*(self._observe(o) for o in self._owners.values() if o.enabled))
        self._reconcile_tags()

    async def observe(self, owner: ManagedOwner) -> None:
        """Read ``owner``'s health (binding this host's identity first, once), and its
        description when it changed."""
        await self._observe(owner)

    async def _bound(self, owner: ManagedOwner, path: Path, reported: object) -> bool:
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

    async def _observe(self, owner: ManagedOwner) -> None:
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
                learn(owner, described, lambda o: ManagedOwnerProvider(o, self))
                owner.describe_revision = revision
            if owner.refusal is not None:
                owner.observed_at = None
                unlink(owner)
                return
            owner.observed_at = time.monotonic()
            self._link(owner, path)
        except (wire.OwnerUnavailable, wire.OwnerError):
            return  # the observation ages; readiness lapses after three seconds
        except Exception:
            log.warning("%s: the owner's description is unreadable", owner.plugin_id)

    def _link(self, owner: ManagedOwner, control: Path) -> None:
        """Attach ``owner``'s host callbacks when it offers them and none is live."""
        ours = self.transport_node_id()
        if not owner.host_callbacks or ours is None:
            unlink(owner)
            return
        if owner.host_link is not None and not owner.host_link.done():
            return
        path = control.parent / host_wire.HOST_SOCKET_NAME
        target = host_link.FabricCallbacks(self.fabric, lambda: owner.provider)
        owner.host_link = asyncio.create_task(host_link.run(owner.plugin_id, path, ours, target))

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
        self._streams.close()
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
