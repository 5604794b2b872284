"""``dataplane``: ping-pong round trips between two fabric transports in-process;
peer: raw pyzmq pairs in the same layout."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from typing import Any

import zmq
import zmq.asyncio

from bench.fabric._cluster import (
    CLUSTER_KEY,
    log,
    now,
    pct,
    r,
)
from skulk_core.cluster.fabric import (
    PROTOCOL_VERSION,
    DataFrame,
    Header,
    decode_body,
    decode_header,
    encode,
)
from skulk_core.ids import CommandId, NodeId
from skulk_daemon.fabric.transport import FabricTransport
from skulk_daemon.node.keys import CurveKeys, derive_curve_keys


class SkulkPair:
    """Two fabric transports on loopback, each echoing data frames back to the other.

    Without ``envelope``, the payload travels as the only frame (the transport's
    cost alone: CURVE, ZAP, its socket options and receive loop)."""

    def __init__(self, *, envelope: bool = True) -> None:
        self.envelope = envelope
        self.pending = -1
        self.keys = derive_curve_keys(CLUSTER_KEY.encode())
        self.waiter: asyncio.Future[int] | None = None
        self.a = FabricTransport(bind_host="127.0.0.1", port=0, keys=self.keys, on_frames=self._a)
        self.b = FabricTransport(bind_host="127.0.0.1", port=0, keys=self.keys, on_frames=self._b)
        self._seq = {"a": 0, "b": 0}
        self.command = CommandId("bench-command")

    async def start(self) -> None:
        await self.a.start()
        await self.b.start()
        self.addr_a = f"127.0.0.1:{self.a.port}"
        self.addr_b = f"127.0.0.1:{self.b.port}"
        self.a.connect(self.addr_b)
        self.b.connect(self.addr_a)

    def _frames(self, side: str, seq: int, payload: bytes) -> list[bytes]:
        if not self.envelope:
            return [payload]
        self._seq[side] += 1
        header = Header(
            version=PROTOCOL_VERSION,
            plane="data",
            origin=NodeId(f"12D3KooWbench{side}"),
            seq=self._seq[side],
        )
        return encode(header, DataFrame(command_id=self.command, seq=seq, payload=payload))

    def _decode(self, frames: list[bytes]) -> tuple[int, bytes]:
        """The ping's sequence number and payload."""
        if not self.envelope:
            return self.pending, frames[0]
        # What ClusterAgent._on_frames does before handing a frame to the data plane.
        header = decode_header(frames)
        body = decode_body(frames)
        if (
            header.plane != "data"
            or not isinstance(body, DataFrame)
            or not isinstance(body.payload, bytes)  # a media chunk, not a generation's
        ):
            raise RuntimeError("not a data frame of bytes")
        return body.seq, body.payload

    def _b(self, _peer: str, frames: list[bytes]) -> None:
        seq, payload = self._decode(frames)
        self.b.send(self.addr_a, self._frames("b", seq, payload))

    def _a(self, _peer: str, frames: list[bytes]) -> None:
        seq, _ = self._decode(frames)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(seq)

    async def ping(self, seq: int, payload: bytes) -> bool:
        self.waiter = asyncio.get_running_loop().create_future()
        self.pending = seq
        if not self.a.send(self.addr_b, self._frames("a", seq, payload)):
            return False
        return await self.waiter == seq

    async def close(self) -> None:
        await self.a.close()
        await self.b.close()


class RawPair:
    """The same layout in plain pyzmq: a bound ROUTER per side, a DEALER to the
    other, one context per side, the payload as the only frame, no ZAP handler.
    With ``keys``, the sockets use CURVE with them (the cost of encryption alone)."""

    def __init__(self, keys: CurveKeys | None = None) -> None:
        self.keys = keys
        self.ctx_a = zmq.asyncio.Context()
        self.ctx_b = zmq.asyncio.Context()
        self.waiter: asyncio.Future[bytes] | None = None
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self.router_a = self.ctx_a.socket(zmq.ROUTER)
        self.router_b = self.ctx_b.socket(zmq.ROUTER)
        ports = []
        for router in (self.router_a, self.router_b):
            router.setsockopt(zmq.LINGER, 0)
            if self.keys is not None:
                router.setsockopt(zmq.CURVE_SERVER, 1)
                router.setsockopt(zmq.CURVE_PUBLICKEY, self.keys.server_public)
                router.setsockopt(zmq.CURVE_SECRETKEY, self.keys.server_secret)
            ports.append(router.bind_to_random_port("tcp://127.0.0.1"))
        self.dealer_a: zmq.Socket[bytes] = zmq.Socket(self.ctx_a, zmq.DEALER)
        self.dealer_b: zmq.Socket[bytes] = zmq.Socket(self.ctx_b, zmq.DEALER)
        for dealer, port in ((self.dealer_a, ports[1]), (self.dealer_b, ports[0])):
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.setsockopt(zmq.IMMEDIATE, 1)
            if self.keys is not None:
                dealer.setsockopt(zmq.CURVE_SERVERKEY, self.keys.server_public)
                dealer.setsockopt(zmq.CURVE_PUBLICKEY, self.keys.client_public)
                dealer.setsockopt(zmq.CURVE_SECRETKEY, self.keys.client_secret)
            dealer.connect(f"tcp://127.0.0.1:{port}")
        self.tasks = [
            asyncio.create_task(self._echo()),
            asyncio.create_task(self._collect()),
        ]

    async def _echo(self) -> None:
        while True:
            _, payload = await self.router_b.recv_multipart()
            self.dealer_b.send(payload, flags=zmq.NOBLOCK)

    async def _collect(self) -> None:
        while True:
            _, payload = await self.router_a.recv_multipart()
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(payload)

    async def ping(self, seq: int, payload: bytes) -> bool:
        del seq
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            self.dealer_a.send(payload, flags=zmq.NOBLOCK)
        except zmq.Again:
            return False
        return len(await self.waiter) == len(payload)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for sock in (self.router_a, self.router_b, self.dealer_a, self.dealer_b):
            sock.close(linger=0)
        self.ctx_a.term()
        self.ctx_b.term()


Ping = Callable[[int, bytes], Awaitable[bool]]


async def until_connected(ping: Ping, payload: bytes) -> None:
    """Ping until one round trip completes (the CURVE handshake takes a moment)."""
    deadline = now() + 10.0
    while now() < deadline:
        with contextlib.suppress(TimeoutError):
            if await asyncio.wait_for(ping(-1, payload), 0.5):
                return
        await asyncio.sleep(0.01)
    raise RuntimeError("the pair never connected")


async def block(ping: Ping, payload: bytes, count: int, into: list[float]) -> None:
    for seq in range(count):
        sent = now()
        if not await ping(seq, payload):
            raise RuntimeError("a ping was refused or mangled")
        into.append(now() - sent)


async def dataplane_section(args: argparse.Namespace) -> dict[str, Any]:
    skulk = SkulkPair()
    pairs: dict[str, SkulkPair | RawPair] = {
        "skulk": skulk,
        "transport": SkulkPair(envelope=False),
        "curve": RawPair(skulk.keys),
        "raw": RawPair(),
    }
    for pair in pairs.values():
        await pair.start()
    results: list[dict[str, Any]] = []
    try:
        for size in args.sizes:
            payload = os.urandom(size)
            for pair in pairs.values():
                await until_connected(pair.ping, payload)
            times: dict[str, list[float]] = {side: [] for side in pairs}
            per_block = max(1, args.pings // args.blocks)
            for b in range(args.blocks + 1):  # block 0 is the discarded warm-up
                order = list(pairs) if b % 2 == 0 else list(reversed(pairs))
                for side in order:
                    sink: list[float] = [] if b == 0 else times[side]
                    await block(pairs[side].ping, payload, per_block, sink)
            p50 = {side: pct(t, 50) for side, t in times.items()}
            p99 = {side: pct(t, 99) for side, t in times.items()}
            row: dict[str, Any] = {"payload_bytes": size, "pings": len(times["skulk"])}
            for side in pairs:
                row[f"{side}_rtt_us_p50"] = r(p50[side] * 1e6, 1)
                row[f"{side}_rtt_us_p99"] = r(p99[side] * 1e6, 1)
            row["ratio_p50"] = r(p50["skulk"] / p50["raw"], 3)
            row["ratio_p99"] = r(p99["skulk"] / p99["raw"], 3)
            row["curve_ratio_p50"] = r(p50["curve"] / p50["raw"], 3)
            log(f"dataplane: {row}")
            results.append(row)
    finally:
        for pair in pairs.values():
            await pair.close()
    return {"sizes": results}
