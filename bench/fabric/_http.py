"""The benchmark's own HTTP/1.1 client (see :class:`QuickHttp` for why not httpx)."""

from __future__ import annotations

import asyncio
import json
import socket
from dataclasses import dataclass
from time import perf_counter as now
from typing import Any, Final
from urllib.parse import urlsplit

_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]
IDLE_REUSE_S: Final = 2.0
"""Idle connections older than this are not reused (uvicorn closes them after 5 s)."""


class HttpError(RuntimeError):
    """A request that failed below HTTP (refused, reset, timed out)."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the end
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


class QuickHttp:
    """A minimal HTTP/1.1 client over kept-alive asyncio connections.

    NOTE: it sets TCP_QUICKACK after sending, so the headers are ACKed at once and the
    body follows. It was written when each answer of the daemon's API stalled ~40 ms
    on a kept-alive connection (the listening socket was created with proto 0, so
    asyncio never set TCP_NODELAY, and Nagle held the body until the client's delayed
    ACK); the daemon sets it now, and :func:`~bench.fabric._replication.http_round_trips`
    shows httpx without the stall. This client stays because it costs the 2-vCPU
    machine far less CPU than httpx, which matters with four daemons on it.
    """

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._idle: dict[str, list[tuple[float, _Conn]]] = {}

    async def request(
        self, method: str, url: str, body: Any = None, limit_s: float | None = None
    ) -> Answer:
        try:
            return await asyncio.wait_for(
                self._request(method, url, body), limit_s if limit_s is not None else self.timeout
            )
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise HttpError(f"{method} {url}: {exc!r}") from None
        except TimeoutError:
            raise HttpError(f"{method} {url}: timed out") from None

    async def _connection(self, netloc: str) -> tuple[_Conn, bool]:
        """An idle connection to ``netloc`` (and True), else a new one (and False)."""
        pool = self._idle.setdefault(netloc, [])
        while pool:
            since, conn = pool.pop()
            if now() - since < IDLE_REUSE_S:
                return conn, True
            conn[1].close()
        host, _, port = netloc.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return (reader, writer), False

    async def _request(self, method: str, url: str, body: Any) -> Answer:
        parts = urlsplit(url)
        payload = b"" if body is None else json.dumps(body).encode()
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        head = (
            f"{method} {target} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        ).encode()
        while True:
            (reader, writer), reused = await self._connection(parts.netloc)
            try:
                writer.write(head + payload)
                writer.get_extra_info("socket").setsockopt(
                    socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1
                )
                try:
                    status = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionResetError) as exc:
                    # The server closed an idle connection before reading this request.
                    if reused and not getattr(exc, "partial", b""):
                        writer.close()
                        continue
                    raise
                lines = status.decode("latin-1").split("\r\n")
                headers = {
                    name.strip().lower(): value.strip()
                    for name, _, value in (line.partition(":") for line in lines[1:] if line)
                }
                if "chunked" in headers.get("transfer-encoding", ""):
                    data = await _read_chunked(reader)
                else:
                    data = await reader.readexactly(int(headers.get("content-length", "0")))
            except BaseException:
                writer.close()
                raise
            if headers.get("connection", "").lower() == "close":
                writer.close()
            else:
                self._idle[parts.netloc].append((now(), (reader, writer)))
            return Answer(status=int(lines[0].split()[1]), body=data)

    async def get(self, url: str, limit_s: float | None = None) -> Answer:
        return await self.request("GET", url, limit_s=limit_s)

    def close(self) -> None:
        for pool in self._idle.values():
            for _, (_, writer) in pool:
                writer.close()
        self._idle.clear()
