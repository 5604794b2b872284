"""Skulk's end of one owner's ``host.sock`` (:mod:`.host_wire`): connect, bind, then
answer the owner's callbacks until the connection ends.

The adapter (:mod:`.adapter`) runs one :func:`attach` per owner that advertises
``host_callbacks_available``, and starts another (a fresh bind) on a later poll once it
ends, so an owner restart is followed without replaying anything. The answers come from
a :class:`CallbackTarget`: the steward policy, the owner's visible revisions, and the
node's ``CapabilityService`` for ``invoke`` (ordinary routing and admission).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

import msgspec

from skulk_core.extensions.capabilities import CapabilityResult, JsonObject
from skulk_core.extensions.host_callbacks import StewardPolicy
from skulk_host.plugin_owners import host_wire, wire
from skulk_host.plugin_owners.host_wire import (
    ActionsCallback,
    Callback,
    InvokeCallback,
    Refused,
    RevisionsCallback,
)
from skulk_host.unix_address import addressable

if TYPE_CHECKING:
    from skulk_daemon.capabilities.service import CapabilityService

log = logging.getLogger(__name__)

HOST_GRACE_SECONDS: Final = 0.25
"""The host's own bound outlives the owner's deadline by this much, so the fabric's
typed ``timeout`` (not this bound) normally ends a slow invocation."""


class CallbackTarget(Protocol):
    """What the host answers one owner's callbacks from."""

    def actions(self) -> StewardPolicy: ...

    def revisions(self) -> dict[str, str]: ...

    async def invoke(  # noqa: PLR0917 (the call's exact shape)
        self,
        node_id: str,
        capability_id: str,
        version: str,
        revision: str,
        arguments: JsonObject,
        timeout: float,  # noqa: ASYNC109 (the callback's remaining deadline)
    ) -> CapabilityResult: ...


class FabricCallbacks:
    """One owner's answers from its node: no steward; the fabric's ready registrations
    of ``provider()``; ``invoke`` as :meth:`CapabilityService.call` (any caller's path)."""

    def __init__(
        self, fabric: CapabilityService | None, provider: Callable[[], object | None]
    ) -> None:
        self._fabric = fabric
        self._provider = provider

    def actions(self) -> StewardPolicy:
        return host_wire.NO_STEWARD

    def revisions(self) -> dict[str, str]:
        provider = self._provider()
        if self._fabric is None or provider is None:
            return {}
        ready = self._fabric.ready_registrations()
        return {r.qualified_id: r.revision for r in ready if r.provider is provider}

    async def invoke(  # noqa: PLR0917 (the call's exact shape)
        self,
        node_id: str,
        capability_id: str,
        version: str,
        revision: str,
        arguments: JsonObject,
        timeout: float,  # noqa: ASYNC109 (the callback's remaining deadline)
    ) -> CapabilityResult:
        if self._fabric is None:
            return CapabilityResult.failure("", "unreachable", "this node has no fabric")
        return await self._fabric.call(
            node_id, capability_id, version, revision, arguments, timeout=timeout
        )


class BindRefused(Exception):
    """The owner did not acknowledge the bind."""


async def attach(path: Path, transport_node_id: str, target: CallbackTarget) -> None:
    """Connect to ``path``, bind, and serve callbacks until the connection ends.
    Raises :class:`wire.OwnerUnavailable` (not reached or unprotected), or
    :class:`BindRefused`."""
    wire.check_protected(path, "host callback socket")
    try:
        with addressable(path) as address:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(address, limit=host_wire.MAX_FRAME_BYTES),
                host_wire.BIND_SECONDS,
            )
    except (OSError, TimeoutError):
        raise wire.OwnerUnavailable("the owner's host callback socket did not answer") from None
    try:
        try:
            writer.write(host_wire.bind_message(transport_node_id))
            await writer.drain()
            frame = await asyncio.wait_for(host_wire.read_frame(reader), host_wire.BIND_SECONDS)
        except (host_wire.FrameTooLarge, TimeoutError, ConnectionError, OSError):
            frame = None
        ready = _ready(frame)
        if ready is not True:
            raise BindRefused(ready or "the owner did not acknowledge the bind")
        await HostLink(reader, writer, target).serve()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


async def run(plugin_id: str, path: Path, transport_node_id: str, target: CallbackTarget) -> None:
    """:func:`attach` for the adapter: the connection's end is logged, never raised."""
    try:
        await attach(path, transport_node_id, target)
    except wire.OwnerUnavailable as lost:
        log.debug("%s: host callbacks not attached: %s", plugin_id, lost.message)
    except BindRefused as refused:
        log.warning("%s: the owner refused the host callback bind: %s", plugin_id, refused)
    else:
        log.info("%s: the host callback connection ended", plugin_id)


def _ready(frame: bytes | None) -> bool | str:
    """``True`` for ``{"ready": true}``, else the owner's reason (or ``""``)."""
    if frame is None:
        return ""
    try:
        message = json.loads(frame)
    except ValueError:
        return ""
    if message == {"ready": True}:
        return True
    error = message.get("error") if isinstance(message, dict) else None
    return str(error.get("message"))[:200] if isinstance(error, dict) else ""


class HostLink:
    """One bound connection: frames in, one callback at a time, answers out."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: CallbackTarget
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.target = target
        self._write = asyncio.Lock()
        self._current: asyncio.Task[None] | None = None

    async def _send(self, frame: bytes) -> None:
        async with self._write:
            self.writer.write(frame)
            await self.writer.drain()

    async def serve(self) -> None:
        last = 0
        try:
            while True:
                try:
                    frame = await host_wire.read_frame(self.reader)
                except host_wire.FrameTooLarge:
                    await self._send(
                        host_wire.refusal(
                            None, "too_large", "a callback frame is over its 64 KiB bound"
                        )
                    )
                    return  # the framing is lost: the adapter binds afresh later
                if frame is None:
                    return
                parsed = host_wire.parse_callback(frame, last)
                if isinstance(parsed, Refused):
                    if parsed.sequence is not None:
                        last = parsed.sequence
                    await self._send(
                        host_wire.refusal(parsed.sequence, parsed.code, parsed.message)
                    )
                    continue
                last = parsed.sequence
                if self._current is not None and not self._current.done():
                    await self._send(
                        host_wire.refusal(
                            parsed.sequence, "busy", "another callback is still outstanding"
                        )
                    )
                    continue
                self._current = asyncio.create_task(self._answer(parsed))
        except (ConnectionError, OSError):
            return
        finally:
            if self._current is not None:
                self._current.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._current

    async def _answer(self, callback: Callback) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + host_wire.DEADLINE_SECONDS
        try:
            async with asyncio.timeout_at(deadline + HOST_GRACE_SECONDS):
                result = await self._result(callback, deadline)
            frame = host_wire.answer(callback.sequence, result)
            if len(frame) > host_wire.MAX_FRAME_BYTES:
                frame = host_wire.refusal(
                    callback.sequence, "too_large", "the answer is over the 64 KiB frame bound"
                )
        except TimeoutError:
            frame = host_wire.refusal(
                callback.sequence, "timeout", "the host ran past the callback's deadline"
            )
        except Exception as exc:
            # NOTE: only the type: the text may carry what the owner sent.
            log.error("answering an owner callback raised %s", type(exc).__name__)
            frame = host_wire.refusal(callback.sequence, "refused", "the host could not answer")
        with contextlib.suppress(ConnectionError, OSError):
            await self._send(frame)

    async def _result(self, callback: Callback, deadline: float) -> object:
        match callback:
            case ActionsCallback():
                return msgspec.to_builtins(self.target.actions())
            case RevisionsCallback():
                return {"revisions": self.target.revisions()}
            case InvokeCallback():
                remaining = max(deadline - asyncio.get_running_loop().time(), 0.001)
                outcome = await self.target.invoke(
                    callback.node_id,
                    callback.capability_id,
                    callback.version,
                    callback.revision,
                    callback.arguments,
                    remaining,
                )
                return msgspec.to_builtins(outcome)
