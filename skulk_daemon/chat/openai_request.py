"""OpenAI Chat Completions request → :class:`ChatTask` (the shared internal task)."""

from __future__ import annotations

from typing import Any

import msgspec

from skulk_core.chat.tools import NamedChoice, ToolCall, ToolChoice, ToolSpec
from skulk_daemon.chat.images import image_from_url
from skulk_daemon.chat.openai_protocol import ChatCompletionRequest, ChatMessage
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


def decode_chat_request(raw: bytes) -> ChatCompletionRequest:
    return decode_json(raw, _decoder)


def _content(message: ChatMessage, index: int) -> tuple[str, tuple[ImageInput, ...]]:
    if message.content is None or isinstance(message.content, str):
        return message.content or "", ()
    texts: list[str] = []
    images: list[ImageInput] = []
    for part in message.content:
        match part.type:
            case "text" | "input_text":
                texts.append(part.text or "")
            case "image_url":
                url = (part.image_url or {}).get("url")
                if not isinstance(url, str):
                    raise _bad(f"messages[{index}]: an image_url part needs image_url.url")
                images.append(image_from_url(url))
            case other:
                raise _bad(f"messages[{index}]: content part type {other!r} is not supported")
    return "".join(texts), tuple(images)


def tool_call_from_openai(raw: object, where: str) -> ToolCall:
    """An assistant-history tool call in OpenAI's shape."""
    if not isinstance(raw, dict):
        raise _bad(f"{where}: a tool call must be an object")
    function = raw.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise _bad(f"{where}: a tool call needs function.name")
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = msgspec.json.encode(arguments).decode()
    return ToolCall(id=str(raw.get("id") or ""), name=function["name"], arguments=arguments)


def _message(message: ChatMessage, index: int) -> TaskMessage:
    text, images = _content(message, index)
    calls = tuple(
        tool_call_from_openai(call, f"messages[{index}].tool_calls[{n}]")
        for n, call in enumerate(message.tool_calls or ())
    )
    return TaskMessage(
        role=_ROLES[message.role],
        content=text,
        images=images,
        tool_calls=calls,
        tool_call_id=message.tool_call_id,
        name=message.name if message.role in ("tool", "function") else None,
    )


def tool_spec_from_openai(raw: object, index: int) -> ToolSpec:
    """A tool in OpenAI's ``{"type": "function", "function": {...}}`` shape."""
    if not isinstance(raw, dict) or raw.get("type", "function") != "function":
        raise _bad(f"tools[{index}]: only function tools are supported")
    function = raw.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise _bad(f"tools[{index}]: a function tool needs function.name")
    parameters = function.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise _bad(f"tools[{index}]: function.parameters must be a JSON Schema object")
    description = function.get("description")
    return ToolSpec(
        name=function["name"],
        description=description if isinstance(description, str) else None,
        parameters=parameters,
    )


def tool_choice_from_openai(raw: str | dict[str, Any] | None) -> ToolChoice | None:
    match raw:
        case None:
            return None
        case "auto" | "none" | "required":
            return raw
        case {"type": "function", "function": {"name": str(name)}}:
            return NamedChoice(name)
        case {"type": "function", "name": str(name)}:  # the Responses API's flat form
            return NamedChoice(name)
    raise _bad(
        'tool_choice must be "auto", "none", "required" or '
        '{"type": "function", "function": {"name": ...}}',
        code="invalid_tool_choice",
    )


def response_format_from_openai(raw: dict[str, Any] | None) -> ResponseFormat | None:
    match raw:
        case None | {"type": "text"}:
            return None
        case {"type": "json_object"}:
            return JsonObjectFormat()
        case {"type": "json_schema", "json_schema": {"schema": dict(schema), **rest}}:
            name = rest.get("name")
            return JsonSchemaFormat(schema=schema, name=name if isinstance(name, str) else None)
        case {"type": "json_schema"}:
            raise _bad("response_format json_schema needs json_schema.schema (an object)")
    raise _bad('response_format.type must be "text", "json_object" or "json_schema"')


def to_task(body: ChatCompletionRequest) -> ChatTask:
    if body.n is not None and body.n != 1:
        raise _bad("only n=1 is supported")
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    max_tokens = (
        body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    )
    return ChatTask(
        model=body.model,
        messages=tuple(_message(m, i) for i, m in enumerate(body.messages)),
        max_tokens=max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        min_p=body.min_p,
        seed=body.seed,
        stop=stop,
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
