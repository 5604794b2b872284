"""The gate in front of llama.cpp's RPC server: only cluster members get through.

llama.cpp's RPC server trusts whoever connects (it is a remote memory and compute
device with no authentication). So a donor binds it to loopback on a private port
and exposes a :class:`GateServer` on the port the placement assigned, on the
fabric's interface. Every connection must first answer a challenge with an HMAC
keyed by a secret derived from the cluster key and bound to the pool's instance
id; a peer that is not a cluster member (or belongs to another pool) is refused
and logged without its answer. A driver reaches its donors through a local
:class:`GateClient` per donor, which answers the challenge and then relays bytes
both ways, so llama.cpp on the driver talks to ``127.0.0.1:<port>`` as if the
donor were local.

Handshake: server sends ``MAGIC || nonce(32)``; client sends
``HMAC-SHA256(key, DOMAIN || nonce || instance_id)``; the server closes the
connection on a wrong answer or after ``HANDSHAKE_TIMEOUT_SECONDS``.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Final

log = logging.getLogger("skulk.runner.rpc_gate")

MAGIC: Final = b"SKULK-RPC-GATE/1"
DOMAIN: Final = b"skulk-rpc-gate-v1\x00"
NONCE_BYTES: Final = 32
ANSWER_BYTES: Final = 32
HANDSHAKE_TIMEOUT_SECONDS: Final = 5.0
_CHUNK: Final = 256 * 1024


def gate_answer(key: bytes, nonce: bytes, instance_id: str) -> bytes:
    return hmac.new(key, DOMAIN + nonce + instance_id.encode(), hashlib.sha256).digest()


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the peer closed the connection during the handshake")
        data += chunk
    return bytes(data)


def _nodelay(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _pump(
    source: socket.socket,
    sink: socket.socket,
    stopped: Callable[[socket.socket], None],
    done: Callable[[], None],
) -> None:
    """Copy ``source`` to ``sink`` until either side closes; then report which side
    stopped (before shutting both down, so the other direction cannot claim it)."""
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    try:
        while True:
            count = source.recv_into(buffer)
            if not count:
                break
            sink.sendall(view[:count])
    except OSError:
        pass
    finally:
        stopped(source)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        done()


def _relay(a: socket.socket, b: socket.socket, on_end: Callable[[socket.socket], None]) -> None:
    """Relay ``a`` ⇄ ``b`` on two threads. When both directions have stopped, close
    both and call ``on_end`` with the socket whose side ended first."""
    first: list[socket.socket] = []
    finished: list[bool] = []
    lock = threading.Lock()

    def stopped(source: socket.socket) -> None:
        with lock:
            if not first:
                first.append(source)

    def done() -> None:
        with lock:
            finished.append(True)
            last = len(finished) == 2
        if last:
            a.close()
            b.close()
            on_end(first[0])

    for source, sink in ((a, b), (b, a)):
        threading.Thread(target=_pump, args=(source, sink, stopped, done), daemon=True).start()


class GateServer:
    """Admits authenticated peers on ``host:port`` and relays them to ``target``."""

    def __init__(
        self, host: str, port: int, *, target: tuple[str, int], key: bytes, instance_id: str
    ) -> None:
        self._target = target
        self._key = key
        self._instance_id = instance_id
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind((host, port))
        except OSError:
            self._listener.close()
            raise
        self._listener.listen(16)
        self.refused = 0

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    def start(self) -> None:
        threading.Thread(target=self._accept_loop, name="rpc-gate", daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept_loop(self) -> None:
        while True:
            try:
                peer, address = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._admit, args=(peer, address), daemon=True).start()

    def _admit(self, peer: socket.socket, address: tuple[str, int]) -> None:
        nonce = os.urandom(NONCE_BYTES)
        try:
            peer.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
            peer.sendall(MAGIC + nonce)
            answer = _recv_exactly(peer, ANSWER_BYTES)
        except (OSError, ConnectionError):
            self._refuse(peer, address, "no answer to the gate's challenge")
            return
        if not hmac.compare_digest(answer, gate_answer(self._key, nonce, self._instance_id)):
            self._refuse(peer, address, "wrong answer: not a member of this cluster's pool")
            return
        peer.settimeout(None)
        try:
            upstream = socket.create_connection(self._target, timeout=HANDSHAKE_TIMEOUT_SECONDS)
        except OSError as exc:
            log.error("the local RPC server at %s:%d is unreachable: %s", *self._target, exc)
            peer.close()
            return
        upstream.settimeout(None)
        for sock in (peer, upstream):
            _nodelay(sock)
        log.info("admitted RPC peer %s:%d", address[0], address[1])
        _relay(peer, upstream, lambda _first: log.info("RPC peer %s:%d left", *address[:2]))

    def _refuse(self, peer: socket.socket, address: tuple[str, int], why: str) -> None:
        self.refused += 1
        log.warning("refused RPC peer %s:%d: %s", address[0], address[1], why)
        peer.close()


class GateClient:
    """A loopback port that reaches one donor's gate, answering its challenge.

    ``on_lost`` runs (once) when an admitted connection to the donor ends from the
    donor's side: the donor went away, which the driver cannot survive.
    """

    def __init__(
        self,
        remote: tuple[str, int],
        *,
        key: bytes,
        instance_id: str,
        on_lost: Callable[[str], None],
    ) -> None:
        self._remote = remote
        self._key = key
        self._instance_id = instance_id
        self._on_lost = on_lost
        self._lost = threading.Event()
        self._closing = False
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)

    @property
    def endpoint(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"{host}:{port}"

    def start(self) -> None:
        threading.Thread(target=self._accept_loop, name="rpc-gate-client", daemon=True).start()

    def close(self) -> None:
        self._closing = True
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept_loop(self) -> None:
        while True:
            try:
                local, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(local,), daemon=True).start()

    def _connect(self, local: socket.socket) -> None:
        host, port = self._remote
        try:
            remote = socket.create_connection((host, port), timeout=HANDSHAKE_TIMEOUT_SECONDS)
            challenge = _recv_exactly(remote, len(MAGIC) + NONCE_BYTES)
            if not challenge.startswith(MAGIC):
                raise ConnectionError("the donor's port does not speak the Skulk RPC gate")
            remote.sendall(gate_answer(self._key, challenge[len(MAGIC) :], self._instance_id))
            remote.settimeout(None)
        except (OSError, ConnectionError) as exc:
            local.close()
            self._lose(f"cannot reach the RPC donor at {host}:{port}: {exc}")
            return
        for sock in (local, remote):
            _nodelay(sock)

        def ended(first: socket.socket) -> None:
            # Only the donor's side ending first is a loss: llama.cpp closes
            # its own connections when it no longer needs them.
            if first is remote:
                self._lose(f"the RPC donor at {host}:{port} closed the connection")

        _relay(local, remote, ended)

    def _lose(self, why: str) -> None:
        if self._closing or self._lost.is_set():
            return
        self._lost.set()
        log.error("%s", why)
        self._on_lost(why)
