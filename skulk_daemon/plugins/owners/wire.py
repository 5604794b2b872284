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
``setup-start`` / ``setup-operation`` / ``setup-resume`` and ``call`` (one unary
invocation). A response is ``{"ok": true, "result": ...}`` or ``{"ok": false,
"error": {"code": ..., "message": ...}}`` where ``code`` is one of :data:`ERROR_CODES`.
A lost response is never replayed by the client.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
from pathlib import Path
from typing import Any, Final, Literal

OWNER_PROTOCOL: Final = 3
"""The unary owner protocol this host speaks (streaming claims need protocol 4)."""
OWNER_DIR: Final = "owner"
SOCKET_NAME: Final = "control.sock"
MAX_REQUEST_BYTES: Final = 16 * 1024
MAX_INVOCATION_BYTES: Final = 64 * 1024
MAX_RESPONSE_BYTES: Final = 128 * 1024
HEALTH_TIMEOUT_SECONDS: Final = 1.0
MANAGEMENT_TIMEOUT_SECONDS: Final = 30.0

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
ERROR_CODES: Final = frozenset(
    {
        "unknown_node",
        "unsupported",
        "refused",
        "malformed",
        "too_large",
        "provider_error",
        "timeout",
        "busy",
    }
)


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
    return MAX_INVOCATION_BYTES if op == "call" else MAX_REQUEST_BYTES


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def ok(result: object) -> bytes:
    return encode({"ok": True, "result": result})


def error(code: ErrorCode, message: str) -> bytes:
    return encode({"ok": False, "error": {"code": code, "message": message[:500]}})


def _check_protected(path: Path) -> None:
    directory = path.parent
    try:
        dir_info = directory.lstat()
        info = path.lstat()
    except FileNotFoundError:
        raise OwnerUnavailable("the owner is not running (no control socket)") from None
    uid = os.getuid()
    if stat.S_ISLNK(dir_info.st_mode) or dir_info.st_uid != uid or dir_info.st_mode & 0o077:
        raise OwnerUnavailable("the owner's socket directory is not owner-only")
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
        raise OwnerUnavailable("the owner's control socket is not an owner-only socket")


def request(path: Path, message: dict[str, Any], timeout: float) -> Any:
    """Send one request to the owner at ``path``; its ``result``. Blocking (run it in a
    thread). Raises :class:`OwnerUnavailable` (not reached, timed out, lost or oversized
    answer: never resent) or :class:`OwnerError` (the owner refused)."""
    payload = encode(message)
    if len(payload) > request_limit(str(message.get("op"))):
        raise OwnerError("too_large", "the request is over the owner protocol's bound")
    _check_protected(path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
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
    _check_protected(path)
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_unix_connection(str(path))
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
