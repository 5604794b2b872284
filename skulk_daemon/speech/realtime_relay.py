"""``stt.realtime@1.0.0`` served by another node's runner: this node's provider relays.

A node without a ready realtime runner still describes the provider while a reachable
peer serves a ready one (the spec's "ready and reachable" capacity). A call it
accepts is passed on, as one ``stt.realtime@1.0.0`` stream to that peer over the
fabric: each caller chunk (payload and inline PCM, untouched) goes out as it arrives,
the caller's half-close completes the peer's input, and the peer's deltas and terminal
come back renumbered for this call. The peer runs every check again (media, bounds,
admission, the one-call-per-instance reservation). A caller that goes away cancels
the peer's call; a peer that goes silent fails the call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from skulk_core.extensions.capabilities import (
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityError,
    CapabilityStreamFrame,
    CapabilityStreamInput,
    CapabilityStreamSession,
    InlineMediaAttachment,
    descriptor_revision,
)
from skulk_daemon.capabilities.service import CapabilityService

Out = Callable[..., CapabilityStreamFrame]


async def _pump(
    input_frames: AsyncIterator[CapabilityStreamFrame], sink: CapabilityStreamInput
) -> None:
    async for item in input_frames:
        if item.kind == "started":
            continue
        if item.kind != "chunk":
            break  # the caller half-closed its input
        media = item.media if isinstance(item.media, InlineMediaAttachment) else None
        if not await sink.send_chunk(item.payload, media):
            return
    await sink.complete()


async def relay(  # noqa: PLR0917 (one call's parts)
    capabilities: CapabilityService,
    target: str,
    descriptor: CapabilityDescriptor,
    call: CapabilityCall,
    input_frames: AsyncIterator[CapabilityStreamFrame],
    out: Out,
) -> AsyncGenerator[CapabilityStreamFrame]:
    """``call`` served on ``target``; the frames this node's caller gets."""
    session: CapabilityStreamSession = await capabilities.stream(
        target,
        descriptor.id,
        descriptor.version,
        descriptor_revision(descriptor),
        call.payload,
        timeout=call.timeout_seconds,
    )
    if not session.open_result.ok or session.input is None:
        error = session.open_result.error or CapabilityError(
            code="provider_error", message=f"node {target} refused the call"
        )
        yield out("failed", error=error)
        return
    sink = session.input
    pump = asyncio.create_task(_pump(input_frames, sink))
    frames = session.frames
    ended = False
    try:
        async for frame in frames:
            match frame.kind:
                case "started":
                    continue
                case "chunk":
                    yield out("chunk", frame.payload)
                case "completed":
                    ended = True
                    yield out("completed", frame.payload)
                    return
                case _:
                    ended = True
                    error = frame.error or CapabilityError(
                        code="provider_error", message=f"the call on node {target} failed"
                    )
                    yield out("failed", error=error)
                    return
        ended = True
        yield out(
            "failed",
            error=CapabilityError(
                code="provider_error", message=f"the call on node {target} ended early"
            ),
        )
    finally:
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pump
        if not ended:
            with contextlib.suppress(Exception):
                await sink.cancel("the caller went away")
        aclose = getattr(frames, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
