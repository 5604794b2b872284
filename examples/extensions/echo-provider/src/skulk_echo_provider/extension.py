"""The echo provider: one capability per I/O mode, each echoing what it is sent.

Everything it needs comes from ``skulk.extensions``, the spec's public import path.
Skulk validates every payload against the input schema before a handler runs and
every result and frame against the output schemas after, so the handlers below can
trust their input and need no defensive checks of their own.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

from skulk.extensions import (
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityNodeAction,
    CapabilityNodeSummary,
    CapabilityStreamFrame,
    ExtensionContext,
    InlineMediaAttachment,
)

VERSION = "1.0.0"
MAX_TEXT = 65536

_TEXT = {"type": "string", "maxLength": MAX_TEXT}

ECHO = CapabilityDescriptor(
    id="echo",
    version=VERSION,
    title="Echo",
    description='Returns the text it is given, unchanged. Send {"text": "..."}.',
    input_schema={
        "type": "object",
        "properties": {"text": _TEXT},
        "required": ["text"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {"text": _TEXT},
        "required": ["text"],
        "additionalProperties": False,
    },
)

ECHO_STREAM = CapabilityDescriptor(
    id="echo.stream",
    version=VERSION,
    title="Echo, streamed",
    description=(
        "Streams `count` chunks {index, text}; each carries the text's UTF-8 bytes as "
        "inline media (text/plain)."
    ),
    io_mode="server_streaming",
    input_schema={
        "type": "object",
        "properties": {
            "text": _TEXT,
            "count": {"type": "integer", "minimum": 1, "maximum": 64, "default": 3},
        },
        "required": ["text"],
        "additionalProperties": False,
    },
    output_schema={"type": "object", "properties": {"chunks": {"type": "integer"}}},
    output_chunk_schema={
        "type": "object",
        "properties": {"index": {"type": "integer", "minimum": 0}, "text": _TEXT},
        "required": ["index", "text"],
        "additionalProperties": False,
    },
)

_INPUT_CHUNK = {
    "type": "object",
    "properties": {"text": _TEXT},
    "additionalProperties": False,
}

ECHO_COLLECT = CapabilityDescriptor(
    id="echo.collect",
    version=VERSION,
    title="Echo, collected",
    description=(
        "Reads chunks {text} with optional inline media until the caller completes, then "
        "answers {texts, media_bytes, media_sha256} on its completed frame."
    ),
    io_mode="client_streaming",
    input_schema={"type": "object", "additionalProperties": False},
    output_schema={
        "type": "object",
        "properties": {
            "texts": {"type": "array", "items": {"type": "string"}},
            "media_bytes": {"type": "integer", "minimum": 0},
            "media_sha256": {"type": "string"},
        },
        "required": ["texts", "media_bytes", "media_sha256"],
    },
    input_chunk_schema=_INPUT_CHUNK,
)

ECHO_DUPLEX = CapabilityDescriptor(
    id="echo.duplex",
    version=VERSION,
    title="Echo, both ways",
    description=(
        "Answers every chunk {text} (with optional inline media) at once with "
        "{index, text, media_bytes} and the same media back; completes when the caller does."
    ),
    io_mode="bidirectional",
    input_schema={"type": "object", "additionalProperties": False},
    output_schema={"type": "object", "properties": {"count": {"type": "integer"}}},
    input_chunk_schema=_INPUT_CHUNK,
    output_chunk_schema={
        "type": "object",
        "properties": {
            "index": {"type": "integer", "minimum": 0},
            "text": {"type": "string"},
            "media_bytes": {"type": "integer", "minimum": 0},
        },
        "required": ["index", "text", "media_bytes"],
    },
)

CAPABILITY_NODE = CapabilityNodeSummary(
    plugin_id="skulk.echo-provider",
    node_id="echo",
    bundle_id="skulk-echo-provider",
    version=VERSION,
    title="Echo",
    status="ready",
    owner_available=True,
    actions=(
        CapabilityNodeAction(
            action_id="ping",
            title="Ping",
            kind="descriptor",
            capability_id="echo",
            version=VERSION,
            payload={"text": "ping"},
        ),
    ),
)


class EchoExtension:
    name = "echo-provider"
    skulk_requires = ">=0.1,<1"

    def chat_middleware(self) -> None:
        return None

    def capabilities(self) -> list[CapabilityDescriptor]:
        return [ECHO, ECHO_STREAM, ECHO_COLLECT, ECHO_DUPLEX]

    def on_start(self, context: ExtensionContext) -> None:
        context.publish_capability_node(CAPABILITY_NODE)

    async def handle_call(
        self, context: ExtensionContext, call: CapabilityCall
    ) -> dict[str, object]:
        return {"text": call.payload["text"]}

    async def handle_stream(
        self, context: ExtensionContext, call: CapabilityCall
    ) -> AsyncIterator[CapabilityStreamFrame]:
        text = str(call.payload["text"])
        count = int(str(call.payload.get("count", 3)))
        data = text.encode()
        for index in range(count):
            yield _out(call, index + 1, "chunk", {"index": index, "text": text}, data)
        yield _out(call, count + 1, "completed", {"chunks": count})

    async def handle_input_stream(
        self,
        context: ExtensionContext,
        call: CapabilityCall,
        input_frames: AsyncIterator[CapabilityStreamFrame],
    ) -> AsyncIterator[CapabilityStreamFrame]:
        if call.capability_id == ECHO_COLLECT.id:
            texts: list[str] = []
            digest = hashlib.sha256()
            size = 0
            async for frame in input_frames:
                if frame.kind != "chunk":
                    continue
                texts.append(str((frame.payload or {}).get("text", "")))
                if isinstance(frame.media, InlineMediaAttachment):
                    digest.update(frame.media.data)
                    size += len(frame.media.data)
            result = {"texts": texts, "media_bytes": size, "media_sha256": digest.hexdigest()}
            yield _out(call, 1, "completed", result)
            return
        sequence = 1
        async for frame in input_frames:
            if frame.kind != "chunk":
                continue
            media = frame.media if isinstance(frame.media, InlineMediaAttachment) else None
            payload = {
                "index": sequence - 1,
                "text": str((frame.payload or {}).get("text", "")),
                "media_bytes": 0 if media is None else len(media.data),
            }
            yield _out(call, sequence, "chunk", payload, media=media)
            sequence += 1
        yield _out(call, sequence, "completed", {"count": sequence - 1})


def _out(
    call: CapabilityCall,
    sequence: int,
    kind: str,
    payload: dict[str, object],
    data: bytes | None = None,
    *,
    media: InlineMediaAttachment | None = None,
) -> CapabilityStreamFrame:
    if data is not None:
        media = InlineMediaAttachment(data=data, media_type="text/plain; charset=utf-8")
    return CapabilityStreamFrame(
        call_id=call.call_id,
        direction="provider_to_caller",
        sequence=sequence,
        kind="chunk" if kind == "chunk" else "completed",
        payload=payload,
        media=media,
    )
