"""The host-callback protocol on ``<installation>/owner/host.sock`` (protocol 1).

The owner listens (the socket 0600 in the same 0700 directory as ``control.sock``);
Skulk connects, checks both protections and sends the bind ``{"op": "bind",
"protocol": 1, "transport_node_id": ...}`` with the identity it bound on the control
socket. The owner answers ``{"ready": true}`` (or ``{"ready": false, "error": ...}``
and closes). The connection then carries the owner's *callbacks*, each one frame
``{"sequence": n, "op": ...}`` with a strictly increasing positive ``sequence``, and
the host's answers ``{"sequence": n, "ok": true, "result": ...}`` or ``{"sequence": n,
"ok": false, "error": {"code": ..., "message": ...}}`` (``sequence`` is ``null`` when
the host could not read the frame's own).

Frames are complete newline-delimited JSON, at most 64 KiB either way; a frame over
that is refused with ``too_large`` and the connection closed (its framing is lost).
The operations are fixed, their fields exact (an unknown op is ``unsupported``, an
extra or missing field ``malformed``), so no callback can carry an executable, an
address or an approval key:

- ``actions``: nothing else; the live global steward policy;
- ``revisions``: nothing else; ``{"revisions": {"id@version": revision}}`` of the
  owner's descriptors the host serves now;
- ``invoke``: ``node_id``, ``capability_id``, ``version``, ``revision``, ``arguments``
  (a JSON object); the fabric's ``CapabilityResult``.

One callback is outstanding at a time: a second before the first is answered is
refused ``busy``. The owner waits three seconds per callback; the host bounds its own
work by the same deadline. Nothing is replayed when a connection returns.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Annotated, Final

import msgspec

from skulk_core.extensions.host_callbacks import (
    CALLBACK_DEADLINE_SECONDS,
    MAX_CALLBACK_FRAME_BYTES,
    HostCallbackErrorCode,
    StewardPolicy,
)

HOST_PROTOCOL: Final = 1
HOST_SOCKET_NAME: Final = "host.sock"
BIND_SECONDS: Final = 3.0
"""How long either side waits for the bind or its acknowledgment."""
DEADLINE_SECONDS: Final = CALLBACK_DEADLINE_SECONDS
MAX_FRAME_BYTES: Final = MAX_CALLBACK_FRAME_BYTES
OPS: Final = frozenset({"actions", "revisions", "invoke"})

NO_STEWARD: Final = StewardPolicy(
    steward_available=False,
    permitted_actions=(),
    reason="this Skulk has no steward (intelligent-fabric mode is not built): "
    "no steward actions are permitted",
)

_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class ActionsCallback(
    msgspec.Struct, tag="actions", tag_field="op", forbid_unknown_fields=True, frozen=True
):
    sequence: int


class RevisionsCallback(
    msgspec.Struct, tag="revisions", tag_field="op", forbid_unknown_fields=True, frozen=True
):
    sequence: int


class InvokeCallback(
    msgspec.Struct, tag="invoke", tag_field="op", forbid_unknown_fields=True, frozen=True
):
    sequence: int
    node_id: _Id
    capability_id: _Id
    version: _Id
    revision: _Id
    arguments: dict[str, object]


Callback = ActionsCallback | RevisionsCallback | InvokeCallback


class Refused(msgspec.Struct, frozen=True):
    """A frame the host answers with a refusal (``sequence`` when it could read one)."""

    sequence: int | None
    code: HostCallbackErrorCode
    message: str


class FrameTooLarge(Exception):
    """A frame ran past 64 KiB without its newline."""


def encode(message: Mapping[str, object]) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def answer(sequence: int, result: object) -> bytes:
    return encode({"sequence": sequence, "ok": True, "result": result})


def refusal(sequence: int | None, code: HostCallbackErrorCode, message: str) -> bytes:
    error = {"code": code, "message": message[:500]}
    return encode({"sequence": sequence, "ok": False, "error": error})


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The next complete frame (without its newline); ``None`` when the peer closed
    between frames. Raises :class:`FrameTooLarge`, or ``ConnectionError`` when the peer
    closed inside a frame. The reader's ``limit`` must be :data:`MAX_FRAME_BYTES`."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise FrameTooLarge from None
    except asyncio.IncompleteReadError as short:
        if not short.partial:
            return None
        raise ConnectionError("the connection ended inside a frame") from None
    if len(line) > MAX_FRAME_BYTES:
        raise FrameTooLarge
    return line[:-1]


def parse_callback(frame: bytes, last_sequence: int) -> Callback | Refused:
    """One owner frame as a callback, or the refusal to answer."""
    try:
        message = json.loads(frame)
    except ValueError:
        return Refused(None, "malformed", "the callback is not JSON")
    if not isinstance(message, dict):
        return Refused(None, "malformed", "the callback is not a JSON object")
    sequence = message.get("sequence")
    if not isinstance(sequence, int) or isinstance(sequence, bool) or sequence <= 0:
        return Refused(None, "malformed", "a callback carries a positive integer sequence")
    if sequence <= last_sequence:
        return Refused(sequence, "malformed", "a callback's sequence must increase")
    if message.get("op") not in OPS:
        return Refused(sequence, "unsupported", "the operations are actions, revisions, invoke")
    try:
        callback: Callback = msgspec.convert(message, Callback)
        return callback
    except msgspec.ValidationError as exc:
        return Refused(sequence, "malformed", f"the callback does not match its operation: {exc}")


def bind_message(transport_node_id: str) -> bytes:
    return encode({"op": "bind", "protocol": HOST_PROTOCOL, "transport_node_id": transport_node_id})


def parse_bind(frame: bytes) -> str | None:
    """The transport node id a well-formed protocol-1 bind names, else ``None``."""
    try:
        message = json.loads(frame)
    except ValueError:
        return None
    if not isinstance(message, dict) or set(message) != {"op", "protocol", "transport_node_id"}:
        return None
    identity = message.get("transport_node_id")
    protocol = message.get("protocol")
    if message.get("op") != "bind" or protocol != HOST_PROTOCOL or isinstance(protocol, bool):
        return None
    if not isinstance(identity, str) or not 0 < len(identity) <= 256:
        return None
    return identity
