"""OpenAI Chat Completions wire types (requests decoded leniently, as OpenAI does)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Role = Literal["system", "user", "assistant", "developer", "tool", "function"]


class TextPart(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="text"):
    text: str | None = None


class InputTextPart(TextPart, frozen=True, kw_only=True, tag="input_text"):
    """The Responses API's name for a text part, which some clients send here too."""


class ImageUrl(msgspec.Struct, frozen=True, kw_only=True):
    url: str
    """An inline ``data:`` URL; any other URL is refused (see ``chat/images.py``)."""


class ImageUrlPart(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="image_url"):
    image_url: ImageUrl


# Any other part type (input_audio, file...) is refused, naming the part.
ContentPart = TextPart | InputTextPart | ImageUrlPart


class FunctionCallIn(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    arguments: object = "{}"
    """JSON text; any other JSON value has always been accepted and is encoded."""


class ToolCallIn(msgspec.Struct, frozen=True, kw_only=True):
    """An assistant-history tool call (``type`` is not read)."""

    id: object = None
    """Read as text (``str(id or "")``), whatever JSON value it is."""
    function: FunctionCallIn


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class FunctionDef(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: object = None
    """A string; any other value is ignored (see ``chat/request_types.py``)."""
    parameters: object = None
    """A JSON Schema object; absent, null or empty means the function takes none."""


class FunctionTool(msgspec.Struct, frozen=True, kw_only=True):
    """A tool in ``{"type": "function", "function": {...}}`` form (Ollama's too); an
    absent ``type`` means a function, any other type is refused."""

    type: Literal["function"] = "function"
    function: FunctionDef


class TextResponseFormat(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="text"):
    pass


class JsonObjectResponseFormat(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="json_object"
):
    pass


class JsonSchemaSpec(msgspec.Struct, frozen=True, kw_only=True):
    schema: dict[str, Any]
    name: object = None
    """A string; any other value is ignored."""


class JsonSchemaResponseFormat(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="json_schema"
):
    json_schema: JsonSchemaSpec


ChatResponseFormat = TextResponseFormat | JsonObjectResponseFormat | JsonSchemaResponseFormat


class StreamOptions(msgspec.Struct, frozen=True, kw_only=True):
    include_usage: bool = False


class ChatCompletionRequest(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    messages: list[ChatMessage]
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    repetition_context_size: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    """A mode or a named function: free-form here, converted by ``to_task`` so that a
    choice it cannot read is refused as ``invalid_tool_choice``."""
    parallel_tool_calls: bool | None = None
    enable_thinking: bool | None = None
    reasoning_effort: str | None = None
    response_format: ChatResponseFormat | None = None
    stream_options: StreamOptions | None = None
    user: str | None = None
    n: int | None = None


class PromptTokensDetails(msgspec.Struct, frozen=True, kw_only=True):
    cached_tokens: int = 0
    """Prompt tokens served from the engine's KV cache rather than prefilled."""


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = PromptTokensDetails()


class TopLogprob(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] = []


class ChoiceLogprobs(msgspec.Struct, frozen=True, kw_only=True):
    content: list[TokenLogprob]


class FunctionCall(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    arguments: str


class ToolCallOut(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class StreamToolCall(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    role: Literal["assistant"]
    content: str | None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallOut] | None = None


class Choice(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    message: AssistantMessage
    finish_reason: str | None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletion(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None


class Delta(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[StreamToolCall] | None = None


class ChunkChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    delta: Delta
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None


class CommandCancelled(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /v1/cancel/{command_id}``: the in-flight command was told to stop."""

    message: str
    command_id: str
