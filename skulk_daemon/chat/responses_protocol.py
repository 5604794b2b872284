"""OpenAI Responses wire types: the input items and tools a request carries, and the
response object, its output items and the streaming events, encoded with msgspec
exactly as the SDK's types expect."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

ItemStatus = Literal["in_progress", "completed", "incomplete"]
ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed", "cancelled"]

# The codes OpenAI's ResponseError allows; any other Skulk code travels as ``type``.
OPENAI_ERROR_CODES = frozenset({"server_error", "rate_limit_exceeded", "invalid_prompt"})


# --- request: input items, function tools, text.format ------------------------------
# The request body keeps these fields as plain JSON (they are echoed back verbatim in
# the response object, and a message item may omit its ``type``); the adapter converts
# each into these Structs where it reads it. Unknown fields are ignored, as OpenAI does.


class InputTextPart(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="input_text"):
    text: object = None
    """A string; any other value reads as empty text (see ``chat/request_types.py``)."""


class OutputTextPart(InputTextPart, frozen=True, kw_only=True, tag="output_text"):
    """An earlier assistant answer, replayed as text."""


class TextPart(InputTextPart, frozen=True, kw_only=True, tag="text"):
    pass


class RefusalPart(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="refusal"):
    refusal: object = None


class InputImagePart(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="input_image"
):
    image_url: object = None
    """A ``data:`` URL. Anything else (a ``file_id`` image) is refused as ``invalid_image``."""


InputContentPart = InputTextPart | OutputTextPart | TextPart | RefusalPart | InputImagePart
InputRole = Literal["system", "developer", "user", "assistant"]


class InputMessage(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="message"):
    """A message item; one sent without ``type`` is read as this."""

    role: InputRole
    content: str | list[InputContentPart] | None = None


class InputFunctionCall(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="function_call"
):
    call_id: str
    name: str
    arguments: str = "{}"


class InputFunctionCallOutput(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="function_call_output"
):
    call_id: str
    output: str | list[InputContentPart] | None = None


class InputReasoning(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="reasoning"):
    """An earlier reasoning item: accepted and not replayed into the prompt."""


class InputItemReference(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="item_reference"
):
    """Refused: it needs stored responses."""


InputItem = (
    InputMessage | InputFunctionCall | InputFunctionCallOutput | InputReasoning | InputItemReference
)


class FunctionTool(msgspec.Struct, frozen=True, kw_only=True):
    """A function tool (the only kind Skulk runs; ``type`` is checked before this)."""

    type: Literal["function"]
    name: str
    description: object = None
    """A string; any other value is ignored."""
    parameters: object = None
    """A JSON Schema object; absent, null or empty means the function takes none."""


class TextFormatText(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="text"):
    pass


class TextFormatJsonObject(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="json_object"
):
    pass


class TextFormatJsonSchema(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="json_schema"
):
    schema: dict[str, Any]
    name: object = None
    """A string; any other value is ignored."""


TextFormat = TextFormatText | TextFormatJsonObject | TextFormatJsonSchema


# --- response --------------------------------------------------------------------


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
