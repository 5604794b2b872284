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
import contextlib
import logging
import os
import secrets
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import msgspec

from skulk_core.extensions.capabilities import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_PAYLOAD_BYTES,
    MAX_TIMEOUT_SECONDS,
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityError,
    CapabilityResult,
    CapabilityStreamFrame,
    CapabilityStreamSession,
    JsonObject,
    json_size,
)
from skulk_core.extensions.capability_nodes import CapabilityNodeSummary, CapabilityNodeSurface
from skulk_core.ids import NodeId
from skulk_daemon.capabilities.gossip import Gossip, Snapshot
from skulk_daemon.capabilities.guards import admit_stream, preflight, run_unary
from skulk_daemon.capabilities.registry import (
    MAX_ACTIVE_STREAMS,
    MAX_INFLIGHT_CALLS,
    DynamicSource,
    ProviderRegistry,
    Registration,
    Slots,
)
from skulk_daemon.capabilities.session import CallerStream, InputSink, no_frames
from skulk_daemon.capabilities.streams import Emit, ProviderStream

if TYPE_CHECKING:
    from skulk_daemon.fabric.cluster import ClusterAgent
    from skulk_daemon.fabric.remote_capabilities import RemoteCapabilities
    from skulk_daemon.node.node import Node

log = logging.getLogger(__name__)

SHUTDOWN_STREAMS_SECONDS: Final = 5.0
TEST_NODE_ENV: Final = "SKULK_TEST_CAPABILITY_NODE"


class CapabilityService:
    def __init__(self, node: Node, *, cluster: ClusterAgent | None = None) -> None:
        self._node = node
        self._cluster = cluster
        self._registry = ProviderRegistry()
        self._call_slots = Slots(MAX_INFLIGHT_CALLS)
        self._stream_slots = Slots(MAX_ACTIVE_STREAMS)
        self._serving: dict[tuple[str, str], ProviderStream] = {}
        """Streams this node provides, by (caller node, call id)."""
        self._receiving: dict[str, CallerStream] = {}
        """Streams this node called, by call id."""
        self._gossip = Gossip(self._publish)
        self._closed = False
        stand_in = os.environ.get(TEST_NODE_ENV)
        if stand_in:
            self._publish_stand_in(stand_in)

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
                "active": self._stream_slots.used,
                "limit": self._stream_slots.limit,
                "serving": len(self._serving),
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

    def _publish(self, snapshot: Snapshot) -> None:
        own = self._node.own_telemetry()
        if own is None:
            return  # the first reading will carry it
        tags, nodes = snapshot
        self._node.record_telemetry(
            msgspec.structs.replace(
                own, capabilities=tags, capability_nodes=nodes, observed_at=datetime.now(UTC)
            )
        )

    def _publish_stand_in(self, url: str) -> None:
        try:
            summary = CapabilityNodeSummary(
                plugin_id="skulk.test",
                node_id="stand-in",
                bundle_id="skulk.test",
                version="0.0.0",
                title="Test capability node",
                status="ready",
                owner_available=True,
                surfaces=(CapabilityNodeSurface(surface_id="main", title="Open", url=url),),
            )
        except ValueError as exc:
            log.error("%s ignored: %s", TEST_NODE_ENV, exc)
            return
        self._gossip.publish_node(summary)

    # -- calling (any node) ------------------------------------------------------------

    async def describe_node(self, node_id: str) -> list[CapabilityDescriptor]:
        """``node_id``'s descriptors; empty when it cannot be reached."""
        if node_id == self.node_id:
            return self.describe_local()
        remote = self._remote
        return [] if remote is None else await remote.describe(node_id)

    def _envelope(  # noqa: PLR0917 (the spec's positional call shape)
        self,
        node_id: str,
        capability_id: str,
        version: str,
        revision: str,
        payload: JsonObject,
        timeout: float,
    ) -> CapabilityCall | CapabilityResult:
        call_id = secrets.token_hex(16)
        if not 0 < timeout <= MAX_TIMEOUT_SECONDS:
            return CapabilityResult.failure(
                call_id, "invalid_payload", f"timeout must be in (0, {MAX_TIMEOUT_SECONDS:g}] s"
            )
        # NOTE: checked here too, before anything crosses the fabric: the provider would
        # refuse it anyway, and a huge payload must not occupy (or break) the link.
        try:
            size = json_size(payload)
        except (TypeError, ValueError) as exc:
            return CapabilityResult.failure(call_id, "invalid_payload", f"not JSON: {exc}")
        if size > MAX_PAYLOAD_BYTES:
            return CapabilityResult.failure(
                call_id,
                "payload_too_large",
                f"the payload is {size} bytes; at most {MAX_PAYLOAD_BYTES} are accepted",
            )
        return CapabilityCall(
            call_id=call_id,
            capability_id=capability_id,
            version=version,
            descriptor_revision=revision,
            caller_node=self.node_id,
            target_node=node_id,
            timeout_seconds=timeout,
            payload=payload,
        )

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
        call = self._envelope(node_id, capability_id, version, revision, payload, timeout)
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
        call = self._envelope(node_id, capability_id, version, revision, payload, timeout)
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
                provider = self._serving.get((self.node_id, call_id))

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
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + call.timeout_seconds
        call_id = call.call_id
        found = preflight(self._registry, call, self.node_id, streaming=True)
        if isinstance(found, CapabilityError):
            return CapabilityResult(call_id=call_id, ok=False, error=found)
        key = (call.caller_node, call_id)
        if key in self._serving:
            return CapabilityResult.failure(
                call_id, "invalid_payload", f"stream {call_id} is already open"
            )
        if not self._stream_slots.try_acquire():
            return CapabilityResult.failure(
                call_id,
                "overloaded",
                f"this node already serves {self._stream_slots.limit} streams",
            )
        admitted = False
        try:
            refusal = await admit_stream(self._registry, found, call, deadline)
            if refusal is not None:
                return CapabilityResult(call_id=call_id, ok=False, error=refusal)

            def done() -> None:
                self._serving.pop(key, None)
                self._stream_slots.release()

            stream = ProviderStream(found, call, emit=emit, deadline=deadline, on_done=done)
            self._serving[key] = stream
            admitted = True
            await stream.start()
        finally:
            if not admitted:
                self._stream_slots.release()
        return CapabilityResult.success(
            call_id, {"admitted": True, "io_mode": found.descriptor.io_mode}
        )

    def offer_input(self, caller: str, frame: CapabilityStreamFrame) -> None:
        stream = self._serving.get((caller, frame.call_id))
        if stream is not None:
            stream.offer_input(frame)

    def deliver_output(self, provider: str, frame: CapabilityStreamFrame) -> None:
        receiver = self._receiving.get(frame.call_id)
        if receiver is not None and receiver.target == provider:
            receiver.push(frame)

    def cancel_stream(self, caller: str, call_id: str, message: str | None = None) -> bool:
        """Cancel the stream ``caller`` opened here as ``call_id``; ``False`` when there
        is none active (unknown, another caller's, or already ended)."""
        stream = self._serving.get((caller, call_id))
        return stream is not None and stream.cancel(message)

    # -- shutdown ------------------------------------------------------------------------

    async def close(self) -> None:
        """Discovery off (nothing ready, tags withdrawn), new calls refused
        (``not_found``), streams being served cancelled with their cleanup awaited."""
        self._closed = True
        self._registry.closed = True
        for tag in self._gossip.tags():
            self._gossip.withdraw(tag)
        streams = list(self._serving.values())
        for stream in streams:
            stream.cancel("the provider node is stopping")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(s.wait() for s in streams)), SHUTDOWN_STREAMS_SECONDS
            )
