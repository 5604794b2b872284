"""The owner's end of one admitted stream (owner protocol 4; see
:mod:`skulk_host.plugin_owners.wire`), run by the owner runtime
(``manager/owner_host.py``) in the owner's process.

Caller input goes into a bounded queue (eight frames; the socket's backpressure holds
the rest) that the handler reads as its ordered lifecycle (``started``, chunks,
``completed``); the handler's frames go out as packets, then the private cleanup
acknowledgment once its iterator is exhausted. The host closing the connection (or
sending anything but input) cancels the handler; the call's deadline fails it. The
handler's iterator is always closed, so its cleanup runs before anything is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any, Final

from skulk_core.extensions.capabilities import CapabilityCall, CapabilityStreamFrame
from skulk_host.plugin_owners import wire

log = logging.getLogger("skulk.plugins.owner")

STREAM_INPUT_FRAMES: Final = 8
"""Caller frames queued for one stream's handler; the socket's backpressure holds more."""


class OwnerStream:
    """One admitted stream on its connection: caller input into a bounded queue, the
    handler's frames out as packets, then the cleanup acknowledgment. The host closing
    the connection (or sending ``cancelled``) cancels the handler; the call's deadline
    fails it. The handler's iterator is always closed, so its cleanup runs first."""

    def __init__(
        self,
        provider: object,
        *,
        context: object,
        call: CapabilityCall,
        mode: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.provider = provider
        self.context = context
        self.call = call
        self.mode = mode
        self.reader = reader
        self.writer = writer
        self.takes_input = mode in ("client_streaming", "bidirectional")
        self.input: asyncio.Queue[CapabilityStreamFrame] = asyncio.Queue(STREAM_INPUT_FRAMES)
        self.cancelled = asyncio.Event()
        self.sent = 0
        """The sequence of the last frame forwarded (a synthetic terminal follows it)."""

    async def _frames(self) -> AsyncIterator[CapabilityStreamFrame]:
        yield CapabilityStreamFrame(
            call_id=self.call.call_id, direction="caller_to_provider", sequence=0, kind="started"
        )
        while True:
            item = await self.input.get()
            yield item
            if item.kind == "completed":
                return

    async def _listen(self) -> None:
        """Read the host's packets until it closes; anything but input cancels."""
        input_done = not self.takes_input
        try:
            while True:
                packet = await wire.read_packet(self.reader)
                if packet is None:
                    break  # the host closed: the caller is gone
                item = wire.packet_frame(self.call.call_id, "caller_to_provider", packet)
                if input_done or item.kind not in ("chunk", "completed"):
                    break
                await self.input.put(item)  # a full queue holds the socket (backpressure)
                input_done = item.kind == "completed"
        except (wire.StreamBroken, ConnectionError, OSError):
            pass
        self.cancelled.set()

    async def _pump(self) -> None:
        provider: Any = self.provider
        context = self.context
        if self.takes_input:
            source = provider.handle_input_stream(context, self.call, self._frames())
        else:
            source = provider.handle_stream(context, self.call)
        try:
            async for item in source:
                if not isinstance(item, CapabilityStreamFrame):
                    await self._terminal(
                        "failed", "invalid_result", "the handler yielded a non-frame"
                    )
                    return
                try:
                    await wire.write_packet(self.writer, *wire.frame_packet(item))
                except wire.StreamBroken as over:  # a frame over the header or media bound
                    await self._terminal("failed", "payload_too_large", over.message)
                    return
                self.sent = item.sequence
        finally:
            aclose = getattr(source, "aclose", None)
            if callable(aclose):
                with contextlib.suppress(Exception):
                    await aclose()

    async def _terminal(self, kind: str, code: str, message: str) -> None:
        error = {"code": code, "message": message}
        header = {"kind": kind, "sequence": self.sent + 1, "error": error}
        await wire.write_packet(self.writer, header)

    async def run(self) -> None:
        listen = asyncio.create_task(self._listen())
        pump = asyncio.create_task(self._pump())
        cancelled = asyncio.create_task(self.cancelled.wait())
        try:
            done, _ = await asyncio.wait(
                {pump, cancelled},
                timeout=self.call.timeout_seconds,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if pump in done:
                failure = pump.exception()
                if failure is not None:
                    log.warning("stream %s: the handler raised", self.call.qualified_id)
                    await self._terminal("failed", "provider_error", "the handler raised")
                await wire.write_packet(self.writer, {"kind": "cleanup"})
                return
            await _cancel(pump)  # the handler's cleanup runs before anything is answered
            if cancelled in done:
                log.info("stream %s cancelled by its host", self.call.qualified_id)
                return
            await self._terminal(
                "failed", "timeout", f"{self.call.qualified_id} ran past its deadline"
            )
            await wire.write_packet(self.writer, {"kind": "cleanup"})
        finally:
            await _cancel(pump)
            await _cancel(listen)
            cancelled.cancel()


async def _cancel(task: asyncio.Task[None]) -> None:
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
