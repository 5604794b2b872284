"""The owner-only Unix-socket protocol between Skulk and a managed plugin owner.

One JSON request per connection, ended by a newline (or the client's half-close); one
JSON response, newline-terminated; then the connection closes. Requests are at most
16 KiB, except ``call`` (an invocation) at most 64 KiB; responses at most 128 KiB.
The socket is ``<installation>/owner/control.sock`` under the manager root: its
directory is owner-only (0700), the socket 0600, and a client checks both (and that
neither is a symbolic link) before it connects.

Requests (``op``): ``describe`` (protocol, nodes, cached descriptors, which of them
are ready), ``health``, ``configuration`` / ``configure`` and ``credentials`` /
``configure_credential`` (one node, fenced mutations), ``preflight``, ``setup``,
``proposal-list`` and ``proposal-review`` (the read-only facets), ``proposal-approve``
/ ``proposal-operation`` / ``proposal-resume`` (the distinct owner actions: the approval
and the authenticated operator id, an exact operation id), ``setup-actions`` /
``setup-start`` / ``setup-operation`` / ``setup-resume``, ``call`` (one unary
invocation), ``bind`` (Skulk binds its transport node id; see below) and ``stream``
(protocol 4: one streaming invocation, see below). A response is ``{"ok": true,
"result": ...}`` or ``{"ok": false, "error": {"code": ..., "message": ...}}`` where
``code`` is one of :data:`ERROR_CODES`.
A lost response is never replayed by the client.

Transport identity: on attaching, the host sends ``{"op": "bind", "transport_node_id":
...}`` with its Skulk transport node id. The first binding holds for the owner's
lifetime (a different one is ``refused``); ``health`` and ``describe`` report the
identity the owner is bound to, and the host refuses an owner bound to another.

Streaming (protocol 4). ``stream`` is an admission request (at most 64 KiB, a pinned
call envelope); the owner answers one ordinary response line (``{"admitted": true}``,
or a refusal whose ``capability_error`` may carry the typed fabric code). The same
connection then carries *packets* in both directions as the mode allows: an 8-byte
prefix (header length, media length; big-endian ``uint32`` each), a finite JSON header
of at most 64 KiB, then the raw inline media (at most 1 MiB, never base64). A header
is one frame (``kind``, ``sequence``, optional ``payload``, ``error`` and ``media``
description). Caller input is ``chunk`` packets; ``completed`` (no payload or media)
half-closes input while output continues. The owner sends its frames, exactly one
terminal once the handler's iterator is exhausted, then a private ``{"kind":
"cleanup"}`` acknowledgment, and closes. Either side closing early cancels the call;
the owner also enforces the call's own deadline. Nothing is ever replayed.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import struct
from pathlib import Path
from typing import Any, Final, Literal, get_args

import msgspec

from skulk_core.extensions.capabilities import (
    MAX_MEDIA_BYTES,
    BlobMediaAttachment,
    CapabilityError,
    CapabilityStreamFrame,
    Direction,
    InlineMediaAttachment,
)
from skulk_host.unix_address import addressable

OWNER_PROTOCOL: Final = 4
"""The owner protocol this runtime speaks: 3 is unary only, 4 adds streaming."""
UNARY_PROTOCOL: Final = 3
STREAMING_PROTOCOL: Final = 4
SUPPORTED_PROTOCOLS: Final = frozenset({UNARY_PROTOCOL, STREAMING_PROTOCOL})
"""The window Skulk reads; streaming descriptors are accepted only from protocol 4."""
OWNER_DIR: Final = "owner"
SOCKET_NAME: Final = "control.sock"
MAX_REQUEST_BYTES: Final = 16 * 1024
MAX_INVOCATION_BYTES: Final = 64 * 1024
MAX_RESPONSE_BYTES: Final = 128 * 1024
HEALTH_TIMEOUT_SECONDS: Final = 1.0
MANAGEMENT_TIMEOUT_SECONDS: Final = 30.0
MAX_STREAM_HEADER_BYTES: Final = 64 * 1024
MAX_STREAM_MEDIA_BYTES: Final = MAX_MEDIA_BYTES
_PREFIX: Final = struct.Struct(">II")

Op = Literal[
    "describe",
    "health",
    "configuration",
    "configure",
    "credentials",
    "configure_credential",
    "preflight",
    "setup",
    "proposal-list",
    "proposal-review",
    "proposal-approve",
    "proposal-operation",
    "proposal-resume",
    "setup-actions",
    "setup-start",
    "setup-operation",
    "setup-resume",
    "call",
    "bind",
    "stream",
]
ErrorCode = Literal[
    "unknown_node",
    "unsupported",
    "refused",
    "malformed",
    "too_large",
    "provider_error",
    "timeout",
    "busy",
]
ERROR_CODES: Final[frozenset[str]] = frozenset(get_args(ErrorCode))


class OwnerUnavailable(Exception):
    """The owner could not be reached, or its answer was lost or unreadable."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.timed_out = timed_out


class OwnerError(Exception):
    """The owner answered with a refusal (``code`` from :data:`ERROR_CODES`)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code if code in ERROR_CODES else "provider_error"
        self.message = message


def owner_dir(installation: Path) -> Path:
    return installation / OWNER_DIR


def socket_path(installation: Path) -> Path:
    return owner_dir(installation) / SOCKET_NAME


def request_limit(op: str) -> int:
    return MAX_INVOCATION_BYTES if op in ("call", "stream") else MAX_REQUEST_BYTES


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def ok(result: object) -> bytes:
    return encode({"ok": True, "result": result})


def error(code: ErrorCode, message: str) -> bytes:
    return encode({"ok": False, "error": {"code": code, "message": message[:500]}})


def check_protected(path: Path, name: str = "control socket") -> None:
    """Refuse ``path`` unless it is an owner-only socket (0600, this uid, no symbolic
    link) in an owner-only directory (0700); ``name`` names it in the refusal."""
    directory = path.parent
    try:
        dir_info = directory.lstat()
        info = path.lstat()
    except FileNotFoundError:
        raise OwnerUnavailable(f"the owner is not running (no {name})") from None
    uid = os.getuid()
    if stat.S_ISLNK(dir_info.st_mode) or dir_info.st_uid != uid or dir_info.st_mode & 0o077:
        raise OwnerUnavailable("the owner's socket directory is not owner-only")
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
        raise OwnerUnavailable(f"the owner's {name} is not an owner-only socket")


def request(path: Path, message: dict[str, Any], timeout: float) -> Any:
    """Send one request to the owner at ``path``; its ``result``. Blocking (run it in a
    thread). Raises :class:`OwnerUnavailable` (not reached, timed out, lost or oversized
    answer: never resent) or :class:`OwnerError` (the owner refused)."""
    payload = encode(message)
    if len(payload) > request_limit(str(message.get("op"))):
        raise OwnerError("too_large", "the request is over the owner protocol's bound")
    check_protected(path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            with addressable(path) as address:
                sock.connect(address)
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            body = bytearray()
            while chunk := sock.recv(65536):
                body += chunk
                if len(body) > MAX_RESPONSE_BYTES + 1:
                    raise OwnerUnavailable("the owner's answer is over its 128 KiB bound")
        except TimeoutError:
            raise OwnerUnavailable("the owner did not answer in time", timed_out=True) from None
        except OSError:
            raise OwnerUnavailable("the owner did not answer") from None
    return _decode(bytes(body))


async def arequest(path: Path, message: dict[str, Any], timeout: float) -> Any:  # noqa: ASYNC109
    """:func:`request` on the event loop (no thread is held while an owner works): the
    API process's calls, health polls and management requests all use this."""
    payload = encode(message)
    if len(payload) > request_limit(str(message.get("op"))):
        raise OwnerError("too_large", "the request is over the owner protocol's bound")
    check_protected(path)
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            with addressable(path) as address:
                reader, writer = await asyncio.open_unix_connection(address)
            writer.write(payload)
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
            body = bytearray()
            while chunk := await reader.read(65536):
                body += chunk
                if len(body) > MAX_RESPONSE_BYTES + 1:
                    raise OwnerUnavailable("the owner's answer is over its 128 KiB bound")
    except TimeoutError:
        raise OwnerUnavailable("the owner did not answer in time", timed_out=True) from None
    except OSError:
        raise OwnerUnavailable("the owner did not answer") from None
    finally:
        if writer is not None:
            writer.close()
    return _decode(bytes(body))


def _decode(body: bytes) -> Any:
    try:
        answer = json.loads(body)
    except ValueError:
        raise OwnerUnavailable("the owner's answer is not JSON") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
        raise OwnerUnavailable("the owner's answer is not a protocol response")
    if answer["ok"]:
        return answer.get("result")
    failure = answer.get("error")
    if not isinstance(failure, dict):
        failure = {}
    raise OwnerError(str(failure.get("code")), str(failure.get("message") or "refused"))


# -- streaming (protocol 4) ---------------------------------------------------------------


class StreamBroken(Exception):
    """A stream connection ended or carried something outside the protocol."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StreamRefused(Exception):
    """The owner refused a stream's admission; ``capability_error`` when it gave the
    typed fabric reason."""

    def __init__(self, code: str, message: str, capability_error: object = None) -> None:
        super().__init__(message)
        self.code = code if code in ERROR_CODES else "provider_error"
        self.message = message
        self.capability_error = capability_error


Packet = tuple[dict[str, Any], bytes | None]


async def write_packet(
    writer: asyncio.StreamWriter, header: dict[str, Any], media: bytes | None = None
) -> None:
    body = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    data = media or b""
    if len(body) > MAX_STREAM_HEADER_BYTES:
        raise StreamBroken("a stream frame's header is over its 64 KiB bound")
    if len(data) > MAX_STREAM_MEDIA_BYTES:
        raise StreamBroken("a stream frame's media is over its 1 MiB bound")
    writer.write(_PREFIX.pack(len(body), len(data)) + body + data)
    await writer.drain()


async def read_packet(reader: asyncio.StreamReader) -> Packet | None:
    """The next packet; ``None`` when the peer closed cleanly between packets."""
    try:
        prefix = await reader.readexactly(_PREFIX.size)
    except asyncio.IncompleteReadError as short:
        if not short.partial:
            return None
        raise StreamBroken("the stream ended inside a frame") from None
    header_size, media_size = _PREFIX.unpack(prefix)
    if header_size > MAX_STREAM_HEADER_BYTES or media_size > MAX_STREAM_MEDIA_BYTES:
        raise StreamBroken("a stream frame is over the owner protocol's bounds")
    try:
        raw = await reader.readexactly(header_size)
        media = await reader.readexactly(media_size) if media_size else None
    except asyncio.IncompleteReadError:
        raise StreamBroken("the stream ended inside a frame") from None
    try:
        header = json.loads(raw)
    except ValueError:
        raise StreamBroken("a stream frame's header is not JSON") from None
    if not isinstance(header, dict):
        raise StreamBroken("a stream frame's header is not a JSON object")
    return header, media


def frame_packet(item: CapabilityStreamFrame) -> Packet:
    """One frame as a packet: its header, and its inline media bytes apart."""
    header: dict[str, Any] = {"kind": item.kind, "sequence": item.sequence}
    if item.payload is not None:
        header["payload"] = item.payload
    if item.error is not None:
        header["error"] = {"code": item.error.code, "message": item.error.message}
    media = item.media
    if isinstance(media, InlineMediaAttachment):
        header["media"] = {
            "type": "inline",
            "media_type": media.media_type,
            "codec": media.codec,
            "sample_rate": media.sample_rate,
            "channels": media.channels,
        }
        return header, media.data
    if isinstance(media, BlobMediaAttachment):
        header["media"] = msgspec.to_builtins(media)  # an opaque reference
    return header, None


def packet_frame(call_id: str, direction: Direction, packet: Packet) -> CapabilityStreamFrame:
    """A packet as a frame of ``call_id`` going ``direction``; raises
    :class:`StreamBroken` when it is not one."""
    header, data = packet
    description = header.get("media")
    media: InlineMediaAttachment | BlobMediaAttachment | None = None
    try:
        if isinstance(description, dict) and description.get("type") == "inline":
            inline = {k: v for k, v in description.items() if k != "type"}
            media = msgspec.convert({**inline, "data": data or b""}, InlineMediaAttachment)
        elif isinstance(description, dict) and description.get("type") == "blob":
            media = msgspec.convert(description, BlobMediaAttachment)
        elif description is not None or data is not None:
            raise StreamBroken("a stream frame's media has no valid description")
        error = header.get("error")
        return CapabilityStreamFrame(
            call_id=call_id,
            direction=direction,
            sequence=msgspec.convert(header.get("sequence"), int),
            kind=msgspec.convert(
                header.get("kind"), Literal["started", "chunk", "completed", "failed", "cancelled"]
            ),
            payload=msgspec.convert(header.get("payload"), dict[str, object] | None),
            media=media,
            error=None if error is None else msgspec.convert(error, CapabilityError),
        )
    except msgspec.ValidationError as exc:
        raise StreamBroken(f"a stream frame does not match the owner protocol: {exc}") from None


class StreamConnection:
    """The caller's end of one admitted owner stream."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def receive(self) -> Packet | None:
        try:
            return await read_packet(self.reader)
        except (ConnectionError, OSError):
            raise StreamBroken("the owner's stream connection broke") from None

    def close(self) -> None:
        """Close the connection (before the terminal: the owner cancels the call)."""
        self.writer.close()


async def open_stream(path: Path, message: dict[str, Any], timeout: float) -> StreamConnection:  # noqa: ASYNC109
    """Send a ``stream`` admission request; the admitted connection. Raises
    :class:`OwnerUnavailable` (not reached, no answer in ``timeout``: never resent),
    :class:`OwnerError` (too large) or :class:`StreamRefused` (the owner refused)."""
    payload = encode(message)
    if len(payload) > MAX_INVOCATION_BYTES:
        raise OwnerError("too_large", "the request is over the owner protocol's bound")
    check_protected(path)
    writer: asyncio.StreamWriter | None = None
    admitted = False
    try:
        async with asyncio.timeout(timeout):
            with addressable(path) as address:
                reader, writer = await asyncio.open_unix_connection(
                    address, limit=MAX_RESPONSE_BYTES + 1
                )
            writer.write(payload)
            await writer.drain()
            line = await reader.readline()
        try:
            answer = _decode(line)
        except OwnerError as refused:
            detail = json.loads(line).get("error", {})
            raise StreamRefused(
                refused.code, refused.message, detail.get("capability_error")
            ) from None
        if not isinstance(answer, dict) or answer.get("admitted") is not True:
            raise OwnerUnavailable("the owner's admission answer is not a protocol response")
        admitted = True
        return StreamConnection(reader, writer)
    except TimeoutError:
        raise OwnerUnavailable("the owner did not answer in time", timed_out=True) from None
    except (OSError, ValueError):
        raise OwnerUnavailable("the owner did not answer") from None
    finally:
        if writer is not None and not admitted:
            writer.close()
