"""What a valid stream frame is, in each direction.

A provider's frame carries its call's id, ``provider_to_caller``, the next sequence
number and a kind a handler may yield (never ``started``, which Skulk emits); a chunk
payload matches ``output_chunk_schema`` and a completed payload ``output_schema``. A
caller's frame carries the call's id, ``caller_to_provider`` and a chunk payload
matching ``input_chunk_schema``. In both directions a payload is a JSON object of at
most 1 MiB and media is inline bytes of at most 1 MiB (staged blobs are refused:
there is no blob service yet). Anything else is a typed error: ``invalid_result``
for a provider, ``invalid_payload`` for a caller, ``payload_too_large`` for size.
"""

from __future__ import annotations

from typing import Final, get_args

import msgspec

from skulk_core.extensions.capabilities import (
    MAX_MEDIA_BYTES,
    MAX_PAYLOAD_BYTES,
    BlobMediaAttachment,
    CapabilityError,
    CapabilityErrorCode,
    CapabilityStreamFrame,
    Direction,
    FrameKind,
    InlineMediaAttachment,
    JsonObject,
    json_size,
)
from skulk_daemon.capabilities.registry import Registration
from skulk_daemon.capabilities.schema import Schema

_CODES: Final = frozenset(get_args(CapabilityErrorCode))


def frame(
    call_id: str,
    direction: Direction,
    sequence: int,
    kind: FrameKind,
    error: CapabilityError | None = None,
) -> CapabilityStreamFrame:
    return CapabilityStreamFrame(
        call_id=call_id, direction=direction, sequence=sequence, kind=kind, error=error
    )


class OutputFrames:
    """A provider's frames to its caller for one call, numbered from 1."""

    def __init__(self, call_id: str) -> None:
        self._call_id = call_id
        self._sequence = 0

    def __call__(
        self,
        kind: FrameKind,
        payload: JsonObject | None = None,
        *,
        media: InlineMediaAttachment | None = None,
        error: CapabilityError | None = None,
    ) -> CapabilityStreamFrame:
        self._sequence += 1
        return CapabilityStreamFrame(
            call_id=self._call_id,
            direction="provider_to_caller",
            sequence=self._sequence,
            kind=kind,
            payload=payload,
            media=media,
            error=error,
        )


def renumber(item: CapabilityStreamFrame, sequence: int) -> CapabilityStreamFrame:
    return item if item.sequence == sequence else msgspec.structs.replace(item, sequence=sequence)


def media_problem(media: object, bad: CapabilityErrorCode) -> CapabilityError | None:
    if media is None:
        return None
    if isinstance(media, BlobMediaAttachment):
        return CapabilityError(
            code=bad, message="blob media attachments are not supported yet; send inline media"
        )
    if not isinstance(media, InlineMediaAttachment) or not isinstance(media.data, bytes):
        return CapabilityError(code=bad, message="media must be an InlineMediaAttachment of bytes")
    if len(media.data) > MAX_MEDIA_BYTES:
        return CapabilityError(
            code="payload_too_large",
            message=f"a frame's media is {len(media.data)} bytes; at most {MAX_MEDIA_BYTES}",
        )
    return None


def payload_problem(payload: object, bad: CapabilityErrorCode) -> CapabilityError | None:
    if payload is None:
        return None
    if not isinstance(payload, dict):
        return CapabilityError(code=bad, message="a frame payload must be a JSON object")
    try:
        size = json_size(payload)
    except (TypeError, ValueError) as exc:
        return CapabilityError(code=bad, message=f"a frame payload is not JSON: {exc}")
    if size > MAX_PAYLOAD_BYTES:
        return CapabilityError(
            code="payload_too_large",
            message=f"a frame payload is {size} bytes; at most {MAX_PAYLOAD_BYTES}",
        )
    return None


def _schema_problem(
    schema: Schema, payload: object, code: CapabilityErrorCode
) -> CapabilityError | None:
    problems = schema.problems(payload)
    return CapabilityError(code=code, message="; ".join(problems)) if problems else None


def input_problem(
    registration: Registration, call_id: str, item: CapabilityStreamFrame, *, input_done: bool
) -> CapabilityError | None:
    """Why a caller frame cannot be handed to the provider (``None`` when it can)."""
    if registration.descriptor.io_mode not in ("client_streaming", "bidirectional"):
        return CapabilityError(code="invalid_payload", message="this call takes no input")
    if input_done:
        return CapabilityError(
            code="invalid_payload", message="caller input continued after completed"
        )
    if item.call_id != call_id or item.direction != "caller_to_provider":
        return CapabilityError(code="invalid_payload", message="a frame of another call")
    if item.kind not in ("chunk", "completed", "cancelled"):
        return CapabilityError(
            code="invalid_payload", message=f"a caller does not send {item.kind}"
        )
    problem = media_problem(item.media, "invalid_payload") or payload_problem(
        item.payload, "invalid_payload"
    )
    if problem is not None or item.kind != "chunk" or item.payload is None:
        return problem
    schema = registration.input_chunk
    return None if schema is None else _schema_problem(schema, item.payload, "invalid_payload")


def output_problem(
    registration: Registration, call_id: str, item: object, *, expected: int
) -> CapabilityError | None:
    """Why a handler's yield cannot go to the caller (``None`` when it can)."""
    if not isinstance(item, CapabilityStreamFrame):
        return CapabilityError(
            code="invalid_result",
            message=f"the handler yielded {type(item).__name__}, not a CapabilityStreamFrame",
        )
    if item.call_id != call_id or item.direction != "provider_to_caller":
        return CapabilityError(
            code="invalid_result", message="a frame must carry this call's id, provider_to_caller"
        )
    if item.sequence != expected:
        return CapabilityError(
            code="invalid_result",
            message=f"frame sequence {item.sequence} where {expected} was expected",
        )
    if item.kind not in ("chunk", "completed", "failed", "cancelled"):
        return CapabilityError(
            code="invalid_result", message=f"a handler does not yield {item.kind!r} frames"
        )
    problem = media_problem(item.media, "invalid_result") or payload_problem(
        item.payload, "invalid_result"
    )
    if problem is not None or item.payload is None:
        return problem
    if item.kind == "chunk":
        if registration.output_chunk is None:
            return CapabilityError(
                code="invalid_result", message="this capability declares no output chunks"
            )
        return _schema_problem(registration.output_chunk, item.payload, "invalid_result")
    if item.kind == "completed":
        return _schema_problem(registration.output, item.payload, "invalid_result")
    return None


def settle_terminal(item: CapabilityStreamFrame) -> CapabilityStreamFrame:
    """A handler's ``failed``/``cancelled`` terminal always carries a known code."""
    if item.kind == "completed" or (item.error is not None and item.error.code in _CODES):
        return item
    code: CapabilityErrorCode = "provider_error" if item.kind == "failed" else "cancelled"
    error = CapabilityError(code=code, message=f"the provider ended the stream ({item.kind})")
    return msgspec.structs.replace(item, error=error)
