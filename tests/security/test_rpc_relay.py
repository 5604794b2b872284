"""What sits between a driver and a donor learns and changes nothing: the relay is
sealed, an altered frame closes it, and a driver refuses a gate that cannot prove
it holds the cluster's key (over real loopback sockets)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator

import pytest

from skulk_daemon.node.keys import derive_rpc_relay_keys
from skulk_daemon.runner.rpc_gate import MAGIC, NONCE_BYTES, PROOF_BYTES, GateClient, GateServer
from skulk_daemon.runner.rpc_relay import (
    MAX_FRAME_BYTES,
    MAX_FRAME_PLAINTEXT,
    Opener,
    RelayTampered,
    Sealer,
)
from tests.runner.test_rpc_gate import INSTANCE, KEY, EchoServer, Lost, echo_gate, roundtrip

GATE_HANDSHAKE = len(MAGIC) + NONCE_BYTES + PROOF_BYTES  # what the gate sends first
DRIVER_HANDSHAKE = NONCE_BYTES + PROOF_BYTES  # what the driver sends first
WAIT_S = 10.0  # only stops a broken test from hanging


class Proxy:
    """A man in the middle between a driver and a gate: records what crosses it and
    can flip one bit of the first frame after the handshake, in one direction."""

    def __init__(self, upstream: tuple[str, int], flip: str | None = None) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self.upstream = upstream
        self.flip = flip
        self.seen = {"to_gate": bytearray(), "to_driver": bytearray()}
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                driver, _ = self.listener.accept()
                gate = socket.create_connection(self.upstream)
                self.sockets += [driver, gate]
                for source, sink, name, skip in (
                    (driver, gate, "to_gate", DRIVER_HANDSHAKE),
                    (gate, driver, "to_driver", GATE_HANDSHAKE),
                ):
                    threading.Thread(
                        target=self._pump, args=(source, sink, name, skip), daemon=True
                    ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, name: str, skip: int) -> None:
        # The byte flipped sits inside the first frame's ciphertext, past its length.
        target = skip + 4 + 2 if self.flip == name else -1
        with contextlib.suppress(OSError):
            while data := bytearray(source.recv(65536)):
                start = len(self.seen[name])
                if start <= target < start + len(data):
                    data[target - start] ^= 0x01
                self.seen[name] += data
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            sock.close()


def closed(sock: socket.socket) -> bool:
    """The peer closed ``sock`` (cleanly, or with a reset for unread bytes)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
def donor() -> Iterator[tuple[EchoServer, GateServer]]:
    with echo_gate() as pair:
        yield pair


def refused_through(address: tuple[str, int], payload: bytes) -> str:
    """Send ``payload`` through a driver's gate client to ``address``, which must close
    the connection without answering; what the driver was told."""
    lost = Lost()
    client = GateClient(address, key=KEY, instance_id=INSTANCE, on_lost=lost)
    client.start()
    host, port = client.endpoint.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=WAIT_S) as local:
            local.sendall(payload)
            assert closed(local)
        assert lost.reported.wait(WAIT_S)
    finally:
        client.close()
    return lost.reasons[0]


def test_a_man_in_the_middle_sees_only_ciphertext(donor: tuple[EchoServer, GateServer]) -> None:
    _, gate = donor
    proxy = Proxy(gate.address)
    lost = Lost()
    client = GateClient(proxy.address, key=KEY, instance_id=INSTANCE, on_lost=lost)
    client.start()
    secret = b"layer weights and activations " * 4096
    assert roundtrip(client, secret) == secret
    for crossed in proxy.seen.values():
        assert len(crossed) > len(secret)
        assert b"layer weights" not in crossed
    client.close()
    proxy.close()


@pytest.mark.parametrize("direction", ["to_gate", "to_driver"])
def test_a_flipped_ciphertext_byte_closes_the_relay(
    donor: tuple[EchoServer, GateServer], direction: str
) -> None:
    echo, gate = donor
    proxy = Proxy(gate.address, flip=direction)
    # Closed, with nothing delivered: not the altered bytes, not the echo.
    why = refused_through(proxy.address, b"ping")
    if direction == "to_gate":
        # The gate opened nothing, so llama.cpp's server never saw a byte.
        assert echo.received == 0
        assert "closed the connection" in why
    else:
        assert "failed authentication" in why
    proxy.close()


class Impostor:
    """Listens where a donor should be and speaks the gate's protocol, without the key."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self.received = bytearray()
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with self.listener:
            driver, _ = self.listener.accept()
        with driver, contextlib.suppress(OSError):
            driver.sendall(MAGIC + os.urandom(NONCE_BYTES))
            while len(self.received) < DRIVER_HANDSHAKE:
                self.received += driver.recv(4096)
            driver.sendall(os.urandom(PROOF_BYTES))  # a proof it cannot make
            while data := driver.recv(4096):
                self.received += data
        self.done.set()


def test_a_driver_refuses_a_gate_without_the_key() -> None:
    impostor = Impostor()
    why = refused_through(impostor.address, b"the driver's first RPC command")
    assert "did not prove it holds this cluster's key" in why
    assert impostor.done.wait(WAIT_S)
    # The impostor got the driver's challenge answer, and nothing of llama.cpp's.
    assert len(impostor.received) == DRIVER_HANDSHAKE


def test_frames_are_bounded_at_the_largest_plaintext() -> None:
    key = os.urandom(32)
    writer, reader = socket.socketpair()
    with writer, reader:
        largest = os.urandom(MAX_FRAME_PLAINTEXT)
        sealer, opener = Sealer(key), Opener(key)
        threading.Thread(target=writer.sendall, args=(sealer.seal(largest),)).start()
        assert opener.read(reader) == largest
        with pytest.raises(ValueError):
            sealer.seal(largest + b"!")
        writer.sendall((MAX_FRAME_BYTES + 1).to_bytes(4, "big"))
        with pytest.raises(RelayTampered, match="out of bounds"):
            opener.read(reader)


def test_a_replayed_frame_fails_to_open() -> None:
    key = os.urandom(32)
    writer, reader = socket.socketpair()
    with writer, reader:
        frame = Sealer(key).seal(b"once")
        opener = Opener(key)
        writer.sendall(frame + frame)
        assert opener.read(reader) == b"once"
        with pytest.raises(RelayTampered, match="failed authentication"):
            opener.read(reader)


def test_every_connection_and_direction_has_its_own_keys() -> None:
    nonces = [os.urandom(NONCE_BYTES) for _ in range(3)]
    first = derive_rpc_relay_keys(KEY, INSTANCE, nonces[0], nonces[1])
    assert first == derive_rpc_relay_keys(KEY, INSTANCE, nonces[0], nonces[1])
    assert first[0] != first[1]
    others = [
        derive_rpc_relay_keys(KEY, INSTANCE, nonces[0], nonces[2]),  # a new gate nonce
        derive_rpc_relay_keys(KEY, INSTANCE, nonces[2], nonces[1]),  # a new driver nonce
        derive_rpc_relay_keys(KEY, "another-instance", nonces[0], nonces[1]),
        derive_rpc_relay_keys(b"x" * 32, INSTANCE, nonces[0], nonces[1]),  # another key
    ]
    seen = {key for pair in [first, *others] for key in pair}
    assert len(seen) == 2 * (1 + len(others))
    assert KEY not in seen
