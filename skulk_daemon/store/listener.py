"""The store transport's own server: uvicorn on a socket bound here (as the operator
listener is a server of its own). A port in use is an ``OSError`` for the caller,
never an exit of the daemon."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Generator

import uvicorn
from litestar.types import ASGIApp

STOP_SECONDS = 10.0


class _Server(uvicorn.Server):
    # The daemon owns the process's signals (serve.py); this listener must not.
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class StoreListener:
    def __init__(self, transport: ASGIApp, host: str, port: int) -> None:
        self._sock = _bind(host, port)
        self._server = _Server(
            uvicorn.Config(transport, log_level="warning", lifespan="on", log_config=None)
        )
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))

    async def close(self) -> None:
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(self._task, STOP_SECONDS)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock
