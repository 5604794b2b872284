"""The gate in front of llama.cpp's RPC server: only cluster members get through.

llama.cpp's RPC server trusts whoever connects (it is a remote memory and compute
device with no authentication). So a donor runs it where only the donor itself can
reach it (runner/rpc_netns.py) and exposes a :class:`GateServer` on the port the
placement assigned, on the fabric's interface. A driver reaches its donors through a
local :class:`GateClient` per donor, which llama.cpp on the driver talks to as if
the donor were local.

Handshake (both sides prove they hold the pool's key, bound to the instance id and
both fresh nonces)::

    gate   -> driver  MAGIC || gate_nonce(32)
    driver -> gate    driver_nonce(32) || HMAC(key, DRIVER || gate_nonce || driver_nonce || id)
    gate   -> driver  HMAC(key, GATE || gate_nonce || driver_nonce || id)

The gate closes on a wrong answer, the driver on a wrong proof (an impostor on the
donor's address, or another pool's gate), either after
``HANDSHAKE_TIMEOUT_SECONDS``. Then the relay is sealed (runner/rpc_relay.py) with
per-connection keys from ``derive_rpc_relay_keys``: someone who relays the handshake
between the two learns neither key, so can read and alter nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Final

from skulk_daemon.node.keys import derive_rpc_relay_keys
from skulk_daemon.runner.rpc_relay import recv_exactly, relay_sealed

log = logging.getLogger("skulk.runner.rpc_gate")

MAGIC: Final = b"SKULK-RPC-GATE/2"
DRIVER_DOMAIN: Final = b"skulk-rpc-gate-v2 driver\x00"
GATE_DOMAIN: Final = b"skulk-rpc-gate-v2 gate\x00"
NONCE_BYTES: Final = 32
PROOF_BYTES: Final = 32
HANDSHAKE_TIMEOUT_SECONDS: Final = 5.0
TARGET_POLL_SECONDS: Final = 0.1

Dial = Callable[[], socket.socket]
"""Opens a connected socket to a donor's gate (the driver's namespace cannot)."""


def proof(
    domain: bytes, key: bytes, gate_nonce: bytes, driver_nonce: bytes, instance: str
) -> bytes:
    """One side's answer: ``domain`` is :data:`DRIVER_DOMAIN` or :data:`GATE_DOMAIN`."""
    message = domain + gate_nonce + driver_nonce + instance.encode()
    return hmac.new(key, message, hashlib.sha256).digest()


class GateServer:
    """Admits authenticated peers on ``host:port`` and relays them to a target.

    The listening socket is created here, in the caller's network namespace: a donor
    makes it before it moves into its private one, so the gate stays on the fabric
    while the target (reached from the relay threads, started later) is inside.
    """

    def __init__(
        self, host: str, port: int, *, key: bytes, instance_id: str, target_wait_s: float = 0.0
    ) -> None:
        self._target = ("127.0.0.1", 0)
        self._target_wait_s = target_wait_s
        """How long an admitted peer waits for the target to listen (an MLX ring's
        gate opens before its rank listens); 0: not at all."""
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

    def start(self, target: tuple[str, int]) -> None:
        """Admit peers from now on, relaying them to ``target``."""
        self._target = target
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
        gate_nonce = os.urandom(NONCE_BYTES)
        try:
            peer.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
            peer.sendall(MAGIC + gate_nonce)
            reply = recv_exactly(peer, NONCE_BYTES + PROOF_BYTES)
        except OSError:
            self._refuse(peer, address, "no answer to the gate's challenge")
            return
        driver_nonce, answer = reply[:NONCE_BYTES], reply[NONCE_BYTES:]
        expected = proof(DRIVER_DOMAIN, self._key, gate_nonce, driver_nonce, self._instance_id)
        if not hmac.compare_digest(answer, expected):
            self._refuse(peer, address, "wrong answer: not a member of this cluster's pool")
            return
        try:
            upstream = self._reach_target()
        except OSError as exc:
            log.error("the local RPC server at %s:%d is unreachable: %s", *self._target, exc)
            peer.close()
            return
        try:
            peer.sendall(proof(GATE_DOMAIN, self._key, gate_nonce, driver_nonce, self._instance_id))
        except OSError:
            upstream.close()
            peer.close()
            return
        for sock in (peer, upstream):
            sock.settimeout(None)
        to_donor, to_driver = derive_rpc_relay_keys(
            self._key, self._instance_id, driver_nonce, gate_nonce
        )
        log.info("admitted RPC peer %s:%d", address[0], address[1])

        def ended(first: socket.socket, why: str | None) -> None:
            if why is not None:
                log.warning("closed RPC peer %s:%d: %s", address[0], address[1], why)
            else:
                log.info("RPC peer %s:%d left", address[0], address[1])

        relay_sealed(upstream, peer, send_key=to_driver, receive_key=to_donor, on_end=ended)

    def _reach_target(self) -> socket.socket:
        deadline = time.monotonic() + self._target_wait_s
        while True:
            try:
                return socket.create_connection(self._target, timeout=HANDSHAKE_TIMEOUT_SECONDS)
            except ConnectionRefusedError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(TARGET_POLL_SECONDS)

    def _refuse(self, peer: socket.socket, address: tuple[str, int], why: str) -> None:
        self.refused += 1
        log.warning("refused RPC peer %s:%d: %s", address[0], address[1], why)
        peer.close()


class GateImpostor(ConnectionError):
    """What answered on a donor's address could not prove it holds the pool's key."""


def _dial_direct(remote: tuple[str, int]) -> Dial:
    return lambda: socket.create_connection(remote, timeout=HANDSHAKE_TIMEOUT_SECONDS)


class GateClient:
    """A loopback port that reaches one donor's gate, after both have proved the key.

    The listener is created here, in the caller's network namespace (a driver's
    private one, so no other process can connect to it); connections to the donor
    come from ``dial`` (by default, a plain connect from here).

    ``on_lost`` runs (once) when an admitted connection to the donor ends from the
    donor's side, or the donor cannot be reached or authenticated: the driver cannot
    survive that.
    """

    def __init__(
        self,
        remote: tuple[str, int],
        *,
        key: bytes,
        instance_id: str,
        on_lost: Callable[[str], None],
        dial: Dial | None = None,
    ) -> None:
        self._remote = remote
        self._key = key
        self._instance_id = instance_id
        self._on_lost = on_lost
        self._dial = dial or _dial_direct(remote)
        self._lost = False
        self._losing = threading.Lock()
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

    def _handshake(self, remote: socket.socket) -> tuple[bytes, bytes]:
        """Both sides' proofs; the relay keys ``(to donor, to driver)``."""
        host, port = self._remote
        remote.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
        challenge = recv_exactly(remote, len(MAGIC) + NONCE_BYTES)
        if not challenge.startswith(MAGIC):
            raise GateImpostor(f"{host}:{port} does not speak the Skulk RPC gate")
        gate_nonce = challenge[len(MAGIC) :]
        driver_nonce = os.urandom(NONCE_BYTES)
        remote.sendall(
            driver_nonce
            + proof(DRIVER_DOMAIN, self._key, gate_nonce, driver_nonce, self._instance_id)
        )
        try:
            answer = recv_exactly(remote, PROOF_BYTES)
        except ConnectionError:
            raise ConnectionError("the donor's gate refused this driver") from None
        expected = proof(GATE_DOMAIN, self._key, gate_nonce, driver_nonce, self._instance_id)
        if not hmac.compare_digest(answer, expected):
            raise GateImpostor(
                f"the gate at {host}:{port} did not prove it holds this cluster's key "
                "(an impostor, or another pool's gate); refused"
            )
        remote.settimeout(None)
        return derive_rpc_relay_keys(self._key, self._instance_id, driver_nonce, gate_nonce)

    def _connect(self, local: socket.socket) -> None:
        host, port = self._remote
        remote: socket.socket | None = None
        try:
            remote = self._dial()
            to_donor, to_driver = self._handshake(remote)
        except OSError as exc:
            local.close()
            if remote is not None:
                remote.close()
            if isinstance(exc, GateImpostor):
                self._lose(str(exc))
            else:
                self._lose(f"cannot reach the RPC donor at {host}:{port}: {exc}")
            return
        connected = remote

        def ended(first: socket.socket, why: str | None) -> None:
            # Only the donor's side ending first is a loss: llama.cpp closes
            # its own connections when it no longer needs them.
            if first is connected:
                if why is None:
                    self._lose(f"the RPC donor at {host}:{port} closed the connection")
                else:
                    self._lose(f"closed the relay to the RPC donor at {host}:{port}: {why}")

        relay_sealed(local, remote, send_key=to_donor, receive_key=to_driver, on_end=ended)

    def _lose(self, why: str) -> None:
        # NOTE: under the lock, so another connection's relay ending at the same
        # time waits for the first report (a driver's exits the process) before it
        # shuts the socket llama.cpp reads.
        with self._losing:
            if self._closing or self._lost:
                return
            self._lost = True
            log.error("%s", why)
            self._on_lost(why)
