"""The owner's end of ``host.sock`` (:mod:`.host_wire`), run by the owner runtime
(``manager/owner_host.py``) for a provider that opted in: the socket's server, and the
:class:`~skulk_core.extensions.host_callbacks.HostCallbacks` client its provider
reaches as ``context.host``.

A Skulk host connects and binds the transport identity the owner is already bound to
on its control socket (any other, or an unbound owner, is refused). A newer bound
connection replaces the previous one; callbacks waiting on the replaced (or ended)
connection fail ``lost`` and are never resent. Each callback is one frame with the next
sequence number, waits at most three seconds for its answer (a later answer is
dropped), and is refused ``too_large`` here before a frame over 64 KiB is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, get_args

import msgspec

from skulk_core.extensions.capabilities import CapabilityResult, JsonObject
from skulk_core.extensions.host_callbacks import (
    HostCallbackError,
    HostCallbackErrorCode,
    StewardPolicy,
)
from skulk_host.plugin_owners import host_wire
from skulk_host.unix_address import owner_only_server

log = logging.getLogger("skulk.plugins.owner")

_CODES: Final[dict[str, HostCallbackErrorCode]] = {
    code: code for code in get_args(HostCallbackErrorCode)
}


class _Bound:
    """One bound host connection and the callbacks waiting on it."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}

    def end(self, reason: str) -> None:
        for future in self.waiting.values():
            if not future.done():
                future.set_exception(HostCallbackError("lost", reason))
        self.waiting.clear()
        self.writer.close()


class OwnerHostCallbacks:
    """``context.host``: the owner's callbacks to its bound Skulk host."""

    def __init__(self, bound_identity: Callable[[], str | None]) -> None:
        self._identity = bound_identity
        self._bound: _Bound | None = None
        self._sequence = 0
        self._server: asyncio.AbstractServer | None = None
        self.binds = 0
        """How many host connections have bound (a reconnect after a restart counts)."""

    @property
    def connected(self) -> bool:
        return self._bound is not None

    # -- the provider's calls ---------------------------------------------------------

    async def actions(self) -> StewardPolicy:
        result = await self._ask({"op": "actions"})
        try:
            return msgspec.convert(result, StewardPolicy)
        except msgspec.ValidationError:
            raise HostCallbackError("malformed", "the host's policy is unreadable") from None

    async def revisions(self) -> dict[str, str]:
        result = await self._ask({"op": "revisions"})
        found = result.get("revisions") if isinstance(result, dict) else None
        try:
            return msgspec.convert(found, dict[str, str])
        except msgspec.ValidationError:
            raise HostCallbackError("malformed", "the host's revisions are unreadable") from None

    async def invoke(
        self,
        node_id: str,
        capability_id: str,
        version: str,
        revision: str,
        arguments: JsonObject,
    ) -> CapabilityResult:
        result = await self._ask(
            {
                "op": "invoke",
                "node_id": node_id,
                "capability_id": capability_id,
                "version": version,
                "revision": revision,
                "arguments": arguments,
            }
        )
        try:
            return msgspec.convert(result, CapabilityResult)
        except msgspec.ValidationError:
            raise HostCallbackError("malformed", "the host's result is unreadable") from None

    async def _ask(self, fields: Mapping[str, object]) -> object:
        bound = self._bound
        if bound is None:
            raise HostCallbackError("unavailable", "no Skulk host is bound to host.sock")
        self._sequence += 1
        sequence = self._sequence
        frame = host_wire.encode({"sequence": sequence, **fields})
        if len(frame) > host_wire.MAX_FRAME_BYTES:
            raise HostCallbackError("too_large", "the callback is over its 64 KiB frame bound")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + host_wire.DEADLINE_SECONDS
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        bound.waiting[sequence] = future
        try:
            async with asyncio.timeout_at(deadline):
                bound.writer.write(frame)
                await bound.writer.drain()
                answer = await future
        except TimeoutError:
            raise HostCallbackError(
                "timeout", "the host did not answer within the three-second deadline"
            ) from None
        except (ConnectionError, OSError):
            raise HostCallbackError("lost", "the host connection ended") from None
        finally:
            bound.waiting.pop(sequence, None)
        if loop.time() > deadline:  # an answer after the deadline is not used
            raise HostCallbackError("timeout", "the host answered after the deadline")
        if answer.get("ok") is True:
            return answer.get("result")
        error = answer.get("error")
        error = error if isinstance(error, dict) else {}
        typed = _CODES.get(str(error.get("code")), "refused")
        raise HostCallbackError(typed, str(error.get("message") or "refused"))

    # -- the socket -------------------------------------------------------------------

    async def serve(self, directory: Path) -> None:
        """Listen on ``directory/host.sock`` (0600; the directory is already 0700)."""
        path = directory / host_wire.HOST_SOCKET_NAME
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self._server = await owner_only_server(
            self._connection, path, limit=host_wire.MAX_FRAME_BYTES
        )

    async def close(self, directory: Path) -> None:
        if self._server is not None:
            self._server.close()
        if self._bound is not None:
            self._bound.end("the owner is stopping")
            self._bound = None
        with contextlib.suppress(FileNotFoundError):
            (directory / host_wire.HOST_SOCKET_NAME).unlink()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            frame = await asyncio.wait_for(host_wire.read_frame(reader), host_wire.BIND_SECONDS)
        except (host_wire.FrameTooLarge, TimeoutError, ConnectionError, OSError):
            frame = None
        identity = None if frame is None else host_wire.parse_bind(frame)
        ours = self._identity()
        if identity is None or ours is None or identity != ours:
            reason = (
                "the bind is not a protocol-1 bind"
                if identity is None
                else "the owner is bound to another (or no) Skulk transport identity"
            )
            with contextlib.suppress(ConnectionError, OSError):
                writer.write(host_wire.encode({"ready": False, "error": {"message": reason}}))
                await writer.drain()
            writer.close()
            return
        bound = _Bound(writer)
        try:
            writer.write(host_wire.encode({"ready": True}))
            await writer.drain()
        except (ConnectionError, OSError):
            writer.close()
            return
        previous, self._bound = self._bound, bound
        if previous is not None:
            previous.end("a newer host connection replaced this one")
        self.binds += 1
        log.info("host callbacks bound to the Skulk host")
        try:
            await self._read_answers(reader, bound)
        finally:
            if self._bound is bound:
                self._bound = None
            bound.end("the host connection ended")

    async def _read_answers(self, reader: asyncio.StreamReader, bound: _Bound) -> None:
        while True:
            try:
                frame = await host_wire.read_frame(reader)
            except (host_wire.FrameTooLarge, ConnectionError, OSError):
                return
            if frame is None:
                return
            try:
                message = json.loads(frame)
            except ValueError:
                return
            if not isinstance(message, dict):
                return
            sequence = message.get("sequence")
            future = bound.waiting.get(sequence) if isinstance(sequence, int) else None
            if future is not None and not future.done():
                future.set_result(message)
            elif message.get("ok") is False:
                error = message.get("error")
                code = error.get("code") if isinstance(error, dict) else None
                log.warning("the host refused a callback frame (%s)", code)
