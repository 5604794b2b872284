"""OpenAI Responses request → :class:`ChatTask` (the shared internal task).

The body is decoded leniently, as OpenAI's SDKs expect of a compatible server:
fields Skulk has no use for (``service_tier``, ``prompt_cache_key``, ...) are
ignored. What Skulk cannot honour is refused with a clear 400 instead of being
silently dropped: non-function tools, stored-state features
(``previous_response_id``, ``conversation``, ``item_reference`` items) and
background mode. Skulk keeps no responses after they are sent, so nothing that
refers to an earlier response can work; clients resend the whole input instead
(what ``store: false`` clients already do).
"""

from __future__ import annotations

from typing import Any

import msgspec

from skulk_core.chat.tools import ToolCall, ToolChoice, ToolSpec
from skulk_daemon.chat.images import image_from_url
from skulk_daemon.chat.openai_request import tool_choice_from_openai
from skulk_daemon.chat.task import (
    ChatTask,
    ImageInput,
    JsonObjectFormat,
    JsonSchemaFormat,
    ResponseFormat,
    TaskMessage,
    TaskRole,
)
from skulk_daemon.errors import ApiError, decode_json
from skulk_daemon.errors import bad_request as _bad

LOGPROBS_INCLUDE = "message.output_text.logprobs"
"""The ``include`` entry that asks for output-text logprobs."""


class ResponsesRequest(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    include: list[str] | None = None
    stream: bool = False
    store: bool | None = None
    background: bool | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    truncation: str | None = None
    user: str | None = None


_decoder = msgspec.json.Decoder(ResponsesRequest)

_ROLES: dict[str, TaskRole] = {
    "system": "system",
    "developer": "system",  # read as a system turn by models trained before the role
    "user": "user",
    "assistant": "assistant",
}


def decode_responses_request(raw: bytes) -> ResponsesRequest:
    return decode_json(raw, _decoder)


def _parts(raw: object, where: str) -> tuple[str, tuple[ImageInput, ...]]:
    """A message's (or a function output's) content: a string or a list of parts."""
    if raw is None or isinstance(raw, str):
        return raw or "", ()
    if not isinstance(raw, list):
        raise _bad(f"{where}.content must be a string or a list of content parts")
    texts: list[str] = []
    images: list[ImageInput] = []
    for n, part in enumerate(raw):
        if not isinstance(part, dict):
            raise _bad(f"{where}.content[{n}] must be an object")
        match part.get("type"):
            case "input_text" | "output_text" | "text":
                text = part.get("text")
                texts.append(text if isinstance(text, str) else "")
            case "refusal":
                refusal = part.get("refusal")
                texts.append(refusal if isinstance(refusal, str) else "")
            case "input_image":
                url = part.get("image_url")
                if not isinstance(url, str):
                    raise _bad(
                        f"{where}.content[{n}]: input_image needs image_url (a data: URL); "
                        "file_id images need a file store, which Skulk does not keep",
                        code="invalid_image",
                    )
                images.append(image_from_url(url))
            case other:
                raise _bad(f"{where}.content[{n}]: content part type {other!r} is not supported")
    return "".join(texts), tuple(images)


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise _bad(f"{where} needs {key} (a string)")
    return value


class _Conversation:
    """Input items folded into task messages: an assistant's text and the calls that
    follow it are one assistant turn, as the chat templates expect."""

    def __init__(self) -> None:
        self.messages: list[TaskMessage] = []
        self._call_names: dict[str, str] = {}

    def message(self, item: dict[str, Any], where: str) -> None:
        role = item.get("role")
        if role not in _ROLES:
            raise _bad(f"{where}.role must be one of {', '.join(_ROLES)}")
        text, images = _parts(item.get("content"), where)
        self.messages.append(TaskMessage(role=_ROLES[role], content=text, images=images))

    def function_call(self, item: dict[str, Any], where: str) -> None:
        call_id = _string(item, "call_id", where)
        name = _string(item, "name", where)
        arguments = item.get("arguments", "{}")
        if not isinstance(arguments, str):
            raise _bad(f"{where}.arguments must be a string of JSON")
        call = ToolCall(id=call_id, name=name, arguments=arguments)
        self._call_names[call_id] = name
        last = self.messages[-1] if self.messages else None
        if last is not None and last.role == "assistant":
            self.messages[-1] = TaskMessage(
                role="assistant",
                content=last.content,
                images=last.images,
                tool_calls=(*last.tool_calls, call),
            )
        else:
            self.messages.append(TaskMessage(role="assistant", tool_calls=(call,)))

    def function_output(self, item: dict[str, Any], where: str) -> None:
        call_id = _string(item, "call_id", where)
        if call_id not in self._call_names:
            raise _bad(
                f"{where}: no function_call with call_id {call_id!r} precedes this output "
                "(Skulk stores no earlier responses, so include the call in input)"
            )
        text, images = _parts(item.get("output"), where)
        self.messages.append(
            TaskMessage(
                role="tool",
                content=text,
                images=images,
                tool_call_id=call_id,
                name=self._call_names[call_id],
            )
        )


def _messages(body: ResponsesRequest) -> tuple[TaskMessage, ...]:
    if not body.input:
        raise _bad("input must not be empty")
    conversation = _Conversation()
    if body.instructions:
        conversation.messages.append(TaskMessage(role="system", content=body.instructions))
    if isinstance(body.input, str):
        conversation.messages.append(TaskMessage(role="user", content=body.input))
        return tuple(conversation.messages)
    for index, item in enumerate(body.input):
        where = f"input[{index}]"
        match item.get("type"):
            case None | "message":
                conversation.message(item, where)
            case "function_call":
                conversation.function_call(item, where)
            case "function_call_output":
                conversation.function_output(item, where)
            case "reasoning":
                pass  # a model's earlier thinking is not replayed into the prompt
            case "item_reference":
                raise _bad(
                    f"{where}: item_reference needs stored responses, which Skulk does not "
                    "keep; send the item itself"
                )
            case other:
                raise _bad(f"{where}: input item type {other!r} is not supported")
    return tuple(conversation.messages)


def _tool(raw: object, index: int) -> ToolSpec:
    if not isinstance(raw, dict):
        raise _bad(f"tools[{index}] must be an object")
    kind = raw.get("type")
    if kind != "function":
        raise _bad(
            f"tools[{index}]: tool type {kind!r} is not supported; Skulk runs only function "
            "tools (the client executes them)",
            code="unsupported_tool",
        )
    name = _string(raw, "name", f"tools[{index}]")
    parameters = raw.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise _bad(f"tools[{index}].parameters must be a JSON Schema object")
    description = raw.get("description")
    return ToolSpec(
        name=name,
        description=description if isinstance(description, str) else None,
        parameters=parameters,
    )


def _tool_choice(raw: str | dict[str, Any] | None) -> ToolChoice | None:
    try:
        return tool_choice_from_openai(raw)
    except ApiError:
        raise _bad(
            'tool_choice must be "auto", "none", "required" or {"type": "function", "name": ...}',
            code="invalid_tool_choice",
        ) from None


def _format(text: dict[str, Any] | None) -> ResponseFormat | None:
    match (text or {}).get("format"):
        case None | {"type": "text"}:
            return None
        case {"type": "json_object"}:
            return JsonObjectFormat()
        case {"type": "json_schema", "schema": dict(schema), **rest}:
            name = rest.get("name")
            return JsonSchemaFormat(schema=schema, name=name if isinstance(name, str) else None)
        case {"type": "json_schema"}:
            raise _bad("text.format json_schema needs schema (a JSON Schema object)")
    raise _bad('text.format.type must be "text", "json_object" or "json_schema"')


def _refuse_stored_state(body: ResponsesRequest) -> None:
    if body.previous_response_id is not None:
        raise _bad(
            "previous_response_id is not supported: Skulk stores no responses; "
            "send the whole conversation in input",
            code="previous_response_not_supported",
        )
    if body.conversation is not None:
        raise _bad(
            "conversation is not supported: Skulk stores no conversations; "
            "send the whole conversation in input",
            code="conversation_not_supported",
        )
    if body.background:
        raise _bad("background responses are not supported; use stream or wait for the reply")


def to_task(body: ResponsesRequest) -> ChatTask:
    _refuse_stored_state(body)
    if body.max_output_tokens is not None and body.max_output_tokens <= 0:
        raise _bad("max_output_tokens must be a positive integer")
    effort = (body.reasoning or {}).get("effort")
    logprobs = LOGPROBS_INCLUDE in (body.include or ()) or body.top_logprobs is not None
    return ChatTask(
        model=body.model,
        messages=_messages(body),
        max_tokens=body.max_output_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        logprobs=logprobs,
        top_logprobs=body.top_logprobs,
        tools=tuple(_tool(t, i) for i, t in enumerate(body.tools or ())),
        tool_choice=_tool_choice(body.tool_choice),
        response_format=_format(body.text),
        reasoning_effort=effort if isinstance(effort, str) else None,
    )
