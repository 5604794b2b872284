"""Shape engine chunks into OpenAI Chat Completions bytes (SSE and JSON)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec

from skulk_daemon.api.errors import error_body
from skulk_daemon.chat.admission import Admitted
from skulk_daemon.chat.generation import KeepAlive
from skulk_daemon.chat.protocol import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChoiceLogprobs,
    ChunkChoice,
    Delta,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from skulk_daemon.engines.base import EngineChunk as Chunk
from skulk_daemon.engines.base import ErrorChunk, FinishChunk, GenerationStats, TokenChunk

_json = msgspec.json.Encoder()


def _error(chunk: ErrorChunk) -> dict[str, object]:
    return error_body(
        chunk.message,
        "invalid_request_error" if chunk.code == "context_length_exceeded" else "server_error",
        chunk.code,
    )


def _logprobs(chunk: TokenChunk) -> ChoiceLogprobs | None:
    if chunk.logprob is None:
        return None
    top = [TopLogprob(token=t, logprob=lp) for t, lp in chunk.top_logprobs or []]
    return ChoiceLogprobs(
        content=[TokenLogprob(token=chunk.text, logprob=chunk.logprob, top_logprobs=top)]
    )


def _usage(finish: FinishChunk) -> Usage:
    return Usage(
        prompt_tokens=finish.prompt_tokens,
        completion_tokens=finish.completion_tokens,
        total_tokens=finish.prompt_tokens + finish.completion_tokens,
    )


def stats_comment(stats: GenerationStats) -> bytes:
    fields = {
        "prompt_tps": stats.prompt_tps,
        "generation_tps": stats.generation_tps,
        "prompt_tokens": stats.prompt_tokens,
        "generation_tokens": stats.generation_tokens,
        "serving_batches": stats.serving_batches,
        "in_flight_at_admission": stats.in_flight_at_admission,
    }
    return b": generation_stats " + _json.encode(fields) + b"\n\n"


async def sse_stream(
    admitted: Admitted, events: AsyncIterator[Chunk | KeepAlive]
) -> AsyncIterator[bytes]:
    """``: command_id``, one chunk per token, the finish, stats, and always ``[DONE]``."""
    yield f": command_id {admitted.command_id}\n\n".encode()

    def frame(choices: list[ChunkChoice], usage: Usage | None = None) -> bytes:
        chunk = ChatCompletionChunk(
            id=admitted.command_id,
            created=admitted.created,
            model=admitted.model,
            choices=choices,
            usage=usage,
        )
        return b"data: " + _json.encode(chunk) + b"\n\n"

    first = True
    try:
        async for event in events:
            match event:
                case KeepAlive():
                    yield b": keep-alive\n\n"
                case TokenChunk():
                    delta = (
                        Delta(role="assistant", content=event.text)
                        if first
                        else Delta(content=event.text)
                    )
                    first = False
                    yield frame([ChunkChoice(index=0, delta=delta, logprobs=_logprobs(event))])
                case FinishChunk():
                    delta = Delta(role="assistant", content="") if first else Delta()
                    yield frame(
                        [ChunkChoice(index=0, delta=delta, finish_reason=event.finish_reason)]
                    )
                    if admitted.include_usage:
                        yield frame([], usage=_usage(event))
                    yield stats_comment(event.stats)
                case ErrorChunk():
                    yield b"data: " + _json.encode(_error(event)) + b"\n\n"
    finally:
        # NOTE: in `finally` so even a failure while shaping still ends the stream
        # the way clients expect; a closed connection simply drops these bytes.
        yield b"data: [DONE]\n\n"


async def json_body(
    admitted: Admitted, events: AsyncIterator[Chunk | KeepAlive]
) -> AsyncIterator[bytes]:
    """The whole completion (or an error object) as one JSON document.

    Leading whitespace while waiting is valid JSON and lets the server notice a
    client that went away.
    """
    parts: list[str] = []
    logprobs: list[TokenLogprob] = []
    async for event in events:
        match event:
            case KeepAlive():
                yield b" "
            case TokenChunk():
                parts.append(event.text)
                lp = _logprobs(event)
                if lp is not None:
                    logprobs.extend(lp.content)
            case FinishChunk():
                completion = ChatCompletion(
                    id=admitted.command_id,
                    created=admitted.created,
                    model=admitted.model,
                    choices=[
                        Choice(
                            index=0,
                            message=AssistantMessage(content="".join(parts)),
                            finish_reason=event.finish_reason,
                            logprobs=ChoiceLogprobs(content=logprobs)
                            if admitted.generation.sampling.logprobs
                            else None,
                        )
                    ],
                    usage=_usage(event),
                )
                yield _json.encode(completion)
                return
            case ErrorChunk():
                yield _json.encode(_error(event))
                return
