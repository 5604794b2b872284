"""The API server's own bounds: slow headers are cut off, large bodies are rationed."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn

from skulk_daemon.system import http_server
from skulk_daemon.system.http_server import BoundedH11Protocol, LargeBodyLimiter


async def _hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            pass
        await send({"type": "lifespan.shutdown.complete"})
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        http=BoundedH11Protocol,
        lifespan="off",
        log_level="error",
        **http_server.UVICORN_LIMITS,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 (uvicorn exposes a flag, not an event)
        await asyncio.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        await task


def test_a_client_that_never_finishes_its_headers_is_disconnected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http_server, "HEADER_TIMEOUT_SECONDS", 0.5)

    async def scenario() -> None:
        async with serving(_hello) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            await writer.drain()
            # The server closes the connection: EOF arrives well before our own timeout.
            assert await asyncio.wait_for(reader.read(), timeout=5) == b""
            writer.close()
            # A client that sends its request in time is served as before.
            async with httpx.AsyncClient() as client:
                response = await client.get(f"http://127.0.0.1:{port}/")
            assert response.text == "ok"

    asyncio.run(scenario())


def test_a_slow_answer_is_not_cut_off_by_the_header_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http_server, "HEADER_TIMEOUT_SECONDS", 0.3)

    async def slow(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await asyncio.sleep(1.0)
        await send({"type": "http.response.body", "body": b"late"})

    async def scenario() -> None:
        async with serving(slow) as port, httpx.AsyncClient() as client:
            assert (await client.get(f"http://127.0.0.1:{port}/")).text == "late"

    asyncio.run(scenario())


def test_large_bodies_beyond_the_limit_are_503_while_small_ones_pass() -> None:
    release = asyncio.Event()

    async def holding(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await release.wait()
        await _hello(scope, receive, send)

    async def scenario() -> None:
        async with serving(LargeBodyLimiter(holding, limit=1)) as port:
            url = f"http://127.0.0.1:{port}/"
            big = b"x" * (http_server.LARGE_BODY_BYTES + 1)
            async with httpx.AsyncClient(timeout=10) as client:
                first = asyncio.create_task(client.post(url, content=big))
                await asyncio.sleep(0.3)
                second = await client.post(url, content=big)
                assert second.status_code == 503
                assert second.headers["retry-after"] == "1"
                assert second.json()["error"]["code"] == "too_many_large_bodies"
                small = asyncio.create_task(client.post(url, content=b"{}"))
                await asyncio.sleep(0.1)
                release.set()
                assert (await first).status_code == 200
                assert (await small).status_code == 200

    asyncio.run(scenario())


async def _post_slowly(port: int, pieces: list[bytes], pause: float) -> bytes:
    """A POST whose body comes in ``pieces`` ``pause`` seconds apart; what came back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    length = sum(len(piece) for piece in pieces)
    writer.write(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n" % length)

    async def trickle() -> None:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(pause)

    sending = asyncio.create_task(trickle())
    try:
        # The answer ends with the connection (the 408 closes it; the 200 is read to EOF
        # after the server's keep-alive expires, so read just the status and body here).
        return await asyncio.wait_for(_answer(reader), timeout=10)
    finally:
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await sending
        writer.close()


async def _answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return head + await reader.readexactly(int(line.split(b":")[1]))
    return head + await reader.readuntil(b"\r\n0\r\n\r\n")  # chunked


def test_a_trickling_body_is_cut_at_the_deadline_and_a_steady_one_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http_server, "BODY_WINDOW_SECONDS", 0.5)
    monkeypatch.setattr(http_server, "MIN_BODY_BYTES_PER_WINDOW", 100)

    async def scenario() -> None:
        async with serving(_hello) as port:
            started = asyncio.get_running_loop().time()
            trickled = await _post_slowly(port, [b"x"] * 40, pause=0.2)
            assert trickled.startswith(b"HTTP/1.1 408 "), trickled
            assert b'"code":"request_timeout"' in trickled
            # Cut after one or two windows, not when the 40 bytes would have ended (8 s).
            assert asyncio.get_running_loop().time() - started < 3
            # 400 bytes a second (over the floor of 200) for two seconds: served whole.
            steady = await _post_slowly(port, [b"y" * 100] * 8, pause=0.25)
            assert steady.startswith(b"HTTP/1.1 200 ") and b"ok" in steady, steady

    asyncio.run(scenario())


def test_local_peers_are_never_capped_and_remote_ones_are_keyed_by_address() -> None:
    assert http_server.source_of(("127.0.0.1", 1)) is None
    assert http_server.source_of(("::1", 1)) is None
    assert http_server.source_of(None) is None
    assert http_server.source_of(("::ffff:10.0.0.5", 1)) == "10.0.0.5"
    assert http_server.source_of(("10.0.0.5", 1)) == "10.0.0.5"
    # One IPv6 host holds a whole /64: its addresses share one cap.
    assert http_server.source_of(("2001:db8::1", 1)) == http_server.source_of(
        ("2001:db8::ffff:2", 1)
    )


def test_a_crowd_of_remote_addresses_leaves_loopback_its_reserve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue #36 finding 4, scaled down: each address holds at most 2 connections and all
    # remote addresses together at most 4 (the daemon's 64 and 960 of 1,024). Addresses
    # 127.0.0.2-4 play three remote machines (source_of keys them as such); 127.0.0.1 is
    # this machine.
    monkeypatch.setattr(http_server, "MAX_CONNECTIONS_PER_SOURCE", 2)
    monkeypatch.setattr(http_server, "MAX_REMOTE_CONNECTIONS", 4)
    local = http_server.source_of

    def keyed(client: tuple[str, int] | None) -> str | None:
        return (
            client[0]
            if client and client[0].startswith("127.0.0.") and client[0] != "127.0.0.1"
            else local(client)
        )

    monkeypatch.setattr(http_server, "source_of", keyed)

    async def hold(port: int, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
        await writer.drain()
        return reader, writer

    async def refused(reader: asyncio.StreamReader) -> bool:
        answer = await asyncio.wait_for(reader.read(), timeout=5)
        return answer.startswith(b"HTTP/1.1 503 ") and b"too_many_connections" in answer

    async def scenario() -> None:
        async with serving(_hello) as port:
            held = [await hold(port, source) for source in ("127.0.0.2",) * 2 + ("127.0.0.3",) * 2]
            await asyncio.sleep(0.2)
            # Past one address's cap, and past the crowd's (from an address with none).
            over_one = await hold(port, "127.0.0.2")
            over_crowd = await hold(port, "127.0.0.4")
            held += [over_one, over_crowd]
            assert await refused(over_one[0])
            assert await refused(over_crowd[0])
            # This machine is served meanwhile, many times over.
            async with httpx.AsyncClient() as client:
                for _ in range(8):
                    answer = await client.get(f"http://127.0.0.1:{port}/")
                    assert answer.status_code == 200
            for _, writer in held:
                writer.close()
                with contextlib.suppress(ConnectionError):
                    await writer.wait_closed()

    asyncio.run(scenario())


def test_a_refusal_is_answered_on_uvloop_transports_too() -> None:
    # uvloop's transports do not derive from asyncio's transport classes: a refusal
    # once checked isinstance(transport, asyncio.WriteTransport) and closed unanswered.
    uvloop = pytest.importorskip("uvloop")

    async def refuse_and_read() -> bytes:
        ours, theirs = socket.socketpair()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
        http_server._refuse(transport, 503, "too_many_connections", "busy")
        theirs.setblocking(False)
        received = b""
        while True:
            chunk = await loop.sock_recv(theirs, 4096)
            if not chunk:
                break
            received += chunk
        theirs.close()
        return received

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        answer = runner.run(refuse_and_read())
    assert answer.startswith(b"HTTP/1.1 503 ")
    assert b'"code":"too_many_connections"' in answer
