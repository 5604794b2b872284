"""Managed owners' streams (owner protocol 4), seen from the API process.

Each stream is admitted on its own owner connection (:meth:`OwnerStreams.admit`),
which waits for the relay the fabric starts next (closed after
:data:`UNCLAIMED_STREAM_SECONDS` if none claims it); the relay then passes the owner's
frames on, forwarding caller input while it lasts. The terminal is withheld until the
owner's cleanup acknowledgment and a clean close; closing the relay (cancellation,
deadline) closes the connection, which cancels the owner's handler.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Final

import msgspec

from skulk_core.extensions.capabilities import (
    CapabilityCall,
    CapabilityError,
    CapabilityErrorCode,
    CapabilityStreamFrame,
)
from skulk_daemon.plugins.owners.owner import REFUSALS, ManagedOwner
from skulk_host.plugin_owners import wire

UNCLAIMED_STREAM_SECONDS: Final = 5.0
"""An admitted owner connection no relay claims (the fabric refused it after
admission) is closed after this long, which cancels the owner's handler."""

_OWNER_CODES: Final[dict[str, CapabilityErrorCode]] = {
    "unsupported": "not_found",
    "busy": "overloaded",
    "too_large": "payload_too_large",
    "malformed": "invalid_payload",
    "timeout": "timeout",
}


def admission_error(
    refused: wire.StreamRefused | wire.OwnerError | wire.OwnerUnavailable,
) -> CapabilityError:
    """The typed error a stream the owner did not admit answers with: the owner's own
    capability error when it sent a valid one, else its code mapped to the fabric's."""
    if isinstance(refused, wire.StreamRefused):
        typed = refused.capability_error
        if isinstance(typed, dict):
            with contextlib.suppress(msgspec.ValidationError):
                return msgspec.convert(typed, CapabilityError)
        code = _OWNER_CODES.get(refused.code, "provider_error")
        return CapabilityError(code=code, message=f"the managed owner refused: {refused.message}")
    if isinstance(refused, wire.OwnerError):
        code = _OWNER_CODES.get(refused.code, "provider_error")
        return CapabilityError(code=code, message=refused.message)
    code = "timeout" if refused.timed_out else "provider_error"
    return CapabilityError(code=code, message=f"the managed owner: {refused.message}")


class OwnerStreams:
    """Admitted owner connections waiting for their relay, and the relays."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], tuple[wire.StreamConnection, asyncio.TimerHandle]] = {}

    async def admit(self, owner: ManagedOwner, call: CapabilityCall) -> CapabilityError | None:
        """Open the call's owner connection and pass its admission; the connection waits
        for the relay the fabric starts next."""
        if owner.refusal is not None:
            return CapabilityError(code="not_found", message=REFUSALS[owner.refusal])
        message = {"op": "stream", "call": msgspec.to_builtins(call)}
        try:
            connection = await wire.open_stream(
                wire.socket_path(owner.installation), message, call.timeout_seconds
            )
        except (wire.StreamRefused, wire.OwnerError, wire.OwnerUnavailable) as refused:
            return admission_error(refused)
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
        owner: ManagedOwner,
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

    def close(self) -> None:
        """Close every admitted connection no relay claimed (shutdown)."""
        for connection, timer in self._pending.values():
            timer.cancel()
            connection.close()
        self._pending.clear()


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
