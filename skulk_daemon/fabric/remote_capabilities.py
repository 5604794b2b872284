"""Capability calls and streams between nodes, directly over the fabric.

The caller's node sends the opening (:class:`CapabilityOpen`, a unary call or a
stream) and cancels (:class:`CapabilityCancel`) on the control plane, addressed to
the provider node; the provider answers with one :class:`CapabilityOutcome`. Stream
frames in both directions are :class:`CapabilityData` on the data plane, addressed
to the node that receives them. The master, State and the event log are never
involved. A provider node that cannot be reached, or stops being heard from while
a caller waits, is ``unreachable``.

The serving end belongs to the node's capability fabric (:class:`CapabilityServer`);
this module only moves messages and keeps the caller's pending answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, Protocol

import msgspec

from skulk_core.cluster.fabric import (
    CapabilityCancel,
    CapabilityData,
    CapabilityDescribe,
    CapabilityDescribed,
    CapabilityOpen,
    CapabilityOutcome,
)
from skulk_core.extensions.capabilities import (
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityResult,
    CapabilityStreamFrame,
)
from skulk_core.ids import NodeId

if TYPE_CHECKING:
    from skulk_daemon.fabric.link import CapabilityMessage, FabricLink

log = logging.getLogger(__name__)

DESCRIBE_TIMEOUT_SECONDS: Final = 5.0
ANSWER_GRACE_SECONDS: Final = 2.0
"""How long past the call's deadline a caller waits for the provider's own answer."""
LIVENESS_CHECK_SECONDS: Final = 1.0


Emit = Callable[[CapabilityStreamFrame], Awaitable[bool]]


class CapabilityServer(Protocol):
    """The node's own providers, as the fabric reaches them."""

    def describe_local(self) -> list[CapabilityDescriptor]: ...

    async def serve_call(self, call: CapabilityCall) -> CapabilityResult: ...

    async def open_stream(self, call: CapabilityCall, emit: Emit) -> CapabilityResult: ...

    def offer_input(self, caller: str, frame: CapabilityStreamFrame) -> None: ...

    def deliver_output(self, provider: str, frame: CapabilityStreamFrame) -> None: ...

    def cancel_stream(self, caller: str, call_id: str, message: str | None) -> bool: ...


class RemoteCapabilities:
    def __init__(self, agent: FabricLink) -> None:
        self._agent = agent
        self._server: CapabilityServer | None = None
        self._describes: dict[str, tuple[NodeId, asyncio.Future[list[CapabilityDescriptor]]]] = {}
        self._answers: dict[str, tuple[NodeId, asyncio.Future[CapabilityResult]]] = {}
        self._serving: set[asyncio.Task[None]] = set()

    def attach(self, server: CapabilityServer) -> None:
        self._server = server

    def is_live(self, node: str) -> bool:
        return self._agent.is_live(NodeId(node))

    def _send(self, node: str, body: CapabilityMessage) -> bool:
        return self._agent.send_capability(NodeId(node), body)

    # -- the caller's end ---------------------------------------------------------------

    async def describe(self, node: str) -> list[CapabilityDescriptor]:
        """``node``'s ready descriptors; empty when it cannot be reached in time."""
        request_id = secrets.token_hex(8)
        future: asyncio.Future[list[CapabilityDescriptor]] = (
            asyncio.get_running_loop().create_future()
        )
        self._describes[request_id] = (NodeId(node), future)
        try:
            if not self._send(node, CapabilityDescribe(request_id=request_id)):
                return []
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(future, DESCRIBE_TIMEOUT_SECONDS)
            return []
        finally:
            self._describes.pop(request_id, None)

    async def call(
        self, node: str, call: CapabilityCall, deadline: float, *, stream: bool = False
    ) -> CapabilityResult:
        """Send the call (or stream opening) to ``node``; its typed answer."""
        loop = asyncio.get_running_loop()
        if call.call_id in self._answers:
            return CapabilityResult.failure(
                call.call_id, "invalid_payload", f"call {call.call_id} is already in flight"
            )
        remaining = deadline - loop.time()
        if remaining <= 0:
            return _timeout(call)
        # The provider gets what is left of the one deadline, not a fresh one.
        sent_call = msgspec.structs.replace(call, timeout_seconds=remaining)
        future: asyncio.Future[CapabilityResult] = loop.create_future()
        self._answers[call.call_id] = (NodeId(node), future)
        try:
            if not self._send(node, CapabilityOpen(call=sent_call, stream=stream)):
                return _unreachable(call, node)
            while True:
                left = deadline + ANSWER_GRACE_SECONDS - loop.time()
                if left <= 0:
                    return _timeout(call)
                try:
                    return await asyncio.wait_for(
                        asyncio.shield(future), min(LIVENESS_CHECK_SECONDS, left)
                    )
                except TimeoutError:
                    if not self.is_live(node):
                        return _unreachable(call, node)
        finally:
            self._answers.pop(call.call_id, None)

    async def send_frame(self, node: str, frame: CapabilityStreamFrame) -> bool:
        """One stream frame (either direction) to ``node``'s data plane."""
        return self._send(node, CapabilityData(frame=frame))

    async def cancel(self, node: str, call_id: str, message: str | None) -> bool:
        return self._send(node, CapabilityCancel(call_id=call_id, message=message))

    # -- receiving -----------------------------------------------------------------------

    def receive(self, origin: NodeId, body: CapabilityMessage) -> None:
        """A capability message from ``origin`` (called by the agent; never raises for
        anything a peer can send)."""
        server = self._server
        match body:
            case CapabilityDescribed(request_id=request_id, descriptors=descriptors):
                pending = self._describes.get(request_id)
                if pending is not None and pending[0] == origin and not pending[1].done():
                    pending[1].set_result(list(descriptors))
            case CapabilityOutcome(result=result):
                answer = self._answers.get(result.call_id)
                if answer is not None and answer[0] == origin and not answer[1].done():
                    answer[1].set_result(result)
            case CapabilityDescribe(request_id=request_id):
                descriptors = () if server is None else tuple(server.describe_local())
                self._send(
                    origin, CapabilityDescribed(request_id=request_id, descriptors=descriptors)
                )
            case CapabilityOpen(call=call, stream=stream):
                self._open(origin, call, stream)
            case CapabilityCancel(call_id=call_id, message=message):
                if server is not None:
                    server.cancel_stream(origin, call_id, message)
            case CapabilityData(frame=frame):
                if server is None:
                    return
                if frame.direction == "provider_to_caller":
                    server.deliver_output(origin, frame)
                else:
                    server.offer_input(origin, frame)

    def _open(self, origin: NodeId, call: CapabilityCall, stream: bool) -> None:
        server = self._server
        if server is None or call.caller_node != origin:
            reason = (
                "this node serves no capabilities"
                if server is None
                else "caller_node must be the node that sends the call"
            )
            failure = CapabilityResult.failure(call.call_id, "not_found", reason)
            self._send(origin, CapabilityOutcome(result=failure, stream=stream))
            return
        task = asyncio.create_task(self._serve(server, origin, call, stream))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def _serve(
        self, server: CapabilityServer, origin: NodeId, call: CapabilityCall, stream: bool
    ) -> None:
        try:
            if stream:

                async def emit(frame: CapabilityStreamFrame) -> bool:
                    return self._send(origin, CapabilityData(frame=frame))

                result = await server.open_stream(call, emit)
            else:
                result = await server.serve_call(call)
        except Exception:
            log.exception("serving capability call %s failed", call.call_id)
            result = CapabilityResult.failure(call.call_id, "provider_error", "the call failed")
        self._send(origin, CapabilityOutcome(result=result, stream=stream))

    async def close(self) -> None:
        tasks = list(self._serving)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _unreachable(call: CapabilityCall, node: str) -> CapabilityResult:
    return CapabilityResult.failure(call.call_id, "unreachable", f"node {node} cannot be reached")


def _timeout(call: CapabilityCall) -> CapabilityResult:
    return CapabilityResult.failure(
        call.call_id,
        "timeout",
        f"{call.qualified_id} on {call.target_node} did not answer within "
        f"{call.timeout_seconds:g} s",
    )
