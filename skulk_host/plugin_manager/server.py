"""The owner-only Unix socket the manager answers on.

One JSON request per connection, read until a newline or the client's half-close, at
most 16 KiB; one response of at most 256 KiB; then the connection closes. At most
eight clients at once: a ninth is answered at once with a refusal and closed, never
queued. Each connection has one thirty-second deadline for reading, handling and
answering. The socket lives in the owner-only manager root with mode 0600, and on
Linux each peer's uid (``SO_PEERCRED``) must be this process's own.

``list`` answers carry this manager's runtime (``runtime.py``: ``reload_runtime``,
``build_sha256``); ``reload_runtime`` is answered here, and once its answer is sent the
manager stops (``on_reload``) so its service restarts it on the selected generation.
:func:`serving_lifetime` is ``serve``'s hold on the root's lifetime fence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from skulk_core.plugins.errors import PluginRefusal, refuse
from skulk_host.plugin_manager import protocol
from skulk_host.plugin_manager.lifecycle import Lifecycle
from skulk_host.plugin_manager.protocol import socket_path
from skulk_host.plugin_manager.runtime import (
    LIVE,
    ManagerRuntime,
    lifetime_fence,
    reload_runtime,
)
from skulk_host.unix_address import addressable, owner_only_server

log = logging.getLogger("skulk.plugins.manager")

BUSY_READ_SECONDS: Final = 1.0
"""How long a refused (ninth) client gets to finish sending before its answer."""


def _peer_uid(writer: asyncio.StreamWriter) -> int | None:
    sock = writer.get_extra_info("socket")
    if sock is None or not sys.platform.startswith("linux"):
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", raw)
    return int(uid)


@contextlib.contextmanager
def serving_lifetime(root: Path) -> Iterator[None]:
    """Hold the root's lifetime fence for a manager's whole life: a manager still
    answering on the root is refused; one that is stopping (closing its owners), or a
    host selecting a runtime, is waited for."""
    with lifetime_fence(root, 0.0) as held:
        if held:
            yield
            return
    if _answering(socket_path(root)):
        raise refuse("malformed", "Another manager already answers on this root.")
    log.info("waiting for the previous manager to close its owners")
    with lifetime_fence(root):
        yield


class ManagerServer:
    def __init__(
        self,
        root: Path,
        lifecycle: Lifecycle,
        *,
        deadline: float = protocol.REQUEST_DEADLINE_SECONDS,
        max_clients: int = protocol.MAX_CLIENTS,
        runtime: ManagerRuntime = LIVE,
        on_reload: Callable[[], None] | None = None,
    ) -> None:
        self.root = root
        self.lifecycle = lifecycle
        self.runtime = runtime
        self.on_reload = on_reload
        """Called once a ``reload_runtime`` answer is sent: the manager stops."""
        self.deadline = deadline
        self.max_clients = max_clients
        self._active = 0
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        path = socket_path(self.root)
        if path.is_symlink():
            raise refuse("source_invalid", "The manager socket path is a symbolic link.")
        if path.exists():
            if _answering(path):
                raise refuse("malformed", "Another manager already answers on this root.")
            path.unlink()
        self._server = await owner_only_server(self._connection, path)

    async def serve_forever(self) -> None:
        assert self._server is not None
        async with self._server:
            await self._server.serve_forever()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            socket_path(self.root).unlink()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self._active >= self.max_clients:
                # NOTE: the request is read (briefly, bounded) before the refusal, so the
                # close does not reset the connection under the client's read.
                with contextlib.suppress(TimeoutError, ConnectionError, PluginRefusal):
                    await asyncio.wait_for(_read_request(reader), BUSY_READ_SECONDS)
                await self._send(
                    writer,
                    protocol.error(refuse("busy", "The manager is busy: try again in a moment.")),
                )
                return
            self._active += 1
            reloaded: list[bool] = []
            try:
                response = await asyncio.wait_for(
                    self._answer(reader, writer, reloaded), self.deadline
                )
            except TimeoutError:
                response = protocol.error(
                    refuse("timeout", "The request ran past the manager's deadline.")
                )
            finally:
                self._active -= 1
            await self._send(writer, response)
            if reloaded and self.on_reload is not None:
                self.on_reload()
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _answer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reloaded: list[bool]
    ) -> bytes:
        uid = _peer_uid(writer)
        if uid is not None and uid != os.getuid():
            return protocol.error(refuse("malformed", "Only the owner may use this manager."))
        try:
            raw = await _read_request(reader)
            request = protocol.decode_request(raw)
            result: protocol.Answer
            match request:
                case protocol.ReloadRuntimeRequest():
                    result = await asyncio.to_thread(reload_runtime, self.runtime, request)
                    reloaded.append(True)
                case protocol.ListRequest():
                    listed = await asyncio.to_thread(self.lifecycle.installations)
                    result = self.runtime.listing(listed)
                case _:
                    result = await asyncio.to_thread(self.lifecycle.handle, request)
        except PluginRefusal as refusal:
            return protocol.error(refusal)
        except Exception:
            log.exception("manager request failed")
            return protocol.error(refuse("malformed", "The manager could not handle that request."))
        return protocol.ok(result)

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, response: bytes) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            writer.write(response + b"\n")
            await writer.drain()


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    """One request: up to a newline or the client's half-close, at most 16 KiB."""
    raw = bytearray()
    while b"\n" not in raw:
        chunk = await reader.read(4096)
        if not chunk:
            break
        raw += chunk
        if len(raw) > protocol.MAX_REQUEST_BYTES:
            raise refuse(
                "too_large", f"A manager request is at most {protocol.MAX_REQUEST_BYTES} bytes."
            )
    return bytes(raw).strip()


def _answering(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            with addressable(path) as address:
                probe.connect(address)
        except OSError:
            return False
        return True
