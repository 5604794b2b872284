"""Shape a turn's events into OpenAI Chat Completions bytes (SSE and JSON)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

import msgspec

from skulk_core.chat.generation import GenerationStats
from skulk_daemon.chat.admission import Admitted
from skulk_daemon.chat.generation import KeepAlive
from skulk_daemon.chat.openai_protocol import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChoiceLogprobs,
    ChunkChoice,
    Delta,
    FunctionCall,
    PromptTokensDetails,
    StreamToolCall,
    TokenLogprob,
    ToolCallOut,
    TopLogprob,
    Usage,
)
from skulk_daemon.chat.turn import ContentDelta, ReasoningDelta, TurnEnd, TurnError, TurnEvent
from skulk_daemon.errors import error_body

log = logging.getLogger(__name__)

_json = msgspec.json.Encoder()


def error_object(error: TurnError) -> dict[str, object]:
    type_ = "invalid_request_error" if error.code == "context_length_exceeded" else "server_error"
    return error_body(error.message, type_, error.code)


def _logprobs(delta: ContentDelta) -> list[TokenLogprob]:
    return [
        TokenLogprob(
            token=lp.token,
            logprob=lp.logprob,
            bytes=list(lp.token.encode()),
            top_logprobs=[
                TopLogprob(token=t, logprob=v, bytes=list(t.encode())) for t, v in lp.top
            ],
        )
        for lp in delta.logprobs
    ]


def usage(end: TurnEnd) -> Usage:
    return Usage(
        prompt_tokens=end.prompt_tokens,
        completion_tokens=end.completion_tokens,
        total_tokens=end.prompt_tokens + end.completion_tokens,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=end.stats.cached_tokens),
    )


def stats_fields(stats: GenerationStats) -> dict[str, float | int | bool]:
    return {
        "prompt_tps": stats.prompt_tps,
        "generation_tps": stats.generation_tps,
        "prompt_tokens": stats.prompt_tokens,
        "generation_tokens": stats.generation_tokens,
        "serving_batches": stats.serving_batches,
        "in_flight_at_admission": stats.in_flight_at_admission,
        "max_in_flight_at_admission": stats.max_in_flight_at_admission,
        "cached_tokens": stats.cached_tokens,
        "time_to_first_token_ms": stats.time_to_first_token_ms,
    }


def stats_comment(stats: GenerationStats) -> bytes:
    return b": generation_stats " + _json.encode(stats_fields(stats)) + b"\n\n"


_CONTENT_MARKER = "\x00skulk content\x00"
"""Text no model emits (NUL), standing for a content frame's text in its template."""


async def sse_stream(admitted: Admitted, events: AsyncIterator[TurnEvent]) -> AsyncIterator[bytes]:
    """``: command_id``, one chunk per delta, the finish, stats, and always ``[DONE]``."""
    yield f": command_id {admitted.command_id}\n\n".encode()
    want_logprobs = admitted.generation.sampling.logprobs

    def frame(choices: list[ChunkChoice], usage: Usage | None = None) -> bytes:
        chunk = ChatCompletionChunk(
            id=admitted.command_id,
            created=admitted.created,
            model=admitted.model,
            choices=choices,
            usage=usage,
        )
        return b"data: " + _json.encode(chunk) + b"\n\n"

    role_sent = False
    # NOTE: every content frame after the first differs only in its text, so it is
    # built from the bytes around the text of one frame encoded once: per token,
    # one string encode instead of three Structs and a whole chunk's.
    around: tuple[bytes, bytes] | None = None

    def content_frame(text: str) -> bytes:
        nonlocal around
        if around is None:
            marker = _json.encode(_CONTENT_MARKER)
            whole = frame([ChunkChoice(index=0, delta=Delta(content=_CONTENT_MARKER))])
            head, found, tail = whole.partition(marker)
            assert found, "the content marker must appear in the encoded frame"
            around = (head, tail)
        return around[0] + _json.encode(text) + around[1]

    def delta(fields: Delta) -> Delta:
        nonlocal role_sent
        if role_sent:
            return fields
        role_sent = True
        return msgspec.structs.replace(fields, role="assistant")

    try:
        async for event in events:
            match event:
                case KeepAlive():
                    yield b": keep-alive\n\n"
                case ContentDelta():
                    if not event.text and not (want_logprobs and event.logprobs):
                        continue
                    if role_sent and not want_logprobs:
                        yield content_frame(event.text)
                        continue
                    logprobs = ChoiceLogprobs(content=_logprobs(event)) if want_logprobs else None
                    yield frame(
                        [
                            ChunkChoice(
                                index=0, delta=delta(Delta(content=event.text)), logprobs=logprobs
                            )
                        ]
                    )
                case ReasoningDelta():
                    yield frame(
                        [ChunkChoice(index=0, delta=delta(Delta(reasoning_content=event.text)))]
                    )
                case TurnEnd():
                    if event.tool_calls:
                        calls = [
                            StreamToolCall(
                                index=i,
                                id=call.id,
                                function=FunctionCall(name=call.name, arguments=call.arguments),
                            )
                            for i, call in enumerate(event.tool_calls)
                        ]
                        final = delta(Delta(tool_calls=calls))
                    else:
                        final = delta(Delta(content="")) if not role_sent else Delta()
                    yield frame(
                        [ChunkChoice(index=0, delta=final, finish_reason=event.finish_reason)]
                    )
                    if admitted.include_usage:
                        yield frame([], usage=usage(event))
                    yield stats_comment(event.stats)
                case TurnError():
                    yield b"data: " + _json.encode(error_object(event)) + b"\n\n"
    except Exception:
        # A failure while shaping still ends the stream the way clients expect.
        # NOTE: not a `finally`: a generator closed because the client went away
        # (GeneratorExit, CancelledError) must not yield again.
        log.exception("a chat stream failed while shaping its events")
        failure = TurnError("internal_error", "internal error; see the node's log")
        yield b"data: " + _json.encode(error_object(failure)) + b"\n\n"
    yield b"data: [DONE]\n\n"


def completion(
    admitted: Admitted,
    end: TurnEnd,
    content: str,
    reasoning: str,
    logprobs: list[TokenLogprob],
) -> ChatCompletion:
    calls = [
        ToolCallOut(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
        for c in end.tool_calls
    ]
    message = AssistantMessage(
        role="assistant",
        content=content or (None if calls else ""),
        reasoning_content=reasoning or None,
        tool_calls=calls or None,
    )
    return ChatCompletion(
        id=admitted.command_id,
        created=admitted.created,
        model=admitted.model,
        choices=[
            Choice(
                index=0,
                message=message,
                finish_reason=end.finish_reason,
                logprobs=ChoiceLogprobs(content=logprobs)
                if admitted.generation.sampling.logprobs
                else None,
            )
        ],
        usage=usage(end),
    )


async def json_body(
    admitted: Admitted,
    events: AsyncIterator[TurnEvent],
    extend: Callable[[TurnEnd], dict[str, object]] | None = None,
) -> AsyncIterator[bytes]:
    """The whole completion (or an error object) as one JSON document.

    Leading whitespace while waiting is valid JSON and lets the server notice a
    client that went away. ``extend`` adds fields (the bench routes' stats).
    """
    content: list[str] = []
    reasoning: list[str] = []
    logprobs: list[TokenLogprob] = []
    async for event in events:
        match event:
            case KeepAlive():
                yield b" "
            case ContentDelta():
                content.append(event.text)
                logprobs.extend(_logprobs(event))
            case ReasoningDelta():
                reasoning.append(event.text)
            case TurnEnd():
                body = completion(admitted, event, "".join(content), "".join(reasoning), logprobs)
                if extend is None:
                    yield _json.encode(body)
                else:
                    yield _json.encode({**msgspec.to_builtins(body), **extend(event)})
                return
            case TurnError():
                yield _json.encode(error_object(event))
                return
