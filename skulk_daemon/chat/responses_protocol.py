"""OpenAI Responses wire types: the response object, its output items and the
streaming events, encoded with msgspec exactly as the SDK's types expect."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

ItemStatus = Literal["in_progress", "completed", "incomplete"]
ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed", "cancelled"]

# The codes OpenAI's ResponseError allows; any other Skulk code travels as ``type``.
OPENAI_ERROR_CODES = frozenset({"server_error", "rate_limit_exceeded", "invalid_prompt"})


class TopLogprob(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    logprob: float
    bytes: list[int]


class Logprob(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class OutputText(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="output_text"):
    text: str
    annotations: list[dict[str, Any]] = []
    logprobs: list[Logprob] = []


class ReasoningText(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="reasoning_text"
):
    text: str


class SummaryText(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="summary_text"):
    text: str


class MessageItem(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="message"):
    id: str
    status: ItemStatus
    role: Literal["assistant"] = "assistant"
    content: list[OutputText]


class ReasoningItem(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="reasoning"):
    id: str
    status: ItemStatus
    summary: list[SummaryText] = []
    content: list[ReasoningText]


class FunctionCallItem(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="function_call"
):
    id: str
    status: ItemStatus
    call_id: str
    name: str
    arguments: str


OutputItem = MessageItem | ReasoningItem | FunctionCallItem


class InputTokensDetails(msgspec.Struct, frozen=True, kw_only=True):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(msgspec.Struct, frozen=True, kw_only=True):
    reasoning_tokens: int = 0
    """Not counted separately by the runner; reported as 0."""


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    input_tokens: int
    input_tokens_details: InputTokensDetails = InputTokensDetails()
    output_tokens: int
    output_tokens_details: OutputTokensDetails = OutputTokensDetails()
    total_tokens: int


class ResponseError(msgspec.Struct, frozen=True, kw_only=True):
    code: str
    message: str
    type: str | None = None


class IncompleteDetails(msgspec.Struct, frozen=True, kw_only=True):
    reason: Literal["max_output_tokens"]


class ResponseObject(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    completed_at: int | None = None
    status: ResponseStatus
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    model: str
    output: list[OutputItem] = []
    usage: Usage | None = None
    # The request's settings, echoed as OpenAI does (the SDK requires some of them).
    instructions: str | None = None
    tools: list[dict[str, Any]] = []
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = None
    max_output_tokens: int | None = None
    text: dict[str, Any] = {}
    reasoning: dict[str, Any] = {}
    metadata: dict[str, str] = {}
    user: str | None = None
    previous_response_id: None = None
    store: bool = False
    """Always false: Skulk keeps no response after it has been sent."""
    background: bool = False
    truncation: str = "disabled"


LifecycleType = Literal[
    "response.created",
    "response.in_progress",
    "response.completed",
    "response.incomplete",
    "response.failed",
]
PartEventType = Literal["response.content_part.added", "response.content_part.done"]


class LifecycleEvent(msgspec.Struct, frozen=True, kw_only=True):
    type: LifecycleType
    sequence_number: int
    response: ResponseObject


class ItemEvent(msgspec.Struct, frozen=True, kw_only=True):
    type: Literal["response.output_item.added", "response.output_item.done"]
    sequence_number: int
    output_index: int
    item: OutputItem


class ContentPartEvent(msgspec.Struct, frozen=True, kw_only=True):
    type: PartEventType
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | ReasoningText


class TextDeltaEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    type: Literal["response.output_text.delta", "response.reasoning_text.delta"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[Logprob] | None = None
    """Output text only (``[]`` when not asked for); reasoning deltas carry none."""


class TextDoneEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    type: Literal["response.output_text.done", "response.reasoning_text.done"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[Logprob] | None = None


class ArgumentsEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    type: Literal["response.function_call_arguments.delta", "response.function_call_arguments.done"]
    sequence_number: int
    item_id: str
    output_index: int
    delta: str | None = None
    arguments: str | None = None


ResponseEvent = (
    LifecycleEvent | ItemEvent | ContentPartEvent | TextDeltaEvent | TextDoneEvent | ArgumentsEvent
)
