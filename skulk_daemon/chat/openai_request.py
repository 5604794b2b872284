"""OpenAI Chat Completions request → :class:`ChatTask` (the shared internal task)."""

from __future__ import annotations

import msgspec

from skulk_core.chat.tools import ToolCall, ToolChoice, ToolSpec
from skulk_daemon.chat.images import image_from_url
from skulk_daemon.chat.openai_protocol import (
    ChatCompletionRequest,
    ChatMessage,
    ChatResponseFormat,
    FunctionTool,
    ImageUrlPart,
    JsonObjectResponseFormat,
    JsonSchemaResponseFormat,
    TextPart,
    TextResponseFormat,
    ToolCallIn,
)
from skulk_daemon.chat.request_types import (
    json_text,
    one_or_many,
    optional_text,
    tool_choice,
    tool_spec,
)
from skulk_daemon.chat.task import (
    ChatTask,
    ImageInput,
    JsonObjectFormat,
    JsonSchemaFormat,
    ResponseFormat,
    TaskMessage,
    TaskRole,
)
from skulk_daemon.errors import bad_request as _bad
from skulk_daemon.errors import decode_json

_decoder = msgspec.json.Decoder(ChatCompletionRequest)

_ROLES: dict[str, TaskRole] = {
    "system": "system",
    "developer": "system",  # read as a system turn by models trained before the role
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",  # the legacy function-result role
}

TOOL_CHOICE_REFUSAL = (
    'tool_choice must be "auto", "none", "required" or '
    '{"type": "function", "function": {"name": ...}}'
)


def decode_chat_request(raw: bytes) -> ChatCompletionRequest:
    return decode_json(raw, _decoder)


def _text_part(text: str) -> TextPart:
    return TextPart(text=text)


def _content(message: ChatMessage) -> tuple[str, tuple[ImageInput, ...]]:
    texts: list[str] = []
    images: list[ImageInput] = []
    for part in one_or_many(message.content, _text_part):
        match part:
            case TextPart(text=text):
                texts.append(text or "")
            case ImageUrlPart(image_url=image_url):
                images.append(image_from_url(image_url.url))
    return "".join(texts), tuple(images)


def tool_call_from_openai(call: ToolCallIn) -> ToolCall:
    """An assistant-history tool call in OpenAI's shape."""
    return ToolCall(
        id=str(call.id or ""), name=call.function.name, arguments=json_text(call.function.arguments)
    )


def _message(message: ChatMessage) -> TaskMessage:
    text, images = _content(message)
    return TaskMessage(
        role=_ROLES[message.role],
        content=text,
        images=images,
        tool_calls=tuple(tool_call_from_openai(call) for call in message.tool_calls or ()),
        tool_call_id=message.tool_call_id,
        name=message.name if message.role in ("tool", "function") else None,
    )


def tool_spec_from_openai(tool: FunctionTool, index: int) -> ToolSpec:
    """A tool in OpenAI's ``{"type": "function", "function": {...}}`` shape."""
    function = tool.function
    return tool_spec(
        function.name,
        function.description,
        function.parameters,
        at=f"tools[{index}].function.parameters",
    )


def tool_choice_from_openai(raw: str | dict[str, object] | None) -> ToolChoice | None:
    return tool_choice(raw, refusal=TOOL_CHOICE_REFUSAL)


def response_format_from_openai(raw: ChatResponseFormat | None) -> ResponseFormat | None:
    match raw:
        case None | TextResponseFormat():
            return None
        case JsonObjectResponseFormat():
            return JsonObjectFormat()
        case JsonSchemaResponseFormat(json_schema=spec):
            return JsonSchemaFormat(schema=spec.schema, name=optional_text(spec.name))


def to_task(body: ChatCompletionRequest) -> ChatTask:
    if body.n is not None and body.n != 1:
        raise _bad("only n=1 is supported")
    max_tokens = (
        body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    )
    return ChatTask(
        model=body.model,
        messages=tuple(_message(m) for m in body.messages),
        max_tokens=max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        min_p=body.min_p,
        seed=body.seed,
        stop=one_or_many(body.stop, str),
        frequency_penalty=body.frequency_penalty,
        presence_penalty=body.presence_penalty,
        repetition_penalty=body.repetition_penalty,
        repetition_context_size=body.repetition_context_size,
        logprobs=bool(body.logprobs),
        top_logprobs=body.top_logprobs,
        tools=tuple(tool_spec_from_openai(t, i) for i, t in enumerate(body.tools or ())),
        tool_choice=tool_choice_from_openai(body.tool_choice),
        response_format=response_format_from_openai(body.response_format),
        enable_thinking=body.enable_thinking,
        reasoning_effort=body.reasoning_effort,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
    )
