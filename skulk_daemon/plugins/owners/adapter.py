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
never replayed after a lost answer). An explicit disable or uninstall releases the
owner's cached capability IDs; an owner whose enabled state is unknown keeps reserving
them. Capability ids are advertised as telemetry tags, reconciled each poll, and
withdrawn on shutdown. ``SKULK_EXTENSIONS_DISABLE=1`` turns capability admission off;
configuration stays available.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec

from skulk_core.extensions.capabilities import CapabilityCall, CapabilityDescriptor
from skulk_core.plugins.errors import PluginRefusal
from skulk_core.plugins.node_configuration import (
    MAX_NODES_PER_PROVIDER,
    ConfigurableNode,
)
from skulk_daemon.capabilities.registry import Registration, compile_descriptor
from skulk_daemon.plugins.access import ManagerAccess
from skulk_daemon.plugins.connection import read_connection
from skulk_daemon.plugins.manager.store import Store
from skulk_daemon.plugins.owners import wire

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


class ManagedOwnerProvider:
    """One owner as a capability provider of the registry (unary only)."""

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
    credentials: bool = False
    facets: frozenset[str] = frozenset()
    """The optional facets the owner declares (preflight, setup, proposals,
    proposal_actions, setup_actions)."""
    registrations: list[Registration] = field(default_factory=list)
    ready_ids: frozenset[str] = frozenset()
    provider: ManagedOwnerProvider | None = None


class ManagedOwners:
    def __init__(self, access: ManagerAccess, fabric: CapabilityService | None = None) -> None:
        self.access = access
        self.fabric = fabric
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

    def owner_available(self, owner: _Owner) -> bool:
        return self.manager_available() and self._fresh(owner.observed_at)

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
        return await wire.arequest(wire.socket_path(owner.installation), message, timeout)

    async def poll_once(self) -> None:
        try:
            root = read_connection(self.access.config_home).root
            answer = await self.access.call({"action": "list"})
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
                del self._owners[plugin_id]  # purged: nothing left to manage
        for plugin_id, entry in listed.items():
            installation = store.directory(plugin_id)
            owner = self._owners.get(plugin_id)
            if owner is None or owner.installation != installation:
                owner = self._owners[plugin_id] = _Owner(plugin_id, installation)
            owner.inventory = entry
            owner.enabled = bool(entry.get("enabled")) and not entry.get("uninstalled")
            if owner.enabled is False:
                owner.observed_at = None
        await asyncio.gather(*(self._observe(o) for o in self._owners.values() if o.enabled))
        self._reconcile_tags()

    async def _observe(self, owner: _Owner) -> None:
        path = wire.socket_path(owner.installation)
        try:
            health = await wire.arequest(path, {"op": "health"}, wire.HEALTH_TIMEOUT_SECONDS)
            revision = str(health.get("describe_revision")) if isinstance(health, dict) else None
            if revision is None or health.get("healthy") is not True:
                return
            if revision != owner.describe_revision or not owner.described:
                described = await wire.arequest(
                    path, {"op": "describe"}, wire.HEALTH_TIMEOUT_SECONDS
                )
                self._learn(owner, described)
                owner.describe_revision = revision
            owner.observed_at = time.monotonic()
        except (wire.OwnerUnavailable, wire.OwnerError):
            return  # the observation ages; readiness lapses after three seconds
        except Exception:
            log.warning("%s: the owner's description is unreadable", owner.plugin_id)

    def _learn(self, owner: _Owner, described: Any) -> None:
        if not isinstance(described, dict):
            raise ValueError("description is not an object")
        nodes = msgspec.convert(described.get("nodes") or [], tuple[ConfigurableNode, ...])
        owner.nodes = nodes[:MAX_NODES_PER_PROVIDER]
        owner.credentials = bool(described.get("credentials"))
        facets = ("preflight", "setup", "proposals", "proposal_actions", "setup_actions")
        owner.facets = frozenset(f for f in facets if described.get(f) is True)
        provider = owner.provider or ManagedOwnerProvider(owner, self)
        owner.provider = provider
        compiled: dict[str, Registration] = {}
        descriptors = msgspec.convert(
            described.get("capabilities") or [], list[CapabilityDescriptor]
        )
        for descriptor in descriptors:
            if descriptor.io_mode != "unary":
                continue  # streaming claims need owner protocol 4
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
        fabric = self.fabric
        if fabric is not None:
            for tag in self._advertised:
                if tag not in fabric.static_ids():
                    fabric.withdraw(tag)
        self._advertised = set()
