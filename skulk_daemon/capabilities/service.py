"""The capability fabric: this node's providers, what it advertises, and calls and
streams to any node.

One object per node. Extensions (through ``ExtensionContext``) and first-party
providers register here; the HTTP routes, the fabric's remote handler and callers
on this node all come through it, so every call passes the same guards whoever
makes it. A call to this node runs in-process (the fast path); a call to another
node goes over the fabric (:mod:`skulk_daemon.fabric.remote_capabilities`). Nothing
here touches State or the event log.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from skulk_core.extensions.capabilities import (
    DEFAULT_TIMEOUT_SECONDS,
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityError,
    CapabilityResult,
    CapabilityStreamFrame,
    CapabilityStreamSession,
    JsonObject,
)
from skulk_core.extensions.capability_nodes import CapabilityNodeSummary
from skulk_core.ids import NodeId
from skulk_daemon.capabilities.calls import envelope
from skulk_daemon.capabilities.gossip import TEST_NODE_ENV, Gossip, Snapshot, publish, stand_in_node
from skulk_daemon.capabilities.guards import run_unary
from skulk_daemon.capabilities.registry import (
    MAX_INFLIGHT_CALLS,
    DynamicSource,
    ProviderRegistry,
    Registration,
    Slots,
)
from skulk_daemon.capabilities.served import ServedStreams
from skulk_daemon.capabilities.session import CallerStream, InputSink, no_frames
from skulk_daemon.capabilities.streams import Emit

if TYPE_CHECKING:
    from skulk_daemon.fabric.cluster import ClusterAgent
    from skulk_daemon.fabric.remote_capabilities import RemoteCapabilities
    from skulk_daemon.node.node import Node

log = logging.getLogger(__name__)


class CapabilityService:
    def __init__(self, node: Node, *, cluster: ClusterAgent | None = None) -> None:
        self._node = node
        self._cluster = cluster
        self._registry = ProviderRegistry()
        self._call_slots = Slots(MAX_INFLIGHT_CALLS)
        self._served = ServedStreams(self._registry, node.node_id)
        self._receiving: dict[str, CallerStream] = {}
        """Streams this node called, by call id."""
        self._gossip = Gossip(lambda snapshot: publish(node, snapshot))
        self._closed = False
        stand_in = stand_in_node(os.environ.get(TEST_NODE_ENV))
        if stand_in is not None:
            self._gossip.publish_node(stand_in)

    @property
    def node_id(self) -> NodeId:
        return self._node.node_id

    def attach_cluster(self, cluster: ClusterAgent) -> None:
        self._cluster = cluster

    @property
    def _remote(self) -> RemoteCapabilities | None:
        return None if self._cluster is None else self._cluster.capabilities

    def reachable(self, node_id: str) -> bool:
        """Whether a call to ``node_id`` can go now: this node, or a peer heard from
        over the fabric (its node-addressed data plane)."""
        if node_id == self.node_id:
            return True
        remote = self._remote
        return remote is not None and remote.is_live(node_id)

    # -- providers -------------------------------------------------------------------

    def register_extension(
        self, extension_obj: object, context: object, *, builtin: bool = False
    ) -> list[CapabilityDescriptor]:
        """Serve what ``extension_obj.capabilities()`` returns (nothing when it has no
        such method); returns the descriptors accepted. Each capability's id is
        advertised as a telemetry tag. ``context`` is passed to its handlers;
        ``builtin`` marks a first-party provider, which wins a contested ``id@version``.
        """
        if self._closed:
            return []
        accepted = self._registry.register(extension_obj, context, builtin=builtin)
        for descriptor in accepted:
            self._gossip.advertise(descriptor.id)
        return accepted

    def add_dynamic_source(self, source: DynamicSource) -> None:
        """Managed owners' cached claims join discovery and dispatch (see
        :meth:`ProviderRegistry.add_dynamic`); their tags are their source's to keep."""
        self._registry.add_dynamic(source)

    def static_ids(self) -> frozenset[str]:
        return self._registry.static_ids()

    def ready_registrations(self) -> list[Registration]:
        return self._registry.ready()

    def describe_local(self) -> list[CapabilityDescriptor]:
        """This node's ready descriptors (discovery's heavy layer)."""
        return [r.descriptor for r in self._registry.ready()]

    def diagnostics(self) -> dict[str, object]:
        """Counters for the diagnostics bundle: no call ids, inputs or outputs."""
        return {
            "providers": sorted(f"{d.id}@{d.version}" for d in self.describe_local()),
            "unaryCalls": {"active": self._call_slots.used, "limit": self._call_slots.limit},
            "streams": {
                "active": self._served.slots.used,
                "limit": self._served.slots.limit,
                "serving": len(self._served),
                "calling": len(self._receiving),
            },
        }

    def revisions(self) -> dict[str, str]:
        return {r.qualified_id: r.revision for r in self._registry.ready()}

    # -- tags and capability nodes ---------------------------------------------------

    def advertise(self, tag: str) -> None:
        self._gossip.advertise(tag)

    def withdraw(self, tag: str) -> None:
        self._gossip.withdraw(tag)

    def tags(self) -> frozenset[str]:
        return self._gossip.tags()

    def publish_node(self, summary: CapabilityNodeSummary) -> bool:
        return self._gossip.publish_node(summary)

    def withdraw_node(self, plugin_id: str, node_id: str) -> bool:
        return self._gossip.withdraw_node(plugin_id, node_id)

    def gossip(self) -> Snapshot:
        """For the telemetry publisher: (tags, capability nodes), thread-safe."""
        return self._gossip.snapshot()

    # -- calling (any node) ------------------------------------------------------------

    async def describe_node(self, node_id: str) -> list[CapabilityDescriptor]:
        """``node_id``'s descriptors; empty when it cannot be reached."""
        if node_id == self.node_id:
            return self.describe_local()
        remote = self._remote
        return [] if remote is None else await remote.describe(node_id)

    async def call(  # noqa: PLR0917 (the spec's call_capability shape)
        self,
        node_id: str,
        capability_id: str,
        version: str,
        revision: str,
        payload: JsonObject,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,  # noqa: ASYNC109 (a deadline we own)
    ) -> CapabilityResult:
        """Call a unary capability on ``node_id`` (this node included). Never raises:
        every failure is a typed result."""
        deadline = asyncio.get_running_loop().time() + timeout
        call = envelope(self.node_id, node_id, capability_id, version, revision, payload, timeout)
        if isinstance(call, CapabilityResult):
            return call
        if node_id == self.node_id:
            return await self.serve_call(call, deadline=deadline)
        remote = self._remote
        if remote is None:
            return CapabilityResult.failure(call.call_id, "unreachable", "this node has no fabric")
        return await remote.call(node_id, call, deadline)

    async def stream(  # noqa: PLR0917 (the spec's stream_capability shape)
        self,
        node_id: str,
        capability_id: str,
        version: str,
        revision: str,
        payload: JsonObject,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,  # noqa: ASYNC109 (a deadline we own)
    ) -> CapabilityStreamSession:
        """Open a streaming capability on ``node_id``. Check ``open_result`` first; then
        read ``frames`` (and write ``input`` for client-streaming and bidirectional)."""
        deadline = asyncio.get_running_loop().time() + timeout
        call = envelope(self.node_id, node_id, capability_id, version, revision, payload, timeout)
        if isinstance(call, CapabilityResult):
            return CapabilityStreamSession(open_result=call, frames=no_frames())
        call_id = call.call_id
        remote = self._remote
        local = node_id == self.node_id

        async def cancel(message: str | None) -> bool:
            if local:
                return self.cancel_stream(self.node_id, call_id, message)
            return remote is not None and await remote.cancel(node_id, call_id, message)

        receiver = CallerStream(
            call_id,
            node_id,
            deadline=deadline,
            cancel=cancel,
            alive=None if local or remote is None else lambda: remote.is_live(node_id),
            on_done=lambda: self._forget_receiver(call_id),
        )
        self._receiving[call_id] = receiver
        if local:
            result = await self.open_stream(call, receiver.put, deadline=deadline)
        elif remote is None:
            result = CapabilityResult.failure(call_id, "unreachable", "this node has no fabric")
        else:
            result = await remote.call(node_id, call, deadline, stream=True)
        if not result.ok:
            self._receiving.pop(call_id, None)
            return CapabilityStreamSession(open_result=result, frames=no_frames(), call_id=call_id)
        sink: InputSink | None = None
        mode = (result.result or {}).get("io_mode")
        if mode in ("client_streaming", "bidirectional"):
            if local:
                provider = self._served.get(self.node_id, call_id)

                async def send(frame: CapabilityStreamFrame) -> bool:
                    return provider is not None and await provider.put_input(frame)

            else:
                assert remote is not None

                async def send(frame: CapabilityStreamFrame) -> bool:
                    return await remote.send_frame(node_id, frame)

            async def refuse(error: CapabilityError) -> None:
                receiver.fail(error.code, error.message)
                await cancel(error.message)

            sink = InputSink(call_id, send, cancel, refuse)
        return CapabilityStreamSession(
            open_result=result, frames=receiver.frames(), input=sink, call_id=call_id
        )

    def _forget_receiver(self, call_id: str) -> None:
        self._receiving.pop(call_id, None)

    # -- serving (this node) -------------------------------------------------------------

    async def serve_call(
        self, call: CapabilityCall, *, deadline: float | None = None
    ) -> CapabilityResult:
        """Serve a unary call addressed to this node (from anywhere)."""
        if deadline is None:
            deadline = asyncio.get_running_loop().time() + call.timeout_seconds
        return await run_unary(
            self._registry, self._call_slots, call, own_node=self.node_id, deadline=deadline
        )

    def emitter_for(self, caller: str) -> Emit:
        """Where a stream opened over HTTP sends its frames: ``caller``'s data plane."""
        if caller == self.node_id:

            async def local(frame: CapabilityStreamFrame) -> bool:
                receiver = self._receiving.get(frame.call_id)
                return receiver is not None and await receiver.put(frame)

            return local

        async def remote(frame: CapabilityStreamFrame) -> bool:
            carrier = self._remote
            return carrier is not None and await carrier.send_frame(caller, frame)

        return remote

    async def open_stream(
        self, call: CapabilityCall, emit: Emit, *, deadline: float | None = None
    ) -> CapabilityResult:
        """Admit a stream addressed to this node; its frames go to ``emit``."""
        if deadline is None:
            deadline = asyncio.get_running_loop().time() + call.timeout_seconds
        return await self._served.open(call, emit, deadline=deadline)

    def offer_input(self, caller: str, frame: CapabilityStreamFrame) -> None:
        self._served.offer_input(caller, frame)

    def deliver_output(self, provider: str, frame: CapabilityStreamFrame) -> None:
        receiver = self._receiving.get(frame.call_id)
        if receiver is not None and receiver.target == provider:
            receiver.push(frame)

    def cancel_stream(self, caller: str, call_id: str, message: str | None = None) -> bool:
        """Cancel the stream ``caller`` opened here as ``call_id``; ``False`` when there
        is none active (unknown, another caller's, or already ended)."""
        return self._served.cancel(caller, call_id, message)

    # -- shutdown ------------------------------------------------------------------------

    async def close(self) -> None:
        """Discovery off (nothing ready, tags withdrawn), new calls refused
        (``not_found``), streams being served cancelled with their cleanup awaited."""
        self._closed = True
        self._registry.closed = True
        for tag in self._gossip.tags():
            self._gossip.withdraw(tag)
        await self._served.close()
