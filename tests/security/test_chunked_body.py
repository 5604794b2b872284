"""A streamed answer's body written straight to the connection (issue 43): the bytes a
client reads are those h11 would have framed, a client that stops reading holds the
body back rather than letting it pile up, and a client that leaves ends it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from litestar import Litestar, get
from litestar.response import Stream

from skulk_daemon.api.streaming import BodyStream
from skulk_daemon.system.chunked_body import ChunkedBodyWriter
from tests.security.test_http_server import serving

PIECES: list[bytes | str] = [
    b": command_id c\n\n",
    b"",
    "data: \u00e9t\u00e9 \U0001f98a\n\n",
    b"x" * 0xABCD,  # its chunk size is written in hex letters
]


async def _pieces() -> AsyncIterator[bytes | str]:
    for piece in PIECES:
        await asyncio.sleep(0)
        yield piece


@get("/direct", sync_to_thread=False)
def direct() -> Stream:
    return BodyStream(_pieces(), media_type="text/event-stream", headers={"X-Test": "1"})


@get("/plain", sync_to_thread=False)
def plain() -> Stream:
    return Stream(_pieces(), media_type="text/event-stream", headers={"X-Test": "1"})


async def _raw(port: int, path: str, version: str = "1.1") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    close = "" if version == "1.1" else "Connection: close\r\n"
    writer.write(f"GET {path} HTTP/{version}\r\nHost: t\r\n{close}\r\n".encode())
    await writer.drain()
    data = b""
    while not data.endswith(b"\r\n0\r\n\r\n"):
        more = await asyncio.wait_for(reader.read(65536), timeout=10)
        if not more:
            break
        data += more
    writer.close()
    return data


def _without_date(response: bytes) -> bytes:
    return b"\r\n".join(line for line in response.split(b"\r\n") if not line.startswith(b"date:"))


def test_the_direct_body_is_byte_identical_to_h11s(monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[bytes] = []
    write = ChunkedBodyWriter.write

    def spy(self: ChunkedBodyWriter, data: bytes) -> None:
        writes.append(data)
        write(self, data)

    monkeypatch.setattr(ChunkedBodyWriter, "write", spy)

    async def scenario() -> tuple[bytes, bytes]:
        async with serving(Litestar([direct, plain])) as port:
            return await _raw(port, "/direct"), await _raw(port, "/plain")

    got, expected = asyncio.run(scenario())
    assert b"transfer-encoding: chunked" in got.lower()
    assert _without_date(got) == _without_date(expected)
    assert got.endswith(b"\r\n0\r\n\r\n")
    # The pieces went by the writer (the empty one too, which writes nothing).
    assert writes == [p if isinstance(p, bytes) else p.encode() for p in PIECES]


def test_an_http_1_0_client_gets_the_body_unframed() -> None:
    async def scenario() -> bytes:
        async with serving(Litestar([direct])) as port:
            return await _raw(port, "/direct", version="1.0")

    got = asyncio.run(scenario())
    assert b"transfer-encoding" not in got.lower()
    body = got.split(b"\r\n\r\n", 1)[1]
    assert body == b"".join(p if isinstance(p, bytes) else p.encode() for p in PIECES)


def test_a_client_that_stops_reading_holds_the_body_back_and_one_that_leaves_ends_it() -> None:
    made = 0
    ended = asyncio.Event()

    async def endless() -> AsyncIterator[bytes]:
        nonlocal made
        try:
            while True:
                made += 1
                await asyncio.sleep(0)
                yield b"y" * 4096
        finally:
            ended.set()

    @get("/endless", sync_to_thread=False)
    def endless_route() -> Stream:
        return BodyStream(endless(), media_type="text/event-stream")

    async def scenario() -> tuple[int, int, bool]:
        async with serving(Litestar([endless_route])) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /endless HTTP/1.1\r\nHost: t\r\n\r\n")
            await writer.drain()
            await reader.read(1)
            await asyncio.sleep(1.0)
            stalled = made
            await asyncio.sleep(0.5)
            # Nothing read for 1.5 s: the body stopped being produced (the transport
            # is paused), a bounded amount in the kernel's and the transport's buffers.
            after = made
            writer.close()
            await asyncio.wait_for(ended.wait(), timeout=10)
            return stalled, after, ended.is_set()

    stalled, after, gone = asyncio.run(scenario())
    assert after == stalled
    assert stalled * 4096 < 64 * 1024 * 1024
    assert gone


def test_a_server_without_the_writer_streams_as_litestar_does() -> None:
    from litestar.testing import TestClient  # noqa: PLC0415

    with TestClient(Litestar([direct])) as client:
        response = client.get("/direct")
    assert response.content == b"".join(p if isinstance(p, bytes) else p.encode() for p in PIECES)
    assert response.headers["x-test"] == "1"
