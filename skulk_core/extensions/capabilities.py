"""The capability contract: descriptors, calls, results, typed errors and stream frames.

A provider publishes one :class:`CapabilityDescriptor` per capability; a caller pins
``id@version`` plus :func:`descriptor_revision` from discovery and sends a
:class:`CapabilityCall`; every outcome is a :class:`CapabilityResult` whose error, if
any, carries a machine-readable :data:`CapabilityErrorCode`. Streaming capabilities
move :class:`CapabilityStreamFrame`\\ s, each optionally carrying raw media.

These are plain values (msgspec Structs, snake_case on every wire, as the spec names
them); nothing here performs I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Final, Literal, Protocol

import msgspec

MAX_PAYLOAD_BYTES: Final = 1024 * 1024
"""A call's payload, its result, and one frame's structured payload, as JSON."""
MAX_MEDIA_BYTES: Final = 1024 * 1024
"""The raw bytes of one inline media attachment."""
DEFAULT_TIMEOUT_SECONDS: Final = 30.0
MAX_TIMEOUT_SECONDS: Final = 300.0
MAX_ID_LENGTH: Final = 256

IoMode = Literal["unary", "server_streaming", "client_streaming", "bidirectional"]
STREAMING_MODES: Final[frozenset[str]] = frozenset(
    {"server_streaming", "client_streaming", "bidirectional"}
)

CapabilityErrorCode = Literal[
    "not_found",
    "version_mismatch",
    "revision_mismatch",
    "invalid_payload",
    "invalid_result",
    "payload_too_large",
    "overloaded",
    "timeout",
    "provider_error",
    "unreachable",
    "cancelled",
]
"""Every way a call or stream can fail. ``cancelled`` only ever appears on a stream's
``cancelled`` terminal."""

Direction = Literal["provider_to_caller", "caller_to_provider"]
FrameKind = Literal["started", "chunk", "completed", "failed", "cancelled"]
TERMINAL_KINDS: Final[frozenset[str]] = frozenset({"completed", "failed", "cancelled"})

JsonObject = dict[str, object]

_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_LENGTH)]


class CapabilityDescriptor(msgspec.Struct, frozen=True, kw_only=True):
    """How to call one capability: the negotiation key, prose for humans and LLMs,
    JSON Schemas for what goes in and out, and how data moves (``io_mode``).

    Streaming modes describe their frames with ``input_chunk_schema`` (caller chunks,
    client/bidirectional) and ``output_chunk_schema`` (provider chunks).
    """

    id: str
    version: str
    title: str
    description: str
    input_schema: JsonObject
    output_schema: JsonObject
    io_mode: IoMode = "unary"
    input_chunk_schema: JsonObject | None = None
    output_chunk_schema: JsonObject | None = None

    @property
    def qualified_id(self) -> str:
        """``id@version``, the key calls are pinned to."""
        return qualified(self.id, self.version)


def qualified(capability_id: str, version: str) -> str:
    return f"{capability_id}@{version}"


_CONTRACT_FIELDS: Final = (
    "id",
    "version",
    "io_mode",
    "input_schema",
    "output_schema",
    "input_chunk_schema",
    "output_chunk_schema",
)


def descriptor_revision(descriptor: CapabilityDescriptor) -> str:
    """``sha256:<hex>`` over the canonical JSON of the descriptor's contract fields.

    The contract is what a caller depends on: the id, version, I/O mode and the four
    schemas. Title and description are prose and may be reworded without breaking a
    pinned caller. Canonical JSON sorts keys and drops insignificant whitespace, so
    two descriptors with the same contract have the same revision however their
    schema dicts were built.
    """
    contract = {name: getattr(descriptor, name) for name in _CONTRACT_FIELDS}
    canonical = json.dumps(
        contract, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


class CapabilityCall(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The pinned call envelope, for unary calls and stream openings alike."""

    call_id: _Id
    capability_id: _Id
    version: _Id
    descriptor_revision: _Id
    caller_node: _Id
    target_node: _Id
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=MAX_TIMEOUT_SECONDS)] = (
        DEFAULT_TIMEOUT_SECONDS
    )
    payload: JsonObject = msgspec.field(default_factory=dict)

    @property
    def qualified_id(self) -> str:
        return qualified(self.capability_id, self.version)


class CapabilityError(msgspec.Struct, frozen=True, kw_only=True):
    code: CapabilityErrorCode
    message: str


class CapabilityResult(msgspec.Struct, frozen=True, kw_only=True):
    """A call's outcome: ``ok`` with ``result``, or not ``ok`` with a typed ``error``."""

    call_id: str
    ok: bool
    result: JsonObject | None = None
    error: CapabilityError | None = None

    @classmethod
    def success(cls, call_id: str, result: JsonObject) -> CapabilityResult:
        return cls(call_id=call_id, ok=True, result=result)

    @classmethod
    def failure(cls, call_id: str, code: CapabilityErrorCode, message: str) -> CapabilityResult:
        return cls(call_id=call_id, ok=False, error=CapabilityError(code=code, message=message))


class InlineMediaAttachment(msgspec.Struct, frozen=True, kw_only=True, tag="inline"):
    """Raw media bytes carried beside a frame's JSON (never base64 inside it)."""

    data: bytes
    media_type: str
    codec: str | None = None
    sample_rate: int | None = None
    channels: int | None = None


class BlobMediaAttachment(msgspec.Struct, frozen=True, kw_only=True, tag="blob"):
    """A reference to a staged immutable object. Declared for the contract; Skulk has
    no blob service yet, so a frame carrying one is refused."""

    blob_id: str
    media_type: str
    size_bytes: int
    sha256: str


MediaAttachment = InlineMediaAttachment | BlobMediaAttachment


class CapabilityStreamFrame(msgspec.Struct, frozen=True, kw_only=True):
    """One frame of a stream's lifecycle in one direction.

    Skulk emits ``started`` at sequence 0 in every active direction; provider (and
    caller) frames follow from 1 in order, then exactly one terminal
    (``completed``, ``failed`` or ``cancelled``). ``error`` is set on ``failed`` and
    ``cancelled`` terminals.
    """

    call_id: str
    direction: Direction
    sequence: int
    kind: FrameKind
    payload: JsonObject | None = None
    media: MediaAttachment | None = None
    error: CapabilityError | None = None

    @property
    def terminal(self) -> bool:
        return self.kind in TERMINAL_KINDS


class CapabilityStreamInput(Protocol):
    """The caller's sink of a client-streaming or bidirectional call.

    ``send_chunk`` moves schema-validated metadata and optional raw media to the
    provider; ``complete`` half-closes caller input (provider output stays open);
    ``cancel`` ends the whole call. Problems (an invalid chunk, a full queue) never
    raise: they end the call with a typed terminal on ``frames``. Each returns whether
    the frame was accepted for delivery.
    """

    async def send_chunk(
        self, payload: JsonObject | None = None, media: InlineMediaAttachment | None = None
    ) -> bool: ...

    async def complete(self) -> bool: ...

    async def cancel(self, message: str | None = None) -> bool: ...


@dataclass(frozen=True, slots=True)
class CapabilityStreamSession:
    """What ``stream_capability`` returns: the typed opening result, one iterator of
    provider frames (empty when the opening was refused), and the input sink for
    client-streaming and bidirectional calls (``None`` otherwise).

    Closing ``frames`` before its terminal cancels the call.
    """

    open_result: CapabilityResult
    frames: AsyncIterator[CapabilityStreamFrame]
    input: CapabilityStreamInput | None = None
    call_id: str = ""


class CapabilityReadiness(Protocol):
    """Optional provider facet: cached, I/O-free per-capability health. ``False`` or a
    raise hides the capability from discovery and refuses new calls (``not_found``)."""

    def capability_ready(self, qualified_id: str) -> bool: ...


def json_size(value: object) -> int:
    """The size of ``value`` encoded as JSON, the unit every payload bound counts in."""
    return len(_json.encode(value))


_json: Final = msgspec.json.Encoder()
