"""Shape a turn's events into OpenAI Responses bytes (SSE events and JSON).

One :class:`_Shaper` turns the turn's events into Responses stream events and the
final response object; the SSE body sends those events and the JSON body keeps
only the final object, so a streamed and a plain response always agree.

Output items follow the turn: thinking becomes a ``reasoning`` item whose raw
text is in ``content`` (``reasoning_text`` parts; ``summary`` stays empty, since
the model wrote no summary), the answer a ``message`` item, and each tool call a
``function_call`` item after them. A generation that fails after it started is
a response with status ``failed`` (``cancelled`` when it was cancelled) and an
``error``, in both forms.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from skulk_core.chat.tools import ToolCall
from skulk_daemon.chat.generation import KeepAlive
from skulk_daemon.chat.responses_protocol import (
    OPENAI_ERROR_CODES,
    ArgumentsEvent,
    ContentPartEvent,
    FunctionCallItem,
    IncompleteDetails,
    InputTokensDetails,
    ItemEvent,
    ItemStatus,
    LifecycleEvent,
    LifecycleType,
    Logprob,
    MessageItem,
    OutputItem,
    OutputText,
    PartEventType,
    ReasoningItem,
    ReasoningText,
    ResponseError,
    ResponseEvent,
    ResponseObject,
    TextDeltaEvent,
    TextDoneEvent,
    TopLogprob,
    Usage,
)
from skulk_daemon.chat.responses_request import ResponsesRequest
from skulk_daemon.chat.turn import ContentDelta, ReasoningDelta, TurnEnd, TurnError, TurnEvent

log = logging.getLogger(__name__)

_json = msgspec.json.Encoder()


def initial_response(
    body: ResponsesRequest, *, response_id: str, created_at: int
) -> ResponseObject:
    """The response as ``response.created`` shows it: in progress, no output yet."""
    reasoning = body.reasoning or {}
    return ResponseObject(
        id=response_id,
        created_at=created_at,
        status="in_progress",
        model=body.model,
        instructions=body.instructions,
        tools=list(body.tools or ()),
        tool_choice=body.tool_choice if body.tool_choice is not None else "auto",
        parallel_tool_calls=body.parallel_tool_calls is not False,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_logprobs=body.top_logprobs,
        max_output_tokens=body.max_output_tokens,
        text={"format": {"type": "text"}, **(body.text or {})},
        reasoning={"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        metadata=dict(body.metadata or {}),
        user=body.user,
        truncation=body.truncation or "disabled",
    )


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def _logprobs(delta: ContentDelta) -> list[Logprob]:
    return [
        Logprob(
            token=lp.token,
            logprob=lp.logprob,
            bytes=list(lp.token.encode()),
            top_logprobs=[
                TopLogprob(token=t, logprob=v, bytes=list(t.encode())) for t, v in lp.top
            ],
        )
        for lp in delta.logprobs
    ]


@dataclass
class _OpenItem:
    """The reasoning or message item being streamed."""

    kind: Literal["reasoning", "message"]
    id: str
    index: int
    text: list[str] = field(default_factory=list)
    logprobs: list[Logprob] = field(default_factory=list)

    def part(self) -> OutputText | ReasoningText:
        text = "".join(self.text)
        if self.kind == "reasoning":
            return ReasoningText(text=text)
        return OutputText(text=text, logprobs=list(self.logprobs))

    def item(self, status: ItemStatus, *, empty: bool = False) -> OutputItem:
        part = self.part()
        if isinstance(part, ReasoningText):
            return ReasoningItem(id=self.id, status=status, content=[] if empty else [part])
        return MessageItem(id=self.id, status=status, content=[] if empty else [part])


class _Shaper:
    """Turn events in, Responses events out; ``response`` is the latest snapshot."""

    def __init__(
        self, initial: ResponseObject, *, want_logprobs: bool, parallel_tool_calls: bool
    ) -> None:
        self.response = initial
        self.finished = False
        self._want_logprobs = want_logprobs
        self._parallel = parallel_tool_calls
        self._output: list[OutputItem] = []
        self._open: _OpenItem | None = None
        self._sequence = 0

    def _seq(self) -> int:
        self._sequence += 1
        return self._sequence - 1

    def _lifecycle(self, type_: LifecycleType) -> LifecycleEvent:
        return LifecycleEvent(type=type_, sequence_number=self._seq(), response=self.response)

    def start(self) -> list[ResponseEvent]:
        return [self._lifecycle("response.created"), self._lifecycle("response.in_progress")]

    def _part(
        self, type_: PartEventType, opened: _OpenItem, part: OutputText | ReasoningText
    ) -> ResponseEvent:
        return ContentPartEvent(
            type=type_,
            sequence_number=self._seq(),
            item_id=opened.id,
            output_index=opened.index,
            content_index=0,
            part=part,
        )

    def _open_item(self, kind: Literal["reasoning", "message"]) -> list[ResponseEvent]:
        if self._open is not None and self._open.kind == kind:
            return []
        out = self._close("completed")
        opened = _OpenItem(
            kind=kind, id=_new_id("rs" if kind == "reasoning" else "msg"), index=len(self._output)
        )
        self._open = opened
        out.append(
            ItemEvent(
                type="response.output_item.added",
                sequence_number=self._seq(),
                output_index=opened.index,
                item=opened.item("in_progress", empty=True),
            )
        )
        out.append(self._part("response.content_part.added", opened, opened.part()))
        return out

    def _close(self, status: ItemStatus) -> list[ResponseEvent]:
        opened, self._open = self._open, None
        if opened is None:
            return []
        item = opened.item(status)
        self._output.append(item)
        message = isinstance(item, MessageItem)
        done = TextDoneEvent(
            type="response.output_text.done" if message else "response.reasoning_text.done",
            sequence_number=self._seq(),
            item_id=opened.id,
            output_index=opened.index,
            content_index=0,
            text="".join(opened.text),
            logprobs=list(opened.logprobs) if message else None,
        )
        return [
            done,
            self._part("response.content_part.done", opened, opened.part()),
            ItemEvent(
                type="response.output_item.done",
                sequence_number=self._seq(),
                output_index=opened.index,
                item=item,
            ),
        ]

    def _delta(
        self, kind: Literal["reasoning", "message"], delta: ContentDelta | ReasoningDelta
    ) -> list[ResponseEvent]:
        logprobs = (
            _logprobs(delta) if isinstance(delta, ContentDelta) and self._want_logprobs else []
        )
        if not delta.text and not logprobs:
            return []
        out = self._open_item(kind)
        opened = self._open
        assert opened is not None
        opened.text.append(delta.text)
        opened.logprobs.extend(logprobs)
        out.append(
            TextDeltaEvent(
                type="response.output_text.delta"
                if kind == "message"
                else "response.reasoning_text.delta",
                sequence_number=self._seq(),
                item_id=opened.id,
                output_index=opened.index,
                content_index=0,
                delta=delta.text,
                logprobs=logprobs if kind == "message" else None,
            )
        )
        return out

    def _call(self, call: ToolCall) -> list[ResponseEvent]:
        item_id, index = _new_id("fc"), len(self._output)
        item = FunctionCallItem(
            id=item_id,
            status="completed",
            call_id=call.id,
            name=call.name,
            arguments=call.arguments,
        )
        self._output.append(item)
        added = msgspec.structs.replace(item, status="in_progress", arguments="")
        return [
            ItemEvent(
                type="response.output_item.added",
                sequence_number=self._seq(),
                output_index=index,
                item=added,
            ),
            ArgumentsEvent(
                type="response.function_call_arguments.delta",
                sequence_number=self._seq(),
                item_id=item_id,
                output_index=index,
                delta=call.arguments,
            ),
            ArgumentsEvent(
                type="response.function_call_arguments.done",
                sequence_number=self._seq(),
                item_id=item_id,
                output_index=index,
                arguments=call.arguments,
            ),
            ItemEvent(
                type="response.output_item.done",
                sequence_number=self._seq(),
                output_index=index,
                item=item,
            ),
        ]

    def _end(self, end: TurnEnd) -> list[ResponseEvent]:
        truncated = end.finish_reason == "length"
        calls = end.tool_calls if self._parallel else end.tool_calls[:1]
        out: list[ResponseEvent] = []
        answered = any(isinstance(item, MessageItem) for item in self._output)
        if not calls and not answered:
            out.extend(self._open_item("message"))  # an answer always has a message, if empty
        out.extend(self._close("incomplete" if truncated else "completed"))
        for call in calls:
            out.extend(self._call(call))
        self.response = msgspec.structs.replace(
            self.response,
            status="incomplete" if truncated else "completed",
            completed_at=int(time.time()),
            incomplete_details=IncompleteDetails(reason="max_output_tokens") if truncated else None,
            output=list(self._output),
            usage=Usage(
                input_tokens=end.prompt_tokens,
                input_tokens_details=InputTokensDetails(cached_tokens=end.stats.cached_tokens),
                output_tokens=end.completion_tokens,
                total_tokens=end.prompt_tokens + end.completion_tokens,
            ),
        )
        out.append(self._lifecycle("response.incomplete" if truncated else "response.completed"))
        return out

    def fail(self, code: str, message: str) -> list[ResponseEvent]:
        """The terminal ``response.failed``; what was streamed stays, marked incomplete."""
        self.finished = True
        output = list(self._output)
        if self._open is not None:
            output.append(self._open.item("incomplete"))
            self._open = None
        known = code in OPENAI_ERROR_CODES
        self.response = msgspec.structs.replace(
            self.response,
            status="cancelled" if code == "cancelled" else "failed",
            error=ResponseError(
                code=code if known else "server_error",
                message=message,
                type=None if known else code,
            ),
            output=output,
        )
        return [self._lifecycle("response.failed")]

    def feed(self, event: TurnEvent) -> list[ResponseEvent]:
        match event:
            case KeepAlive():
                return []
            case ContentDelta():
                return self._delta("message", event)
            case ReasoningDelta():
                return self._delta("reasoning", event)
            case TurnEnd():
                self.finished = True
                return self._end(event)
            case TurnError():
                return self.fail(event.code, event.message)


def _sse(event: ResponseEvent) -> bytes:
    return f"event: {event.type}\n".encode() + b"data: " + _json.encode(event) + b"\n\n"


@asynccontextmanager
async def _closing(events: AsyncIterator[TurnEvent]) -> AsyncIterator[AsyncIterator[TurnEvent]]:
    """Close the turn's generator when we stop reading it.

    NOTE: a client that goes away closes the turn (and with it the generation, which
    cancels the runner's work) at once rather than whenever the generator is collected.
    """
    try:
        yield events
    finally:
        if isinstance(events, AsyncGenerator):
            await events.aclose()


async def sse_stream(
    initial: ResponseObject,
    events: AsyncIterator[TurnEvent],
    *,
    command_id: str,
    want_logprobs: bool,
    parallel_tool_calls: bool,
) -> AsyncIterator[bytes]:
    """Every Responses stream event, ending with exactly one of ``response.completed``,
    ``response.incomplete`` or ``response.failed``."""
    shaper = _Shaper(initial, want_logprobs=want_logprobs, parallel_tool_calls=parallel_tool_calls)
    yield f": command_id {command_id}\n\n".encode()
    for item in shaper.start():
        yield _sse(item)
    try:
        async with _closing(events) as turn:
            async for event in turn:
                if isinstance(event, KeepAlive):
                    yield b": keep-alive\n\n"
                    continue
                for item in shaper.feed(event):
                    yield _sse(item)
                if shaper.finished:
                    return
    except Exception as exc:  # a failure while shaping still ends the stream properly
        log.exception("failed while streaming a response", exc_info=exc)
        for item in shaper.fail("server_error", "internal error; see the node's log"):
            yield _sse(item)
        return
    # NOTE: not in `finally`: a closed connection (GeneratorExit) must not yield.
    for item in shaper.fail("incomplete_generation", "generation ended without a finish reason"):
        yield _sse(item)


async def json_body(
    initial: ResponseObject,
    events: AsyncIterator[TurnEvent],
    *,
    want_logprobs: bool,
    parallel_tool_calls: bool,
) -> AsyncIterator[bytes]:
    """The final response object as one JSON document.

    Leading whitespace while waiting is valid JSON and lets the server notice a
    client that went away.
    """
    shaper = _Shaper(initial, want_logprobs=want_logprobs, parallel_tool_calls=parallel_tool_calls)
    async with _closing(events) as turn:
        async for event in turn:
            if isinstance(event, KeepAlive):
                yield b" "
                continue
            shaper.feed(event)
            if shaper.finished:
                break
    if not shaper.finished:
        shaper.fail("incomplete_generation", "generation ended without a finish reason")
    yield _json.encode(shaper.response)
