"""The fabric transport over real CURVE sockets on loopback."""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import warnings
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import zmq

from skulk_daemon.fabric.transport import (
    FabricBindError,
    FabricTransport,
    TransportStats,
)
from skulk_daemon.node.keys import CurveKeys, derive_curve_keys

PSK = b"the-cluster-key-of-this-test"
OTHER_PSK = b"a-different-cluster-key-entirely"
DEADLINE_S = 10.0
"""How long to wait for something that must happen (never a timing claim)."""
QUIET_S = 1.0
"""How long to keep trying something that must never happen."""
PROBE = b"probe"

Inbox = list[tuple[str, list[bytes]]]


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


async def eventually(check: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not check():
        if loop.time() > deadline:
            pytest.fail(f"not within {DEADLINE_S}s: {what}")
        await asyncio.sleep(0.02)


class Node:
    """A started transport plus everything it received (probes left out)."""

    def __init__(self, psk: bytes = PSK, *, keys: CurveKeys | None = None, **kwargs: Any) -> None:
        self.inbox: Inbox = []
        self.probes = 0
        self.transport = FabricTransport(
            bind_host="127.0.0.1",
            port=0,
            keys=keys or derive_curve_keys(psk),
            on_frames=self._receive,
            **kwargs,
        )

    def _receive(self, peer_ip: str, frames: list[bytes]) -> None:
        if frames == [PROBE]:
            self.probes += 1
        else:
            self.inbox.append((peer_ip, frames))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.transport.port}"

    def stats(self) -> TransportStats:
        return self.transport.stats()


async def started(*nodes: Node) -> None:
    for node in nodes:
        await node.transport.start()


async def closed(*nodes: Node) -> None:
    for node in nodes:
        await node.transport.close()


async def link(sender: Node, receiver: Node) -> None:
    """Connect sender to receiver and wait until a message gets through."""
    sender.transport.connect(receiver.address)
    before = receiver.probes
    await eventually(
        lambda: sender.transport.send(receiver.address, [PROBE]), "the handshake completed"
    )
    await eventually(lambda: receiver.probes > before, "the probe arrived")


def test_frames_arrive_intact_both_ways_with_the_senders_ip() -> None:
    async def main() -> None:
        a, b = Node(), Node()
        await started(a, b)
        try:
            await link(a, b)
            await link(b, a)
            big = os.urandom(1024 * 1024)
            binary = bytes(range(256))
            a_out, b_in = a.stats().frames_out, b.stats().frames_in

            assert a.transport.send(b.address, [b"envelope", binary, b"", big])
            assert b.transport.send(a.address, [b"reply"])
            await eventually(lambda: bool(b.inbox) and bool(a.inbox), "both messages arrived")

            assert b.inbox == [("127.0.0.1", [b"envelope", binary, b"", big])]
            assert a.inbox == [("127.0.0.1", [b"reply"])]
            assert a.stats().frames_out == a_out + 1
            assert b.stats().frames_in == b_in + 1
            assert a.stats().connected == (b.address,)
        finally:
            await closed(a, b)

    run(main)


def test_broadcast_reaches_every_connected_peer() -> None:
    async def main() -> None:
        hub, x, y = Node(), Node(), Node()
        await started(hub, x, y)
        try:
            await link(hub, x)
            await link(hub, y)

            assert hub.transport.broadcast([b"to-all"]) == 2
            await eventually(lambda: bool(x.inbox) and bool(y.inbox), "both peers got it")

            assert x.inbox == [("127.0.0.1", [b"to-all"])]
            assert y.inbox == [("127.0.0.1", [b"to-all"])]
            assert hub.stats().connected == tuple(sorted([x.address, y.address]))

            hub.transport.disconnect(y.address)
            assert hub.stats().connected == (x.address,)
            assert hub.transport.broadcast([b"again"]) == 1
        finally:
            await closed(hub, x, y)

    run(main)


def test_nodes_with_different_keys_exchange_nothing_and_are_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        good, outsider = Node(PSK), Node(OTHER_PSK)
        await started(good, outsider)
        try:
            good.transport.connect(outsider.address)
            outsider.transport.connect(good.address)
            loop = asyncio.get_running_loop()
            end = loop.time() + QUIET_S
            accepted = 0
            while loop.time() < end:
                accepted += good.transport.send(outsider.address, [b"secret"])
                accepted += outsider.transport.send(good.address, [b"inject"])
                await asyncio.sleep(0.05)
            await eventually(
                lambda: bool(good.stats().refused) and bool(outsider.stats().refused),
                "each side recorded the other's refused handshake",
            )

            assert good.inbox == [] and outsider.inbox == []
            assert good.probes == 0 and outsider.probes == 0
            assert accepted == 0, "no handshake completed, so nothing was even queued"
            assert good.stats().dropped_out > 0
            refusals = [r for r in good.stats().refused if "cluster key" in r.reason]
            assert refusals, good.stats().refused
            assert "does not hold the cluster key" in refusals[0].reason
            assert str(good.transport.port) in refusals[0].address
        finally:
            await closed(good, outsider)

    with caplog.at_level(logging.WARNING, logger="skulk_daemon.fabric.transport"):
        run(main)
    assert "does not hold the cluster key" in caplog.text
    for keys in (derive_curve_keys(PSK), derive_curve_keys(OTHER_PSK)):
        for secret in (keys.server_secret, keys.client_secret, keys.client_public):
            assert secret.decode() not in caplog.text


def test_a_peer_without_curve_delivers_nothing_and_is_refused() -> None:
    async def main() -> None:
        node = Node()
        await started(node)
        ctx = zmq.Context()
        plain = ctx.socket(zmq.DEALER)
        try:
            plain.connect(f"tcp://{node.address}")
            plain.send_multipart([b"plaintext", b"inject"])
            await eventually(lambda: bool(node.stats().refused), "the plain peer was refused")
            await asyncio.sleep(QUIET_S)

            assert node.inbox == [] and node.stats().frames_in == 0
            # Either end may notice the mismatch first: the reason names it, or
            # says the peer hung up mid-handshake.
            assert node.stats().refused[0].reason.startswith("handshake failed")
        finally:
            plain.close(linger=0)
            ctx.term()
            await closed(node)

    run(main)


def test_a_client_with_only_the_server_key_is_refused_by_zap() -> None:
    async def main() -> None:
        node = Node()
        await started(node)
        leaked = derive_curve_keys(PSK).server_public
        public, secret = zmq.curve_keypair()
        ctx = zmq.Context()
        intruder = ctx.socket(zmq.DEALER)
        try:
            intruder.curve_serverkey = leaked
            intruder.curve_publickey = public
            intruder.curve_secretkey = secret
            intruder.connect(f"tcp://{node.address}")
            intruder.send_multipart([b"inject"])
            await eventually(lambda: bool(node.stats().refused), "ZAP refused the intruder")
            await asyncio.sleep(QUIET_S)

            assert node.inbox == [] and node.stats().frames_in == 0
            refusal = node.stats().refused[0]
            assert refusal.address == "127.0.0.1"
            assert "ZAP" in refusal.reason and "client key" in refusal.reason
            assert len(node.stats().refused) == 1, "ZAP refusals are not counted twice"
        finally:
            intruder.close(linger=0)
            ctx.term()
            await closed(node)

    run(main)


def test_repeated_refusals_of_one_peer_share_an_entry() -> None:
    async def main() -> None:
        node = Node()
        await started(node)
        outsider = derive_curve_keys(OTHER_PSK)
        ctx = zmq.Context()
        outsiders = [ctx.socket(zmq.DEALER) for _ in range(3)]
        try:
            for dealer in outsiders:
                dealer.curve_serverkey = outsider.server_public
                dealer.curve_publickey = outsider.client_public
                dealer.curve_secretkey = outsider.client_secret
                dealer.connect(f"tcp://{node.address}")
            await eventually(
                lambda: bool(node.stats().refused) and node.stats().refused[0].attempts >= 3,
                "three refusals were recorded",
            )
            assert len(node.stats().refused) == 1
        finally:
            for dealer in outsiders:
                dealer.close(linger=0)
            ctx.term()
            await closed(node)

    run(main)


def test_a_handler_that_raises_does_not_stop_later_deliveries(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        a, b = Node(), Node()
        seen: list[bytes] = []

        def fragile(peer_ip: str, frames: list[bytes]) -> None:
            if frames == [b"boom"]:
                raise RuntimeError("handler bug")
            seen.append(frames[0])

        b.transport = FabricTransport(
            bind_host="127.0.0.1", port=0, keys=derive_curve_keys(PSK), on_frames=fragile
        )
        await started(a, b)
        try:
            a.transport.connect(b.address)
            await eventually(lambda: a.transport.send(b.address, [b"first"]), "handshake")
            assert a.transport.send(b.address, [b"boom"])
            assert a.transport.send(b.address, [b"after"])
            await eventually(lambda: b"after" in seen, "the later frame arrived")

            assert seen[-1] == b"after"
            assert b.stats().handler_errors == 1
        finally:
            await closed(a, b)

    with caplog.at_level(logging.ERROR, logger="skulk_daemon.fabric.transport"):
        run(main)
    assert "handler bug" in caplog.text


def test_sends_nowhere_are_refused_and_counted() -> None:
    async def main() -> None:
        node = Node()
        await started(node)
        # A port nobody listens on: the one a transport had before it closed.
        gone = Node()
        await started(gone)
        nowhere = gone.address
        await closed(gone)
        try:
            assert not node.transport.send("127.0.0.1:1", [b"x"])
            assert node.stats().dropped_out == 1

            node.transport.connect(nowhere)
            node.transport.connect(nowhere)  # idempotent
            assert node.stats().connected == (nowhere,)
            assert not node.transport.send(nowhere, [b"x"])
            assert node.transport.broadcast([b"x"]) == 0
            assert node.stats().dropped_out == 3
            assert node.stats().frames_out == 0

            with pytest.raises(ValueError, match="host:port"):
                node.transport.connect("no-port-here")
            with pytest.raises(ValueError, match="at least one frame"):
                node.transport.send(nowhere, [])
        finally:
            await closed(node)

    run(main)


def test_a_peer_that_stops_reading_fills_a_bounded_queue() -> None:
    async def main() -> None:
        keys = derive_curve_keys(PSK)
        node = Node(send_hwm=1)
        await started(node)
        ctx = zmq.Context()
        sink = ctx.socket(zmq.ROUTER)  # holds the cluster keys, never reads
        try:
            sink.rcvhwm = 1
            sink.curve_server = True
            sink.curve_secretkey = keys.server_secret
            port = sink.bind_to_random_port("tcp://127.0.0.1")
            address = f"127.0.0.1:{port}"
            node.transport.connect(address)
            await eventually(lambda: node.transport.send(address, [b"hello"]), "handshake")

            chunk = os.urandom(1024 * 1024)
            accepted = 0
            for _ in range(2_000):
                if not node.transport.send(address, [chunk]):
                    break
                accepted += 1
            else:
                pytest.fail("2 GiB queued for a peer that reads nothing")
            assert node.stats().dropped_out >= 1
            assert node.stats().frames_out == accepted + 1
        finally:
            sink.close(linger=0)
            ctx.term()
            await closed(node)

    run(main)


def test_binding_a_port_in_use_names_it() -> None:
    async def main() -> None:
        first = Node()
        await started(first)
        second = FabricTransport(
            bind_host="127.0.0.1",
            port=first.transport.port,
            keys=derive_curve_keys(PSK),
            on_frames=lambda _ip, _frames: None,
        )
        try:
            with pytest.raises(FabricBindError) as caught:
                await second.start()
            assert isinstance(caught.value, OSError)
            assert caught.value.errno == errno.EADDRINUSE
            assert f"127.0.0.1:{first.transport.port}" in str(caught.value)
        finally:
            await second.close()
            await closed(first)

    run(main)


def test_keys_stay_out_of_reprs_and_errors() -> None:
    keys = derive_curve_keys(PSK)
    transport = FabricTransport(
        bind_host="127.0.0.1", port=0, keys=keys, on_frames=lambda _ip, _frames: None
    )
    text = repr(transport) + repr(keys) + repr(transport.stats())
    for key in (keys.server_public, keys.server_secret, keys.client_public, keys.client_secret):
        assert key.decode() not in text


def test_close_leaves_nothing_behind() -> None:
    async def main() -> None:
        a, b = Node(), Node()
        await started(a, b)
        await link(a, b)
        a.transport.connect("127.0.0.1:1")
        assert a.transport.send(b.address, [b"in flight"])
        await closed(a, b)
        await a.transport.close()  # idempotent
        with pytest.raises(RuntimeError):
            a.transport.connect(b.address)
        assert not a.transport.send(b.address, [b"after close"])

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(main)
        gc.collect()
    assert [str(w.message) for w in caught] == []
