"""The fabric's byte-level transport: CURVE-encrypted ZeroMQ sockets between nodes.

Each node binds one ROUTER, the CURVE server every peer connects to, and opens one
DEALER, a CURVE client, per peer it sends to. A message is an opaque list of
frames; what the frames mean belongs to the protocol layer above.

Two locks keep an outsider out. A peer that does not hold the cluster key cannot
encrypt a HELLO the ROUTER can open (the socket monitor sees that), and a peer that
somehow learned the server's public key still needs the derived *client* key pair,
which the ZAP handler is the only one to admit. Every refusal becomes a
`RefusedPeer` in `stats()` and one WARNING line, never with key material in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Final

import zmq
import zmq.asyncio
from zmq.utils import z85
from zmq.utils.monitor import recv_monitor_message

from skulk_daemon.node.keys import CurveKeys

log = logging.getLogger(__name__)

MAX_FRAME_BYTES: Final = 64 * 1024 * 1024
"""ZMQ_MAXMSGSIZE: libzmq drops a connection announcing a larger frame before
allocating for it."""
REFUSED_KEPT: Final = 32
"""Distinct refusals kept in `stats()`; a repeat refreshes its entry instead."""
REFUSAL_LOG_EVERY: Final = timedelta(seconds=60)
"""A peer that keeps retrying is logged again only after this long."""
RECONNECT_IVL_MS: Final = 100
RECONNECT_IVL_MAX_MS: Final = 2_000
HEARTBEAT_IVL_MS: Final = 2_000
HEARTBEAT_TIMEOUT_MS: Final = 20_000
"""ZMTP heartbeats drop a connection to a peer that vanished without closing
(power loss, cable): with IMMEDIATE set, sends to it are then refused instead of
queued. The timeout is generous because a pong can wait behind a large frame."""
DEALER_RCVHWM: Final = 16
"""Peers never answer on our DEALERs; keep what a misbehaving one sends small."""
ZAP_ENDPOINT: Final = "inproc://zeromq.zap.01"
ZAP_DOMAIN: Final = b"skulk"
_ZAP_VERSION: Final = b"1.0"

_HANDSHAKE_FAILURES: Final = (
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)
_NO_CLUSTER_KEY: Final = "CURVE handshake failed: the peer does not hold the cluster key"
_HUNG_UP: Final = (
    "handshake failed: the peer hung up or timed out mid-handshake"
    " (no CURVE, a different cluster key, or not a Skulk node)"
)
_PROTOCOL_REASONS: Final[dict[int, str]] = {
    zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC: _NO_CLUSTER_KEY,
    zmq.PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE: _NO_CLUSTER_KEY,
    zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH: (
        "handshake failed: the peer does not use CURVE encryption"
    ),
}


class FabricBindError(OSError):
    """The fabric port cannot be bound; the message names host:port."""


@dataclass(frozen=True, slots=True)
class RefusedPeer:
    """A connection the fabric turned away."""

    address: str
    """The remote end as ZeroMQ reports it: the peer's IP for a ZAP refusal; for a
    handshake that failed before ZAP, only the local endpoint it reached."""
    reason: str
    at: datetime
    attempts: int = 1
    """How many times this (address, reason) was refused; `at` is the latest."""


@dataclass(frozen=True, slots=True)
class TransportStats:
    frames_in: int
    """Messages (one `on_frames` call each) received."""
    frames_out: int
    """Messages accepted by `send`."""
    dropped_out: int
    """Sends refused: the peer's queue was full, it never connected, or the address
    was never `connect`ed."""
    refused: tuple[RefusedPeer, ...]
    """Most recent first, at most `REFUSED_KEPT`."""
    connected: tuple[str, ...]
    """Addresses `connect` was called for (and not `disconnect`), sorted."""
    handler_errors: int = 0
    """Messages whose `on_frames` call raised."""


FrameHandler = Callable[[str, list[bytes]], None]
"""(peer_ip, frames), called on the event loop."""


def _now() -> datetime:
    return datetime.now(UTC)


def _split_address(address: str) -> tuple[str, int]:
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"not a host:port fabric address: {address!r}")
    return host, int(port_text)


def _is_ipv6(host: str) -> bool:
    return ":" in host


def _bracketed(host: str) -> str:
    return f"[{host}]" if _is_ipv6(host) and not host.startswith("[") else host


def _set_heartbeats(socket: zmq.Socket[bytes] | zmq.asyncio.Socket) -> None:
    socket.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
    socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)


class FabricTransport:
    """One node's end of the fabric: a bound ROUTER plus a DEALER per peer.

    Not thread-safe: every method is called from the event loop `start` ran on.
    """

    def __init__(
        self,
        *,
        bind_host: str,
        port: int,
        keys: CurveKeys,
        on_frames: FrameHandler,
        send_hwm: int = 10_000,
    ) -> None:
        self._bind_host = bind_host
        self._requested_port = port
        self._keys = keys
        self._admitted_client = z85.decode(keys.client_public)
        self._on_frames = on_frames
        self._send_hwm = send_hwm
        self._bound_port: int | None = None
        self._ctx: zmq.asyncio.Context | None = None
        self._router: zmq.asyncio.Socket | None = None
        self._zap: zmq.asyncio.Socket | None = None
        self._monitor: zmq.asyncio.Socket | None = None
        self._dealers: dict[str, zmq.Socket[bytes]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._frames_in = 0
        self._frames_out = 0
        self._dropped_out = 0
        self._handler_errors = 0
        self._refused: deque[RefusedPeer] = deque(maxlen=REFUSED_KEPT)
        self._last_logged: dict[tuple[str, str], datetime] = {}

    def __repr__(self) -> str:
        port = self._bound_port if self._bound_port is not None else self._requested_port
        return f"<FabricTransport {_bracketed(self._bind_host)}:{port}>"

    async def start(self) -> None:
        """Bind the ROUTER and start the ZAP handler, the monitor and the receive loop.

        Raises `FabricBindError` when the port cannot be bound (in use, or a host
        this machine does not have).
        """
        if self._ctx is not None or self._closed:
            raise RuntimeError("a FabricTransport starts once")
        # NOTE: one context per transport: the ZAP endpoint is per context, and
        # several transports share a process in tests.
        ctx = zmq.asyncio.Context()
        self._ctx = ctx
        try:
            self._bind(ctx)
        except BaseException:
            self._close_sockets()
            raise
        assert self._router is not None and self._zap is not None and self._monitor is not None
        self._tasks = [
            self._spawn(self._serve_zap(self._zap), "zap"),
            self._spawn(self._watch_handshakes(self._monitor), "monitor"),
            self._spawn(self._receive(self._router), "receive"),
        ]

    def _bind(self, ctx: zmq.asyncio.Context) -> None:
        # NOTE: the ZAP handler is bound before the ROUTER: libzmq lets every CURVE
        # client in when no handler is listening at the moment it handshakes.
        zap = ctx.socket(zmq.REP)
        self._zap = zap
        zap.setsockopt(zmq.LINGER, 0)
        zap.bind(ZAP_ENDPOINT)

        router = ctx.socket(zmq.ROUTER)
        self._router = router
        router.setsockopt(zmq.LINGER, 0)
        router.setsockopt(zmq.CURVE_SERVER, 1)
        router.setsockopt(zmq.CURVE_PUBLICKEY, self._keys.server_public)
        router.setsockopt(zmq.CURVE_SECRETKEY, self._keys.server_secret)
        router.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
        router.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
        _set_heartbeats(router)
        if _is_ipv6(self._bind_host):
            router.setsockopt(zmq.IPV6, 1)
        # Monitor before binding, so no early handshake failure goes unseen.
        self._monitor = router.get_monitor_socket(events=_HANDSHAKE_FAILURES)

        port = "*" if self._requested_port == 0 else str(self._requested_port)
        where = f"{_bracketed(self._bind_host)}:{self._requested_port}"
        try:
            router.bind(f"tcp://{_bracketed(self._bind_host)}:{port}")
        except zmq.ZMQError as error:
            raise FabricBindError(
                error.errno, f"cannot bind the fabric port {where}: {error.strerror}"
            ) from None
        endpoint = router.getsockopt_string(zmq.LAST_ENDPOINT)
        self._bound_port = int(endpoint.rpartition(":")[2])

    @property
    def port(self) -> int:
        """The bound port (the ephemeral one chosen when constructed with port=0)."""
        if self._bound_port is None:
            raise RuntimeError("the transport is not started")
        return self._bound_port

    @property
    def namespace(self) -> str:
        """This cluster's routing namespace: the ZAP domain and the CURVE server public
        key every node of the cluster derives from its key (public, but different for
        every cluster key). Only digests of it leave the node."""
        return f"{ZAP_DOMAIN.decode('ascii')}:{self._keys.server_public.decode('ascii')}"

    def connect(self, address: str) -> None:
        """Open a DEALER to `address` ("host:port"); a no-op when already open.

        ZeroMQ connects in the background and reconnects on its own; until the
        CURVE handshake completes, `send` to it returns False.
        """
        if address in self._dealers:
            return
        host, _ = _split_address(address)
        ctx = self._require_context()
        # NOTE: a plain (blocking-API) socket on the same context: DEALERs only
        # send, always with NOBLOCK, and an asyncio socket would turn a full queue
        # into a Future holding an exception nobody retrieves.
        dealer: zmq.Socket[bytes] = zmq.Socket(ctx, zmq.DEALER)
        try:
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.setsockopt(zmq.IMMEDIATE, 1)
            dealer.setsockopt(zmq.SNDHWM, self._send_hwm)
            dealer.setsockopt(zmq.RCVHWM, DEALER_RCVHWM)
            dealer.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
            dealer.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
            dealer.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
            _set_heartbeats(dealer)
            dealer.setsockopt(zmq.CURVE_SERVERKEY, self._keys.server_public)
            dealer.setsockopt(zmq.CURVE_PUBLICKEY, self._keys.client_public)
            dealer.setsockopt(zmq.CURVE_SECRETKEY, self._keys.client_secret)
            if _is_ipv6(host):
                dealer.setsockopt(zmq.IPV6, 1)
            dealer.connect(f"tcp://{address}")
        except zmq.ZMQError as error:
            dealer.close(linger=0)
            raise ValueError(f"cannot connect to {address!r}: {error.strerror}") from None
        except BaseException:
            dealer.close(linger=0)
            raise
        self._dealers[address] = dealer

    def disconnect(self, address: str) -> None:
        """Close the DEALER to `address`, dropping what is still queued for it."""
        dealer = self._dealers.pop(address, None)
        if dealer is not None:
            dealer.close(linger=0)

    def send(self, address: str, frames: list[bytes]) -> bool:
        """Queue one message for `address` without blocking; False when it cannot be."""
        if not frames:
            raise ValueError("a fabric message has at least one frame")
        dealer = self._dealers.get(address)
        if dealer is None:
            self._dropped_out += 1
            return False
        try:
            dealer.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self._dropped_out += 1
            return False
        except zmq.ZMQError as error:
            log.warning("fabric: send to %s failed: %s", address, error.strerror)
            self._dropped_out += 1
            return False
        self._frames_out += 1
        return True

    def broadcast(self, frames: list[bytes]) -> int:
        """`send` to every connected address; how many accepted the message."""
        return sum(self.send(address, frames) for address in list(self._dealers))

    def stats(self) -> TransportStats:
        return TransportStats(
            frames_in=self._frames_in,
            frames_out=self._frames_out,
            dropped_out=self._dropped_out,
            refused=tuple(self._refused),
            connected=tuple(sorted(self._dealers)),
            handler_errors=self._handler_errors,
        )

    async def close(self) -> None:
        """Stop the loops, close every socket with linger 0, terminate the context."""
        if self._closed:
            return
        self._closed = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        # NOTE: gather(return_exceptions=True) absorbs the tasks' own cancellation
        # but still raises if close() itself is cancelled.
        await asyncio.gather(*tasks, return_exceptions=True)
        self._close_sockets()

    def _close_sockets(self) -> None:
        for address in list(self._dealers):
            self.disconnect(address)
        if self._router is not None and self._monitor is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._router.disable_monitor()
        for socket in (self._monitor, self._router, self._zap):
            if socket is not None:
                socket.close(linger=0)
        self._monitor = self._router = self._zap = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None
        self._closed = True

    def _require_context(self) -> zmq.asyncio.Context:
        if self._ctx is None or self._closed:
            raise RuntimeError("the transport is not started, or already closed")
        return self._ctx

    def _spawn(self, loop: Coroutine[object, object, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(loop, name=f"fabric-{name}")
        task.add_done_callback(self._report_death)
        return task

    @staticmethod
    def _report_death(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("fabric: %s stopped", task.get_name(), exc_info=error)

    async def _receive(self, router: zmq.asyncio.Socket) -> None:
        while True:
            message = await router.recv_multipart(copy=False)
            peer_ip = _peer_address(message)
            frames = [frame.bytes for frame in message[1:]]
            self._frames_in += 1
            try:
                self._on_frames(peer_ip, frames)
            except Exception:
                self._handler_errors += 1
                log.exception("fabric: the frame handler raised on a message from %s", peer_ip)

    async def _serve_zap(self, zap: zmq.asyncio.Socket) -> None:
        while True:
            request = await zap.recv_multipart()
            await zap.send_multipart(self._authenticate(request))

    def _authenticate(self, request: list[bytes]) -> list[bytes]:
        """Answer one ZAP request (RFC 27): admit only the cluster's client key."""
        request_id = request[1] if len(request) > 1 else b""

        def reply(status: bytes, text: bytes) -> list[bytes]:
            return [_ZAP_VERSION, request_id, status, text, b"", b""]

        if len(request) < 6 or request[0] != _ZAP_VERSION:
            return reply(b"500", b"malformed ZAP request")
        domain, address, mechanism, credentials = request[2], request[3], request[5], request[6:]
        peer = address.decode("ascii", "replace") or "an unknown address"
        if mechanism != b"CURVE":
            reason = f"ZAP: mechanism {mechanism.decode('ascii', 'replace')!r} not admitted"
        elif domain != ZAP_DOMAIN:
            reason = "ZAP: unknown domain"
        elif len(credentials) == 1 and hmac.compare_digest(credentials[0], self._admitted_client):
            return reply(b"200", b"OK")
        else:
            reason = "ZAP: client key not admitted (the peer knows the server key only)"
        self._record_refusal(peer, reason)
        return reply(b"400", b"not admitted")

    async def _watch_handshakes(self, monitor: zmq.asyncio.Socket) -> None:
        while True:
            event = await recv_monitor_message(monitor)
            endpoint = event["endpoint"].decode("utf-8", "replace")
            peer = f"a peer at {endpoint}"
            match event["event"]:
                case zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
                    code = int(event["value"])
                    reason = _PROTOCOL_REASONS.get(
                        code, f"handshake failed: ZMTP protocol error 0x{code:08x}"
                    )
                    self._record_refusal(peer, reason)
                case zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                    # NOTE: our own ZAP handler gave this answer and already recorded
                    # the refusal, with the peer's IP; recording it twice would
                    # double-count every refused client.
                    log.debug("fabric: ZAP refused a peer at %s", endpoint)
                case zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                    # NOTE: which end notices a mismatch first is a race; the other
                    # end only sees the connection close, so this reason is vaguer.
                    self._record_refusal(peer, _HUNG_UP)
                case _:
                    pass

    def _record_refusal(self, address: str, reason: str) -> None:
        now = _now()
        previous = next(
            (p for p in self._refused if p.address == address and p.reason == reason), None
        )
        if previous is None:
            entry = RefusedPeer(address=address, reason=reason, at=now)
        else:
            self._refused.remove(previous)
            entry = replace(previous, at=now, attempts=previous.attempts + 1)
        self._refused.appendleft(entry)

        key = (address, reason)
        last = self._last_logged.get(key)
        if last is None or now - last >= REFUSAL_LOG_EVERY:
            if len(self._last_logged) >= 4 * REFUSED_KEPT:
                self._last_logged.clear()
            self._last_logged[key] = now
            log.warning("fabric: refused %s: %s", address, reason)


def _peer_address(message: list[zmq.Frame]) -> str:
    # The ROUTER copies the connection's metadata onto the routing-id frame too;
    # the body frame is the fallback.
    for frame in message[:2]:
        try:
            value = frame.get("Peer-Address")
        except zmq.ZMQError:
            continue
        if isinstance(value, str) and value:
            return value
    return "unknown"
