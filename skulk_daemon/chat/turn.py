"""One assistant turn as format-neutral events: content, reasoning, tool calls, end.

The runner streams token chunks; this layer splits thinking from the answer and
tool calls from content (both pure parsers in ``skulk_core``), and ends every turn
with exactly one :class:`TurnEnd` or :class:`TurnError`. Each wire format shapes
these events and nothing else, so a tool call or a reasoning block reads the same
to every client.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Literal

from skulk_core.chat.generation import EngineChunk, ErrorChunk, FinishChunk, GenerationStats
from skulk_core.chat.generation import TokenChunk as RawToken
from skulk_core.chat.reasoning import ReasoningSplitter
from skulk_core.chat.tool_parsing import ToolCallSieve
from skulk_core.chat.tools import ToolCall
from skulk_core.models.listing import resolved_capabilities
from skulk_daemon.chat.admission import Admitted
from skulk_daemon.chat.generation import KeepAlive

TurnFinishReason = Literal["stop", "length", "tool_calls"]


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class ContentDelta:
    text: str
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class TurnEnd:
    finish_reason: TurnFinishReason
    tool_calls: tuple[ToolCall, ...]
    prompt_tokens: int
    completion_tokens: int
    stats: GenerationStats
    stop_sequence: str | None = None
    """The request's stop string that ended the turn, if one did."""


@dataclass(frozen=True, slots=True)
class TurnError:
    code: str
    message: str


TurnEvent = KeepAlive | ContentDelta | ReasoningDelta | TurnEnd | TurnError


def new_tool_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


class _Turn:
    """The parsers for one turn, fed token by token."""

    def __init__(self, admitted: Admitted) -> None:
        # NOTE: only a card that declares thinking holds leading whitespace back (see
        # ReasoningSplitter): elsewhere a first token that is a bare newline goes out
        # at once instead of one decode step later.
        self._splitter = ReasoningSplitter(
            starts_in_reasoning=admitted.starts_in_reasoning,
            thinks=resolved_capabilities(admitted.card).supports_thinking,
        )
        self._sieve = ToolCallSieve(admitted.offer.names) if admitted.offer.tools else None
        self._logprobs: list[TokenLogprob] = []

    def _route(self, pieces: list[tuple[str, str]]) -> list[TurnEvent]:
        out: list[TurnEvent] = []
        for channel, text in pieces:
            if channel == "reasoning":
                out.append(ReasoningDelta(text))
                continue
            released = self._sieve.feed(text) if self._sieve is not None else text
            if released:
                out.append(ContentDelta(released, tuple(self._logprobs)))
                self._logprobs.clear()
        return out

    def token(self, chunk: RawToken) -> list[TurnEvent]:
        if chunk.logprob is not None:
            top = tuple(chunk.top_logprobs or ())
            self._logprobs.append(TokenLogprob(chunk.text, chunk.logprob, top))
        out = self._route(list(self._splitter.feed(chunk.text)))
        if out and all(isinstance(event, ReasoningDelta) for event in out):
            self._logprobs.clear()  # thinking tokens carry no content logprobs
        return out

    def end(self, chunk: FinishChunk) -> list[TurnEvent]:
        out = self._route(list(self._splitter.finish()))
        calls: tuple[ToolCall, ...] = ()
        if self._sieve is not None:
            tail, parsed = self._sieve.finish()
            if tail:
                out.append(ContentDelta(tail, tuple(self._logprobs)))
            calls = tuple(
                ToolCall(id=new_tool_call_id(), name=call.name, arguments=call.arguments)
                for call in parsed
            )
        elif self._logprobs:
            out.append(ContentDelta("", tuple(self._logprobs)))
        self._logprobs.clear()
        reason: TurnFinishReason = "tool_calls" if calls else _reason(chunk)
        out.append(
            TurnEnd(
                finish_reason=reason,
                tool_calls=calls,
                prompt_tokens=chunk.prompt_tokens,
                completion_tokens=chunk.completion_tokens,
                stats=chunk.stats,
                stop_sequence=chunk.stop_sequence if reason == "stop" else None,
            )
        )
        return out


def _reason(chunk: FinishChunk) -> TurnFinishReason:
    # generation_events turns "cancelled" into an error before it gets here.
    return "length" if chunk.finish_reason == "length" else "stop"


async def turn_events(
    admitted: Admitted, events: AsyncGenerator[EngineChunk | KeepAlive, None]
) -> AsyncIterator[TurnEvent]:
    """The turn's events; always ends with one :class:`TurnEnd` or :class:`TurnError`.

    ``events`` is closed when the turn ends (its cleanup runs then, not whenever the
    garbage collector finds it)."""
    turn = _Turn(admitted)
    async with contextlib.aclosing(events):
        async for event in events:
            match event:
                case KeepAlive():
                    yield event
                case RawToken():
                    for item in turn.token(event):
                        yield item
                case FinishChunk():
                    for item in turn.end(event):
                        yield item
                    return
                case ErrorChunk():
                    yield TurnError(event.code, event.message)
                    return
        yield TurnError("incomplete_generation", "generation ended without a finish reason")
