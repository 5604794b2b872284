"""The RPC gate's relay: llama.cpp's plaintext on one side, AEAD frames on the other.

After the gate's handshake (runner/rpc_gate.py) each side holds two keys, one per
direction. Every frame on the wire is ``length(4, big-endian) || ciphertext``:
ChaCha20-Poly1305 over at most :data:`MAX_FRAME_PLAINTEXT` bytes, the length as
associated data, and a nonce that counts the frames of its direction (never sent,
so a dropped, replayed or reordered frame fails to open). A frame that fails to
open, or whose length is out of bounds, closes the connection on both sides.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

MAX_FRAME_PLAINTEXT: Final = 256 * 1024
"""The most llama.cpp bytes one frame carries (also the relay's read size)."""
TAG_BYTES: Final = 16
MAX_FRAME_BYTES: Final = MAX_FRAME_PLAINTEXT + TAG_BYTES
"""The largest frame (ciphertext and tag) a receiver accepts; a longer one closes."""
_HEADER: Final = struct.Struct(">I")
_NONCE_PREFIX: Final = bytes(4)
_MAX_FRAMES: Final = 2**64 - 1

Ended = Callable[[socket.socket, str | None], None]
"""Told which socket's side ended first and, when the relay closed it, why; called
before the relay shuts either socket, so the other side sees the end only after."""


class RelayTampered(Exception):
    """A frame failed to open or broke the framing: the connection is closed."""


def recv_exactly(sock: socket.socket, count: int) -> bytes:
    """``count`` bytes, or ConnectionError when the peer closes first."""
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the peer closed the connection mid-message")
        data += chunk
    return bytes(data)


def nodelay(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Direction:
    """One direction's key and frame counter."""

    def __init__(self, key: bytes) -> None:
        self._aead = ChaCha20Poly1305(key)
        self._frames = 0

    def _nonce(self) -> bytes:
        if self._frames >= _MAX_FRAMES:
            raise RelayTampered("the connection used up its nonces")
        nonce = _NONCE_PREFIX + self._frames.to_bytes(8, "big")
        self._frames += 1
        return nonce


class Sealer(_Direction):
    def seal(self, plaintext: bytes | memoryview) -> bytes:
        if not 0 < len(plaintext) <= MAX_FRAME_PLAINTEXT:
            raise ValueError(f"a frame carries 1 to {MAX_FRAME_PLAINTEXT} bytes")
        header = _HEADER.pack(len(plaintext) + TAG_BYTES)
        return header + self._aead.encrypt(self._nonce(), plaintext, header)


class Opener(_Direction):
    def read(self, sock: socket.socket) -> bytes | None:
        """The next frame's plaintext from ``sock``; None when it ends between frames."""
        first = sock.recv(_HEADER.size)
        if not first:
            return None
        header = first + recv_exactly(sock, _HEADER.size - len(first))
        (length,) = _HEADER.unpack(header)
        if not TAG_BYTES < length <= MAX_FRAME_BYTES:
            raise RelayTampered(f"a frame of {length} bytes is out of bounds")
        body = recv_exactly(sock, length)
        try:
            return self._aead.decrypt(self._nonce(), body, header)
        except InvalidTag:
            raise RelayTampered("a frame failed authentication (altered in transit?)") from None


class _SinkEnded(Exception):
    """Writing to the far socket failed: its side ended, not the one read from."""


def _send(sink: socket.socket, data: bytes) -> None:
    try:
        sink.sendall(data)
    except OSError as exc:
        raise _SinkEnded from exc


def _seal(source: socket.socket, sink: socket.socket, sealer: Sealer) -> None:
    buffer = bytearray(MAX_FRAME_PLAINTEXT)
    view = memoryview(buffer)
    while count := source.recv_into(buffer):
        _send(sink, sealer.seal(view[:count]))


def _open(source: socket.socket, sink: socket.socket, opener: Opener) -> None:
    while (plaintext := opener.read(source)) is not None:
        _send(sink, plaintext)


def relay_sealed(
    plain: socket.socket,
    sealed: socket.socket,
    *,
    send_key: bytes,
    receive_key: bytes,
    on_end: Ended,
) -> None:
    """Relay ``plain`` ⇄ ``sealed`` on two threads, sealing what goes out on
    ``sealed`` with ``send_key`` and opening what comes in with ``receive_key``.

    ``on_end`` is called once, with the socket whose side ended first (and why, if
    the relay ended it), before either socket is shut down: a driver that cannot
    survive its donor's end reports it before llama.cpp sees its own socket close
    (and aborts). When both directions have stopped, both sockets are closed.
    """
    reported = False
    finished: list[bool] = []
    lock = threading.Lock()

    def run(source: socket.socket, sink: socket.socket, pump: Callable[[], None]) -> None:
        nonlocal reported
        ended, why = source, None
        try:
            pump()
        except RelayTampered as exc:
            why = str(exc)
        except _SinkEnded:
            ended = sink  # a write to the other side failed: that side ended
        except OSError:
            pass  # a reset, or a peer that closed mid-frame: that side ended
        # NOTE: which side stopped is settled before either socket is shut down,
        # so the other direction (which then stops too) cannot claim it.
        with lock:
            is_first, reported = not reported, True
        if is_first:
            on_end(ended, why)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with lock:
            finished.append(True)
            last = len(finished) == 2
        if last:
            plain.close()
            sealed.close()

    sealer, opener = Sealer(send_key), Opener(receive_key)
    for sock in (plain, sealed):
        nodelay(sock)
    directions = (
        (plain, sealed, lambda: _seal(plain, sealed, sealer)),
        (sealed, plain, lambda: _open(sealed, plain, opener)),
    )
    for source, sink, pump in directions:
        threading.Thread(target=run, args=(source, sink, pump), daemon=True).start()
