"""Shape a turn's events into Anthropic Claude Messages bytes (SSE and JSON).

Anthropic streams named SSE events: ``message_start``, then each content block as
``content_block_start`` / ``content_block_delta``... / ``content_block_stop`` with
its index, then ``message_delta`` (stop reason, usage) and ``message_stop``.
Keep-alives are ``ping`` events; a failure is an ``error`` event.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Literal

import msgspec

from skulk_core.chat.tools import ToolCall
from skulk_daemon.chat.admission import Admitted
from skulk_daemon.chat.generation import KeepAlive
from skulk_daemon.chat.turn import (
    ContentDelta,
    ReasoningDelta,
    TurnEnd,
    TurnError,
    TurnEvent,
    TurnFinishReason,
)

log = logging.getLogger(__name__)

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]

_STOP_REASONS: dict[TurnFinishReason, StopReason] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
}


def stop_reason(end: TurnEnd) -> StopReason:
    """Anthropic's stop reason; a matched stop sequence is told apart from end of turn."""
    if end.finish_reason == "stop" and end.stop_sequence is not None:
        return "stop_sequence"
    return _STOP_REASONS[end.finish_reason]


_ERROR_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}

_REQUEST_ERROR_CODES = frozenset({"context_length_exceeded", "invalid_request"})
"""Turn errors caused by the request itself rather than by the node."""


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Anthropic's split: ``input_tokens`` are the prompt tokens not read from the
    cache, so input plus cache reads (plus cache writes, never reported here) is
    the whole prompt."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


def usage(end: TurnEnd) -> Usage:
    cached = end.stats.cached_tokens
    return Usage(
        input_tokens=end.prompt_tokens - cached,
        output_tokens=end.completion_tokens,
        cache_read_input_tokens=cached,
    )


class TextOut(msgspec.Struct, frozen=True, kw_only=True, tag="text"):
    text: str


class ThinkingOut(msgspec.Struct, frozen=True, kw_only=True, tag="thinking"):
    thinking: str
    signature: str = ""
    """Anthropic signs thinking for replay; Skulk has nothing to sign, so it is empty."""


class ToolUseOut(msgspec.Struct, frozen=True, kw_only=True, tag="tool_use"):
    id: str
    name: str
    input: dict[str, object]


ContentOut = TextOut | ThinkingOut | ToolUseOut


class Message(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ContentOut]
    stop_reason: StopReason | None
    stop_sequence: str | None
    usage: Usage


_json = msgspec.json.Encoder()


def error_type(status: int) -> str:
    """Anthropic's error ``type`` for an HTTP status."""
    return _ERROR_TYPE_BY_STATUS.get(status, "api_error")


def error_document(type_: str, message: str) -> dict[str, object]:
    return {"type": "error", "error": {"type": type_, "message": message}}


def _turn_error(error: TurnError) -> dict[str, object]:
    type_ = "invalid_request_error" if error.code in _REQUEST_ERROR_CODES else "api_error"
    return error_document(type_, error.message)


def message_id(admitted: Admitted) -> str:
    return f"msg_{admitted.command_id}"


def tool_use_id(call: ToolCall) -> str:
    return f"toolu_{call.id.removeprefix('call_')}"


def _input(call: ToolCall) -> dict[str, object]:
    # The turn parser only reports calls whose arguments are a JSON object.
    parsed = json.loads(call.arguments) if call.arguments.strip() else {}
    return parsed if isinstance(parsed, dict) else {}


def message(admitted: Admitted, end: TurnEnd, content: str, reasoning: str) -> Message:
    blocks: list[ContentOut] = []
    if reasoning:
        blocks.append(ThinkingOut(thinking=reasoning))
    if content or not end.tool_calls:
        blocks.append(TextOut(text=content))
    blocks.extend(
        ToolUseOut(id=tool_use_id(call), name=call.name, input=_input(call))
        for call in end.tool_calls
    )
    return Message(
        id=message_id(admitted),
        model=admitted.model,
        content=blocks,
        stop_reason=stop_reason(end),
        stop_sequence=end.stop_sequence,
        usage=usage(end),
    )


async def json_body(admitted: Admitted, events: AsyncIterator[TurnEvent]) -> AsyncIterator[bytes]:
    """The whole message (or an error document) as one JSON document.

    Leading whitespace while waiting is valid JSON and lets the server notice a
    client that went away.
    """
    content: list[str] = []
    reasoning: list[str] = []
    async for event in events:
        match event:
            case KeepAlive():
                yield b" "
            case ContentDelta():
                content.append(event.text)
            case ReasoningDelta():
                reasoning.append(event.text)
            case TurnEnd():
                yield _json.encode(message(admitted, event, "".join(content), "".join(reasoning)))
                return
            case TurnError():
                yield _json.encode(_turn_error(event))
                return
    yield _json.encode(error_document("api_error", "generation ended without a finish"))


def _event(name: str, data: dict[str, object]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + _json.encode(data) + b"\n\n"


class _Blocks:
    """The content blocks of a streamed message: one open at a time, indexed in order."""

    def __init__(self) -> None:
        self.count = 0
        self._open: Literal["text", "thinking"] | None = None

    def _start(self, block: dict[str, object]) -> bytes:
        frame = _event(
            "content_block_start",
            {"type": "content_block_start", "index": self.count, "content_block": block},
        )
        self.count += 1
        return frame

    def _delta(self, delta: dict[str, object]) -> bytes:
        return _event(
            "content_block_delta",
            {"type": "content_block_delta", "index": self.count - 1, "delta": delta},
        )

    def _stop(self) -> bytes:
        return _event("content_block_stop", {"type": "content_block_stop", "index": self.count - 1})

    def close(self) -> list[bytes]:
        """Stop the open text or thinking block, if any."""
        if self._open is None:
            return []
        self._open = None
        return [self._stop()]

    def text(self, kind: Literal["text", "thinking"], text: str) -> list[bytes]:
        frames: list[bytes] = []
        if self._open != kind:
            frames.extend(self.close())
            if kind == "text":
                frames.append(self._start({"type": "text", "text": ""}))
            else:
                frames.append(self._start({"type": "thinking", "thinking": "", "signature": ""}))
            self._open = kind
        if kind == "text":
            frames.append(self._delta({"type": "text_delta", "text": text}))
        else:
            frames.append(self._delta({"type": "thinking_delta", "thinking": text}))
        return frames

    def empty_text(self) -> list[bytes]:
        """An empty answer is still one (empty) text block, as in the JSON body."""
        return [self._start({"type": "text", "text": ""}), self._stop()]

    def tool_use(self, call: ToolCall) -> list[bytes]:
        """A whole tool_use block: calls are known complete when the turn ends."""
        block: dict[str, object] = {
            "type": "tool_use",
            "id": tool_use_id(call),
            "name": call.name,
            "input": {},
        }
        return [
            self._start(block),
            self._delta({"type": "input_json_delta", "partial_json": call.arguments}),
            self._stop(),
        ]


async def sse_stream(admitted: Admitted, events: AsyncIterator[TurnEvent]) -> AsyncIterator[bytes]:
    """``message_start``, the content blocks, ``message_delta``, and ``message_stop``;
    or an ``error`` event. The stream always ends with one of those two."""
    start: dict[str, object] = {
        "id": message_id(admitted),
        "type": "message",
        "role": "assistant",
        "model": admitted.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        # The prompt's token count is known only once the runner has read it; the
        # real count arrives in message_delta, whose usage totals replace these.
        "usage": {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    blocks = _Blocks()
    ended = False
    closed = False
    try:
        yield _event("message_start", {"type": "message_start", "message": start})
        async for event in events:
            match event:
                case KeepAlive():
                    yield _event("ping", {"type": "ping"})
                case ContentDelta():
                    if event.text:
                        for frame in blocks.text("text", event.text):
                            yield frame
                case ReasoningDelta():
                    if event.text:
                        for frame in blocks.text("thinking", event.text):
                            yield frame
                case TurnEnd():
                    frames = blocks.close()
                    if blocks.count == 0 and not event.tool_calls:
                        frames = blocks.empty_text()
                    for call in event.tool_calls:
                        frames.extend(blocks.tool_use(call))
                    for frame in frames:
                        yield frame
                    yield _event(
                        "message_delta",
                        {
                            "type": "message_delta",
                            "delta": {
                                "stop_reason": stop_reason(event),
                                "stop_sequence": event.stop_sequence,
                            },
                            "usage": msgspec.to_builtins(usage(event)),
                        },
                    )
                    yield _event("message_stop", {"type": "message_stop"})
                    ended = True
                    return
                case TurnError():
                    ended = True
                    yield _event("error", _turn_error(event))
                    return
    except (GeneratorExit, asyncio.CancelledError):
        closed = True  # the response is being torn down: nothing more can be sent
        raise
    except Exception:
        log.exception("a Claude Messages stream failed while shaping its events")
        raise
    finally:
        # NOTE: in `finally` so that a stream which stops without a terminal event
        # (or fails while shaping) still ends in a way clients understand.
        if not ended and not closed:
            yield _event("error", error_document("api_error", "the generation ended unexpectedly"))
