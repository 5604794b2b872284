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

from typing import Annotated

import msgspec

from skulk_core.chat.tools import ToolCall, ToolChoice, ToolSpec
from skulk_daemon.chat.images import image_from_url
from skulk_daemon.chat.request_types import (
    field_errors,
    one_or_many,
    optional_text,
    tool_choice,
    tool_spec,
)
from skulk_daemon.chat.responses_protocol import (
    FunctionTool,
    InputContentPart,
    InputFunctionCall,
    InputFunctionCallOutput,
    InputImagePart,
    InputItem,
    InputItemReference,
    InputMessage,
    InputReasoning,
    InputTextPart,
    RefusalPart,
    TextFormat,
    TextFormatJsonObject,
    TextFormatJsonSchema,
    TextFormatText,
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

LOGPROBS_INCLUDE = "message.output_text.logprobs"
"""The ``include`` entry that asks for output-text logprobs."""
TOOL_CHOICE_REFUSAL = (
    'tool_choice must be "auto", "none", "required" or {"type": "function", "name": ...}'
)


class ResponsesRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The body. ``input`` items, ``tools``, ``tool_choice`` and ``text`` stay plain JSON:
    the response object echoes them back as sent, a message item may omit its
    ``type``, and a hosted tool or a bad choice has a refusal code of its own. The
    adapter converts each into its Struct (``responses_protocol``) where it reads it."""

    model: str
    input: str | list[dict[str, object]]
    """A string (one user message) or a list of :data:`InputItem` objects."""
    instructions: str | None = None
    max_output_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = None
    tools: list[dict[str, object]] | None = None
    """:class:`FunctionTool` objects; any other tool type is refused (``unsupported_tool``)."""
    tool_choice: str | dict[str, object] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, object] | None = None
    """``format`` is a :data:`TextFormat`; the rest is echoed back."""
    reasoning: dict[str, object] | None = None
    include: list[str] | None = None
    stream: bool = False
    store: bool | None = None
    background: bool | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, object] | None = None
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


def _text_part(text: str) -> InputTextPart:
    return InputTextPart(text=text)


def _parts(
    content: str | list[InputContentPart] | None, where: str
) -> tuple[str, tuple[ImageInput, ...]]:
    """A message's (or a function output's) content: a string or a list of parts."""
    texts: list[str] = []
    images: list[ImageInput] = []
    for n, part in enumerate(one_or_many(content, _text_part)):
        match part:
            case InputTextPart(text=text):
                texts.append(optional_text(text) or "")
            case RefusalPart(refusal=refusal):
                texts.append(optional_text(refusal) or "")
            case InputImagePart(image_url=image_url):
                url = optional_text(image_url)
                if url is None:
                    raise _bad(
                        f"{where}.content[{n}]: input_image needs image_url (a data: URL); "
                        "file_id images need a file store, which Skulk does not keep",
                        code="invalid_image",
                    )
                images.append(image_from_url(url))
    return "".join(texts), tuple(images)


def _user_item(text: str) -> dict[str, object]:
    """A string ``input``: one user message."""
    return {"type": "message", "role": "user", "content": text}


def _item(raw: dict[str, object], where: str) -> InputItem:
    if raw.get("type") is None:  # a message item may omit its type (the SDKs' "easy" form)
        raw = {**raw, "type": "message"}
    with field_errors(where):
        item: InputItem = msgspec.convert(raw, InputItem)
    return item


class _Conversation:
    """Input items folded into task messages: an assistant's text and the calls that
    follow it are one assistant turn, as the chat templates expect."""

    def __init__(self) -> None:
        self.messages: list[TaskMessage] = []
        self._call_names: dict[str, str] = {}

    def message(self, item: InputMessage, where: str) -> None:
        text, images = _parts(item.content, where)
        self.messages.append(TaskMessage(role=_ROLES[item.role], content=text, images=images))

    def function_call(self, item: InputFunctionCall) -> None:
        call = ToolCall(id=item.call_id, name=item.name, arguments=item.arguments)
        self._call_names[item.call_id] = item.name
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

    def function_output(self, item: InputFunctionCallOutput, where: str) -> None:
        call_id = item.call_id
        if call_id not in self._call_names:
            raise _bad(
                f"{where}: no function_call with call_id {call_id!r} precedes this output "
                "(Skulk stores no earlier responses, so include the call in input)"
            )
        text, images = _parts(item.output, where)
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
    for index, raw in enumerate(one_or_many(body.input, _user_item)):
        where = f"input[{index}]"
        match _item(raw, where):
            case InputMessage() as item:
                conversation.message(item, where)
            case InputFunctionCall() as item:
                conversation.function_call(item)
            case InputFunctionCallOutput() as item:
                conversation.function_output(item, where)
            case InputReasoning():
                pass  # a model's earlier thinking is not replayed into the prompt
            case InputItemReference():
                raise _bad(
                    f"{where}: item_reference needs stored responses, which Skulk does not "
                    "keep; send the item itself"
                )
    return tuple(conversation.messages)


def _tool(raw: dict[str, object], index: int) -> ToolSpec:
    kind = raw.get("type")
    if kind != "function":
        raise _bad(
            f"tools[{index}]: tool type {kind!r} is not supported; Skulk runs only function "
            "tools (the client executes them)",
            code="unsupported_tool",
        )
    with field_errors(f"tools[{index}]"):
        tool: FunctionTool = msgspec.convert(raw, FunctionTool)
    return tool_spec(tool.name, tool.description, tool.parameters, at=f"tools[{index}].parameters")


def _tool_choice(raw: str | dict[str, object] | None) -> ToolChoice | None:
    return tool_choice(raw, refusal=TOOL_CHOICE_REFUSAL)


def _format(text: dict[str, object] | None) -> ResponseFormat | None:
    raw = (text or {}).get("format")
    if raw is None:
        return None
    with field_errors("text.format"):
        format_: TextFormat = msgspec.convert(raw, TextFormat)
    match format_:
        case TextFormatText():
            return None
        case TextFormatJsonObject():
            return JsonObjectFormat()
        case TextFormatJsonSchema(schema=schema, name=name):
            return JsonSchemaFormat(schema=schema, name=optional_text(name))


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
        reasoning_effort=optional_text((body.reasoning or {}).get("effort")),
    )
