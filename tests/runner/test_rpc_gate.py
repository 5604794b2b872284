"""The gate in front of a donor's llama.cpp RPC server, over real loopback sockets:
members relay bytes both ways, strangers are refused, and a donor that goes away is
reported to the driver (while the driver closing its own connections is not).
Tampering, impostors and eavesdroppers are in tests/security/test_rpc_relay.py."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from skulk_daemon.runner.rpc_gate import (
    DRIVER_DOMAIN,
    MAGIC,
    NONCE_BYTES,
    GateClient,
    GateServer,
    proof,
)

KEY = b"k" * 32
INSTANCE = "instance-1"


class EchoServer:
    """Stands in for llama.cpp's RPC server: echoes, and can hang up on everyone."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        self.received = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := conn.recv(65536):
                self.received += len(data)
                conn.sendall(data)

    def hang_up(self) -> None:
        for conn in self.connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self.listener.close()


@contextlib.contextmanager
def echo_gate() -> Iterator[tuple[EchoServer, GateServer]]:
    """A donor's gate in front of an :class:`EchoServer`, on loopback."""
    echo = EchoServer()
    gate = GateServer("127.0.0.1", 0, key=KEY, instance_id=INSTANCE)
    gate.start(("127.0.0.1", echo.port))
    try:
        yield echo, gate
    finally:
        gate.close()
        echo.hang_up()


@pytest.fixture
def donor() -> Iterator[tuple[EchoServer, GateServer]]:
    with echo_gate() as pair:
        yield pair


class Lost:
    """Collects what the driver is told about a lost donor."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.reported = threading.Event()

    def __call__(self, why: str) -> None:
        self.reasons.append(why)
        self.reported.set()


def _client(gate: GateServer, lost: list[str], key: bytes = KEY) -> GateClient:
    client = GateClient(gate.address, key=key, instance_id=INSTANCE, on_lost=lost.append)
    client.start()
    return client


def answer(key: bytes, challenge: bytes, instance: str = INSTANCE) -> bytes:
    """What a driver sends back for ``challenge`` (MAGIC || gate nonce)."""
    driver_nonce = b"d" * NONCE_BYTES
    gate_nonce = challenge[len(MAGIC) :]
    return driver_nonce + proof(DRIVER_DOMAIN, key, gate_nonce, driver_nonce, instance)


def roundtrip(client: GateClient, payload: bytes) -> bytes:
    host, port = client.endpoint.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(payload)
        received = b""
        while len(received) < len(payload):
            chunk = sock.recv(65536)
            assert chunk, "the relay closed early"
            received += chunk
    return received


def test_a_member_relays_bytes_both_ways(donor: tuple[EchoServer, GateServer]) -> None:
    _, gate = donor
    lost: list[str] = []
    client = _client(gate, lost)
    payload = bytes(range(256)) * 4096  # 1 MiB: several relay chunks
    assert roundtrip(client, payload) == payload
    # The driver closing its own connection is not a lost donor.
    assert lost == []
    client.close()


def test_a_wrong_key_is_refused_before_reaching_the_server(
    donor: tuple[EchoServer, GateServer],
) -> None:
    echo, gate = donor
    with socket.create_connection(gate.address, timeout=5) as outsider:
        challenge = outsider.recv(len(MAGIC) + NONCE_BYTES)
        assert challenge.startswith(MAGIC)
        outsider.sendall(answer(b"x" * 32, challenge))
        assert outsider.recv(1) == b""
    assert gate.refused == 1
    assert echo.connections == []


def test_an_answer_for_another_pool_is_refused(donor: tuple[EchoServer, GateServer]) -> None:
    _, gate = donor
    with socket.create_connection(gate.address, timeout=5) as outsider:
        challenge = outsider.recv(len(MAGIC) + NONCE_BYTES)
        outsider.sendall(answer(KEY, challenge, "another-instance"))
        assert outsider.recv(1) == b""
    assert gate.refused == 1


def test_a_donor_going_away_is_reported_to_the_driver(
    donor: tuple[EchoServer, GateServer],
) -> None:
    echo, gate = donor
    lost = Lost()
    client = GateClient(gate.address, key=KEY, instance_id=INSTANCE, on_lost=lost)
    client.start()
    host, port = client.endpoint.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"ping")
        assert sock.recv(4) == b"ping"
        echo.hang_up()
        assert lost.reported.wait(5)
    assert len(lost.reasons) == 1 and "closed the connection" in lost.reasons[0]


def test_an_unreachable_donor_is_reported() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    lost = Lost()
    client = GateClient(("127.0.0.1", free_port), key=KEY, instance_id=INSTANCE, on_lost=lost)
    client.start()
    host, port = client.endpoint.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5):
        assert lost.reported.wait(10)
    assert "cannot reach the RPC donor" in lost.reasons[0]


def test_the_driver_is_told_before_its_own_sockets_close(
    donor: tuple[EchoServer, GateServer],
) -> None:
    """llama.cpp aborts the driver when its socket closes; the loss must be reported
    (a driver's report then exits) while every local socket is still open, however
    many connections see the donor go at once."""
    echo, gate = donor
    reported, release = threading.Event(), threading.Event()
    reasons: list[str] = []

    def exits(why: str) -> None:  # a driver's report never returns: it exits
        reasons.append(why)
        reported.set()
        release.wait(10)

    client = GateClient(gate.address, key=KEY, instance_id=INSTANCE, on_lost=exits)
    client.start()
    host, port = client.endpoint.rsplit(":", 1)
    sockets = [socket.create_connection((host, int(port)), timeout=5) for _ in range(2)]
    try:
        for sock in sockets:
            sock.sendall(b"ping")
            assert sock.recv(4) == b"ping"
        echo.hang_up()
        assert reported.wait(5)
        for sock in sockets:
            sock.settimeout(0.5)
            with pytest.raises(TimeoutError):
                sock.recv(1)  # still open: no end of stream while the report runs
        release.set()
        for sock in sockets:
            sock.settimeout(5)
            assert sock.recv(1) == b""
        assert len(reasons) == 1
    finally:
        release.set()
        for sock in sockets:
            sock.close()
