"""The streams this node provides: admitted through the same guards whoever opened
them, bounded by :data:`~skulk_daemon.capabilities.registry.MAX_ACTIVE_STREAMS`, each
keyed by its caller node and call id, and cancelled (cleanup awaited) at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

from skulk_core.extensions.capabilities import (
    CapabilityCall,
    CapabilityError,
    CapabilityResult,
    CapabilityStreamFrame,
)
from skulk_core.ids import NodeId
from skulk_daemon.capabilities.guards import admit_stream, preflight
from skulk_daemon.capabilities.registry import MAX_ACTIVE_STREAMS, ProviderRegistry, Slots
from skulk_daemon.capabilities.streams import Emit, ProviderStream

SHUTDOWN_STREAMS_SECONDS: Final = 5.0


class ServedStreams:
    def __init__(self, registry: ProviderRegistry, node_id: NodeId) -> None:
        self._registry = registry
        self._node_id = node_id
        self.slots = Slots(MAX_ACTIVE_STREAMS)
        self._streams: dict[tuple[str, str], ProviderStream] = {}
        """By (caller node, call id)."""

    def __len__(self) -> int:
        return len(self._streams)

    def get(self, caller: str, call_id: str) -> ProviderStream | None:
        return self._streams.get((caller, call_id))

    async def open(self, call: CapabilityCall, emit: Emit, *, deadline: float) -> CapabilityResult:
        """Admit a stream addressed to this node; its frames go to ``emit``."""
        call_id = call.call_id
        found = preflight(self._registry, call, self._node_id, streaming=True)
        if isinstance(found, CapabilityError):
            return CapabilityResult(call_id=call_id, ok=False, error=found)
        key = (call.caller_node, call_id)
        if key in self._streams:
            return CapabilityResult.failure(
                call_id, "invalid_payload", f"stream {call_id} is already open"
            )
        if not self.slots.try_acquire():
            return CapabilityResult.failure(
                call_id,
                "overloaded",
                f"this node already serves {self.slots.limit} streams",
            )
        admitted = False
        try:
            refusal = await admit_stream(self._registry, found, call, deadline)
            if refusal is not None:
                return CapabilityResult(call_id=call_id, ok=False, error=refusal)

            def done() -> None:
                self._streams.pop(key, None)
                self.slots.release()

            stream = ProviderStream(found, call, emit=emit, deadline=deadline, on_done=done)
            self._streams[key] = stream
            admitted = True
            await stream.start()
        finally:
            if not admitted:
                self.slots.release()
        return CapabilityResult.success(
            call_id, {"admitted": True, "io_mode": found.descriptor.io_mode}
        )

    def offer_input(self, caller: str, frame: CapabilityStreamFrame) -> None:
        stream = self._streams.get((caller, frame.call_id))
        if stream is not None:
            stream.offer_input(frame)

    def cancel(self, caller: str, call_id: str, message: str | None = None) -> bool:
        """Cancel the stream ``caller`` opened here as ``call_id``; ``False`` when there
        is none active (unknown, another caller's, or already ended)."""
        stream = self._streams.get((caller, call_id))
        return stream is not None and stream.cancel(message)

    async def close(self) -> None:
        """Cancel every stream being served and await its cleanup (bounded)."""
        streams = list(self._streams.values())
        for stream in streams:
            stream.cancel("the provider node is stopping")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(s.wait() for s in streams)), SHUTDOWN_STREAMS_SECONDS
            )
