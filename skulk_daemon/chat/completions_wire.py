"""Shape the turns of one completion request into OpenAI Completions bytes (SSE, JSON).

A request with several prompts, or ``n`` above 1, is several turns generated side by
side (each a sequence in the runner's continuous batch); their events are merged as
they come, each tagged with its choice's index. The first failure ends the answer
with the error envelope and stops the other turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field

import msgspec

from skulk_daemon.chat.completions_protocol import (
    Completion,
    CompletionChoice,
    CompletionChunk,
    CompletionFinishReason,
    CompletionLogprobs,
)
from skulk_daemon.chat.generation import KeepAlive
from skulk_daemon.chat.openai_protocol import PromptTokensDetails, Usage
from skulk_daemon.chat.openai_wire import error_object, stats_comment
from skulk_daemon.chat.turn import ContentDelta, ReasoningDelta, TurnEnd, TurnError, TurnEvent
from skulk_daemon.worker.generation_feed import PUMP_QUEUE_CHUNKS

log = logging.getLogger(__name__)

_json = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class ChoiceTurn:
    """One choice: the turn generating it, and what it answers."""

    index: int
    prompt_index: int
    events: AsyncIterator[TurnEvent]
    echo: str = ""
    """Text the choice starts with (the prompt, with ``echo``)."""


@dataclass(frozen=True, slots=True)
class CompletionGroup:
    """Everything one answer is shaped from."""

    id: str
    created: int
    model: str
    choices: Sequence[ChoiceTurn]
    logprobs: bool
    include_usage: bool


@dataclass(slots=True)
class _Logprobs:
    """One choice's logprobs so far; ``offset`` is where its next token starts."""

    offset: int
    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = field(default_factory=list)
    text_offset: list[int] = field(default_factory=list)

    def take(self, delta: ContentDelta) -> CompletionLogprobs:
        """``delta``'s tokens (kept here too), with their offsets in the choice's text."""
        added = _Logprobs(offset=self.offset)
        for lp in delta.logprobs:
            added.tokens.append(lp.token)
            added.token_logprobs.append(lp.logprob)
            added.top_logprobs.append(dict(lp.top) if lp.top else None)
            added.text_offset.append(added.offset)
            added.offset += len(lp.token)
        self.offset = added.offset
        self.tokens += added.tokens
        self.token_logprobs += added.token_logprobs
        self.top_logprobs += added.top_logprobs
        self.text_offset += added.text_offset
        return added.wire()

    def wire(self) -> CompletionLogprobs:
        return CompletionLogprobs(
            tokens=self.tokens,
            token_logprobs=self.token_logprobs,
            top_logprobs=self.top_logprobs,
            text_offset=self.text_offset,
        )


_DONE = object()


async def merged(choices: Sequence[ChoiceTurn]) -> AsyncGenerator[tuple[int, TurnEvent]]:
    """Every choice's events as they arrive, as ``(choice index, event)``.

    Closing this generator early (a failure, a client gone) cancels the choices still
    running: each turn's own cleanup then stops its runner task.
    """
    if len(choices) == 1:
        only = choices[0]
        try:
            async for event in only.events:
                yield only.index, event
        finally:
            # NOTE: closed now, not when collected: its cleanup stops the runner task.
            aclose = getattr(only.events, "aclose", None)
            if aclose is not None:
                await aclose()
        return
    queue: asyncio.Queue[tuple[int, object]] = asyncio.Queue(maxsize=PUMP_QUEUE_CHUNKS)

    async def pump(choice: ChoiceTurn) -> None:
        try:
            async for event in choice.events:
                await queue.put((choice.index, event))
        except Exception:  # shaping must still end the answer; say why in the log
            log.exception("a completion choice failed")
            await queue.put((choice.index, TurnError("internal_error", "internal error")))
        await queue.put((choice.index, _DONE))

    pumps = [asyncio.create_task(pump(choice)) for choice in choices]
    try:
        running = len(pumps)
        while running:
            index, item = await queue.get()
            if item is _DONE:
                running -= 1
                continue
            assert isinstance(item, KeepAlive | ContentDelta | ReasoningDelta | TurnEnd | TurnError)
            yield index, item
    finally:
        # NOTE: a pump cancelled while it waits on its turn raises CancelledError inside
        # that turn's generator, whose cleanup cancels the runner task at once.
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)


def _finish_reason(end: TurnEnd) -> CompletionFinishReason:
    return "length" if end.finish_reason == "length" else "stop"


def usage(group: CompletionGroup, ends: dict[int, TurnEnd]) -> Usage:
    """Completion tokens of every choice; a prompt's tokens once, however many choices."""
    prompt_of = {choice.index: choice.prompt_index for choice in group.choices}
    per_prompt: dict[int, TurnEnd] = {}
    for index, end in sorted(ends.items()):
        per_prompt.setdefault(prompt_of[index], end)
    prompt_tokens = sum(end.prompt_tokens for end in per_prompt.values())
    completion_tokens = sum(end.completion_tokens for end in ends.values())
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
        prompt_tokens_details=PromptTokensDetails(
            cached_tokens=sum(end.stats.cached_tokens for end in per_prompt.values())
        ),
    )


def _text(event: ContentDelta | ReasoningDelta) -> str:
    # NOTE: a completion is the raw continuation: text the reasoning splitter set
    # apart (a base model writing "<think>") is still part of it.
    return event.text


async def completion_sse(group: CompletionGroup) -> AsyncIterator[bytes]:
    """``: command_id``, each choice's echo, its text, its finish, then ``[DONE]``."""
    yield f": command_id {group.id}\n\n".encode()

    def frame(choices: list[CompletionChoice], usage: Usage | None = None) -> bytes:
        chunk = CompletionChunk(
            id=group.id, created=group.created, model=group.model, choices=choices, usage=usage
        )
        return b"data: " + _json.encode(chunk) + b"\n\n"

    logprobs = {c.index: _Logprobs(offset=len(c.echo)) for c in group.choices}
    ends: dict[int, TurnEnd] = {}
    failed = False
    try:
        for choice in group.choices:
            if choice.echo:
                yield frame(
                    [CompletionChoice(index=choice.index, text=choice.echo, finish_reason=None)]
                )
        async with contextlib.aclosing(merged(group.choices)) as events:
            async for index, event in events:
                match event:
                    case KeepAlive():
                        yield b": keep-alive\n\n"
                    case ContentDelta():
                        wanted = group.logprobs and bool(event.logprobs)
                        if not event.text and not wanted:
                            continue
                        taken = logprobs[index].take(event) if wanted else None
                        text = CompletionChoice(
                            index=index, text=event.text, logprobs=taken, finish_reason=None
                        )
                        yield frame([text])
                    case ReasoningDelta():
                        text = CompletionChoice(index=index, text=_text(event), finish_reason=None)
                        yield frame([text])
                    case TurnEnd():
                        ends[index] = event
                        reason = _finish_reason(event)
                        yield frame([CompletionChoice(index=index, text="", finish_reason=reason)])
                        yield stats_comment(event.stats)
                    case TurnError():
                        failed = True
                        yield b"data: " + _json.encode(error_object(event)) + b"\n\n"
                        break
        if group.include_usage and not failed:
            yield frame([], usage=usage(group, ends))
    except Exception:
        # NOTE: not a `finally`: a generator closed because the client went away must
        # not yield again.
        log.exception("a completion stream failed while shaping its events")
        failure = TurnError("internal_error", "internal error; see the node's log")
        yield b"data: " + _json.encode(error_object(failure)) + b"\n\n"
    yield b"data: [DONE]\n\n"


async def completion_json(group: CompletionGroup) -> AsyncIterator[bytes]:
    """The whole completion (or the error envelope) as one JSON document.

    Leading whitespace while waiting is valid JSON and lets the server notice a client
    that went away.
    """
    texts = {c.index: [c.echo] for c in group.choices}
    logprobs = {c.index: _Logprobs(offset=len(c.echo)) for c in group.choices}
    ends: dict[int, TurnEnd] = {}
    async with contextlib.aclosing(merged(group.choices)) as events:
        async for index, event in events:
            match event:
                case KeepAlive():
                    yield b" "
                case ContentDelta():
                    texts[index].append(event.text)
                    if group.logprobs:
                        logprobs[index].take(event)
                case ReasoningDelta():
                    texts[index].append(_text(event))
                case TurnEnd():
                    ends[index] = event
                case TurnError():
                    yield _json.encode(error_object(event))
                    return
    choices = [
        CompletionChoice(
            index=choice.index,
            text="".join(texts[choice.index]),
            logprobs=logprobs[choice.index].wire() if group.logprobs else None,
            finish_reason=_finish_reason(ends[choice.index]),
        )
        for choice in group.choices
    ]
    yield _json.encode(
        Completion(
            id=group.id,
            created=group.created,
            model=group.model,
            choices=choices,
            usage=usage(group, ends),
        )
    )
