"""The wire formats a node chats in, reduced to one sequence of events.

`skulk chat --format` sends one conversation as OpenAI Chat Completions, Anthropic
Claude Messages, Ollama chat or OpenAI (legacy) Completions, the last as plain text
for a base model to continue, and reads the streamed reply back through the
pure functions here: each turns its format's body lines into :class:`TextDelta`
events ending in one :class:`Finish` or :class:`StreamError`, so the terminal
shows every format the same way. A sequence with neither at the end means the
stream stopped early. Lines that are not what the format promises raise
:class:`~skulk_cli.client.UnexpectedResponseError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

import msgspec

from skulk_cli.client import JsonObject, UnexpectedResponseError

SSE = "text/event-stream"
NDJSON = "application/x-ndjson"
# Anthropic's API has no default output budget; the request must carry one. When
# the user gives none, the CLI sends what a Skulk node uses for the other formats.
CLAUDE_DEFAULT_MAX_TOKENS = 4096
# How much of a malformed line an error message quotes.
_QUOTE_CHARS = 80

T = TypeVar("T")


class WireFormat(StrEnum):
    OPENAI = "openai"
    CLAUDE = "claude"
    OLLAMA = "ollama"
    COMPLETION = "completion"


@dataclass(frozen=True)
class Route:
    """Where a format's chat requests go, and the media type of its streamed reply."""

    path: str
    stream_media_type: str


ROUTES: dict[WireFormat, Route] = {
    WireFormat.OPENAI: Route("/v1/chat/completions", SSE),
    WireFormat.CLAUDE: Route("/v1/messages", SSE),
    WireFormat.OLLAMA: Route("/ollama/api/chat", NDJSON),
    WireFormat.COMPLETION: Route("/v1/completions", SSE),
}


# --- events -------------------------------------------------------------------------


@dataclass(frozen=True)
class TextDelta:
    """Generated text; ``thinking`` marks reasoning shown apart from the answer."""

    text: str
    thinking: bool = False


@dataclass(frozen=True)
class Finish:
    """The reply ended normally.

    ``reason`` is in OpenAI's words (``stop``, ``length``, ``tool_calls``) whatever
    the format; ``native_reason`` is the format's own (Claude's ``end_turn``).
    Counts and rates are None where the format does not report them.
    """

    reason: str
    native_reason: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tps: float | None = None
    generation_tps: float | None = None


@dataclass(frozen=True)
class StreamError:
    """The node reported a failure in the body; its message, as sent."""

    message: str


WireEvent = TextDelta | Finish | StreamError


# --- requests -----------------------------------------------------------------------


def plain_prompt(messages: Sequence[JsonObject]) -> str:
    """The conversation as the text a base model continues, as a node renders a chat
    for a base card: each turn on a new line, a reply right after the text it continued."""
    parts: list[str] = []
    for index, message in enumerate(messages):
        if index and message.get("role") != "assistant":
            parts.append("\n")
        parts.append(str(message.get("content") or ""))
    return "".join(parts)


def request_body(
    fmt: WireFormat,
    model: str,
    messages: Sequence[JsonObject],
    *,
    stream: bool,
    max_tokens: int | None = None,
    temperature: float | None = None,
) -> JsonObject:
    """A chat request in ``fmt``'s shape, from OpenAI-style ``{"role", "content"}`` messages."""
    match fmt:
        case WireFormat.OPENAI:
            body: JsonObject = {"model": model, "messages": list(messages)}
            if max_tokens is not None:
                body["max_tokens"] = max_tokens
            if temperature is not None:
                body["temperature"] = temperature
        case WireFormat.CLAUDE:
            # Claude takes the system prompt beside the conversation, not in it.
            system = [m["content"] for m in messages if m.get("role") == "system"]
            body = {
                "model": model,
                "max_tokens": max_tokens or CLAUDE_DEFAULT_MAX_TOKENS,
                "messages": [m for m in messages if m.get("role") != "system"],
            }
            if system:
                body["system"] = "\n\n".join(str(s) for s in system)
            if temperature is not None:
                body["temperature"] = temperature
        case WireFormat.COMPLETION:
            body = {"model": model, "prompt": plain_prompt(messages)}
            if max_tokens is not None:
                body["max_tokens"] = max_tokens
            if temperature is not None:
                body["temperature"] = temperature
        case WireFormat.OLLAMA:
            body = {"model": model, "messages": list(messages)}
            options: JsonObject = {}
            if max_tokens is not None:
                options["num_predict"] = max_tokens
            if temperature is not None:
                options["temperature"] = temperature
            if options:
                body["options"] = options
    # Ollama streams unless told not to; the others the other way round.
    body["stream"] = stream
    return body


def error_message(body: object) -> str | None:
    """The message of an error body in any format's shape; None for anything else.

    OpenAI ``{"error": {"message"}}``, Claude ``{"type": "error", "error": {"message"}}``,
    Ollama ``{"error": "message"}``.
    """
    if not isinstance(body, dict) or "error" not in body:
        return None
    error = body["error"]
    if isinstance(error, str):
        return error or "the node reported an error"
    if isinstance(error, dict):
        message = error.get("message")
        return message if isinstance(message, str) and message else "the node reported an error"
    return "the node reported an error"


# --- reading replies ----------------------------------------------------------------


def events(fmt: WireFormat, lines: Iterable[str]) -> Iterator[WireEvent]:
    """``fmt``'s streamed body, line by line, as events."""
    match fmt:
        case WireFormat.OPENAI | WireFormat.COMPLETION:
            return openai_events(lines)
        case WireFormat.CLAUDE:
            return claude_events(lines)
        case WireFormat.OLLAMA:
            return ollama_events(lines)


@dataclass(frozen=True)
class SseComment:
    """A ``: text`` line. Skulk sends ``command_id <id>``, ``generation_stats {...}``."""

    text: str


@dataclass(frozen=True)
class SseData:
    """One event's ``data:`` payload (the ``event:`` name is not kept: every format
    here repeats it inside the payload)."""

    data: str


def sse_frames(lines: Iterable[str]) -> Iterator[SseComment | SseData]:
    """Server-Sent Events from body lines: comments at once, data at each blank line."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield SseData("\n".join(data))
                data = []
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if not field:
            yield SseComment(value)
        elif field == "data":
            data.append(value)
    if data:
        yield SseData("\n".join(data))


def _decode(text: str, what: str) -> dict[str, object]:
    try:
        raw = msgspec.json.decode(text)
    except msgspec.DecodeError:
        raise UnexpectedResponseError(
            f"the {what} stream sent a frame that is not JSON: {text[:_QUOTE_CHARS]!r}"
        ) from None
    if not isinstance(raw, dict):
        raise UnexpectedResponseError(f"unexpected {what} stream frame: {text[:_QUOTE_CHARS]!r}")
    return raw


def _convert(raw: dict[str, object], view: type[T], what: str) -> T:
    try:
        return msgspec.convert(raw, view)
    except msgspec.ValidationError as exc:
        raise UnexpectedResponseError(f"unexpected {what} stream frame: {exc}") from None


# OpenAI ------------------------------------------------------------------------------


class _OpenAIDelta(msgspec.Struct, frozen=True, kw_only=True):
    content: str | None = None
    reasoning_content: str | None = None


class _OpenAIChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int = 0
    delta: _OpenAIDelta = _OpenAIDelta()
    text: str | None = None
    """A ``text_completion`` chunk's text (Completions has no delta)."""
    finish_reason: str | None = None


class _OpenAIUsage(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _OpenAIChunk(msgspec.Struct, frozen=True, kw_only=True):
    choices: tuple[_OpenAIChoice, ...] = ()
    usage: _OpenAIUsage | None = None


class _SkulkStats(msgspec.Struct, frozen=True, kw_only=True):
    """The ``: generation_stats {...}`` comment a Skulk node sends after the finish."""

    prompt_tps: float | None = None
    generation_tps: float | None = None
    prompt_tokens: int | None = None
    generation_tokens: int | None = None


def _stats(comment: str) -> _SkulkStats | None:
    name, _, rest = comment.partition(" ")
    if name != "generation_stats":
        return None
    try:
        return msgspec.json.decode(rest, type=_SkulkStats)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None  # statistics are a courtesy; a malformed line is not worth a failure


def openai_events(lines: Iterable[str]) -> Iterator[WireEvent]:
    """``chat.completion.chunk`` (or ``text_completion``) frames; the finish is reported
    at ``[DONE]``, once the usage chunk and Skulk's ``generation_stats`` comment (which
    follow it) are in."""
    reason: str | None = None
    usage: _OpenAIUsage | None = None
    stats: _SkulkStats | None = None
    for frame in sse_frames(lines):
        if isinstance(frame, SseComment):
            stats = _stats(frame.text) or stats
            continue
        if frame.data == "[DONE]":
            if reason is None:
                yield StreamError("the node ended the reply without a finish reason")
                return
            yield Finish(
                reason=reason,
                native_reason=reason,
                prompt_tokens=_first(
                    usage.prompt_tokens if usage else None, stats.prompt_tokens if stats else None
                ),
                completion_tokens=_first(
                    usage.completion_tokens if usage else None,
                    stats.generation_tokens if stats else None,
                ),
                prompt_tps=stats.prompt_tps if stats else None,
                generation_tps=stats.generation_tps if stats else None,
            )
            return
        raw = _decode(frame.data, "chat")
        if "error" in raw:
            yield StreamError(error_message(raw) or "generation failed")
            return
        chunk = _convert(raw, _OpenAIChunk, "chat")
        usage = chunk.usage or usage
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            if choice.delta.reasoning_content:
                yield TextDelta(choice.delta.reasoning_content, thinking=True)
            if choice.delta.content:
                yield TextDelta(choice.delta.content)
            if choice.text:
                yield TextDelta(choice.text)
            reason = choice.finish_reason or reason


def _first(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)


# Claude ------------------------------------------------------------------------------

# Claude's stop reasons in OpenAI's words; others (``refusal``...) pass through.
CLAUDE_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}


class _ClaudeUsage(msgspec.Struct, frozen=True, kw_only=True):
    input_tokens: int | None = None
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    output_tokens: int | None = None


def _prompt_tokens(usage: _ClaudeUsage) -> int | None:
    """The whole prompt: Anthropic's ``input_tokens`` leave out what was read from (or
    written to) the prompt cache."""
    if usage.input_tokens is None:
        return None
    return usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens


class _ClaudeMessage(msgspec.Struct, frozen=True, kw_only=True):
    usage: _ClaudeUsage = _ClaudeUsage()


class _ClaudeStart(msgspec.Struct, frozen=True, kw_only=True):
    message: _ClaudeMessage = _ClaudeMessage()


class _ClaudeBlockDelta(msgspec.Struct, frozen=True, kw_only=True):
    type: str = ""
    text: str = ""
    thinking: str = ""


class _ClaudeDelta(msgspec.Struct, frozen=True, kw_only=True):
    delta: _ClaudeBlockDelta = _ClaudeBlockDelta()


class _ClaudeStop(msgspec.Struct, frozen=True, kw_only=True):
    stop_reason: str | None = None


class _ClaudeMessageDelta(msgspec.Struct, frozen=True, kw_only=True):
    delta: _ClaudeStop = _ClaudeStop()
    usage: _ClaudeUsage = _ClaudeUsage()


def claude_events(lines: Iterable[str]) -> Iterator[WireEvent]:
    """Anthropic's named events; the finish is reported at ``message_stop``.

    Usage arrives twice: ``message_start`` (input tokens, often 0 while streaming)
    and ``message_delta`` (the totals, which win where given).
    """
    reason: str | None = None
    start_usage = _ClaudeUsage()
    end_usage = _ClaudeUsage()
    for frame in sse_frames(lines):
        if isinstance(frame, SseComment):
            continue
        raw = _decode(frame.data, "Claude Messages")
        # NOTE: the wire's own tag. Anthropic adds event types over time and asks
        # clients to ignore the ones they do not know, so there is no closed union.
        match raw.get("type"):
            case "message_start":
                start_usage = _convert(raw, _ClaudeStart, "message_start").message.usage
            case "content_block_delta":
                delta = _convert(raw, _ClaudeDelta, "content_block_delta").delta
                if delta.type == "text_delta" and delta.text:
                    yield TextDelta(delta.text)
                elif delta.type == "thinking_delta" and delta.thinking:
                    yield TextDelta(delta.thinking, thinking=True)
            case "message_delta":
                ending = _convert(raw, _ClaudeMessageDelta, "message_delta")
                reason = ending.delta.stop_reason or reason
                end_usage = ending.usage
            case "message_stop":
                native = reason or "unknown"
                yield Finish(
                    reason=CLAUDE_STOP_REASONS.get(native, native),
                    native_reason=native,
                    prompt_tokens=_first(_prompt_tokens(end_usage), _prompt_tokens(start_usage)),
                    completion_tokens=_first(end_usage.output_tokens, start_usage.output_tokens),
                )
                return
            case "error":
                yield StreamError(error_message(raw) or "generation failed")
                return
            case _:
                continue  # ping, content_block_start/stop, and types yet to come


# Ollama ------------------------------------------------------------------------------

_NS_PER_SECOND = 1_000_000_000


class _OllamaMessage(msgspec.Struct, frozen=True, kw_only=True):
    content: str = ""
    thinking: str = ""


class _OllamaLine(msgspec.Struct, frozen=True, kw_only=True):
    message: _OllamaMessage = _OllamaMessage()
    done: bool = False
    done_reason: str | None = None
    prompt_eval_count: int | None = None
    eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_duration: int | None = None


def _rate(tokens: int | None, nanoseconds: int | None) -> float | None:
    if not tokens or not nanoseconds:
        return None
    return tokens * _NS_PER_SECOND / nanoseconds


def ollama_events(lines: Iterable[str]) -> Iterator[WireEvent]:
    """NDJSON objects; the finish is the ``done: true`` line.

    A keep-alive is a lone space that becomes leading whitespace of the next line,
    so blank-looking lines are skipped and JSON's whitespace rules do the rest.
    """
    for line in lines:
        if not line.strip():
            continue
        raw = _decode(line, "Ollama chat")
        if "error" in raw:
            yield StreamError(error_message(raw) or "generation failed")
            return
        item = _convert(raw, _OllamaLine, "Ollama chat")
        if item.message.thinking:
            yield TextDelta(item.message.thinking, thinking=True)
        if item.message.content:
            yield TextDelta(item.message.content)
        if item.done:
            native = item.done_reason or "unknown"
            yield Finish(
                reason=native,  # Ollama's reasons (stop, length) are already OpenAI's
                native_reason=native,
                prompt_tokens=item.prompt_eval_count,
                completion_tokens=item.eval_count,
                prompt_tps=_rate(item.prompt_eval_count, item.prompt_eval_duration),
                generation_tps=_rate(item.eval_count, item.eval_duration),
            )
            return
