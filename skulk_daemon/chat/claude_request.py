"""Anthropic Claude Messages request → :class:`ChatTask` (the shared internal task).

The body is decoded into typed Structs (content blocks are tagged unions on their
``type``), so a malformed body is refused with a message naming the field.
Unknown top-level fields are ignored rather than refused: Anthropic keeps adding
request fields (``service_tier``, ``container``, ``cache_control``...) that change
nothing here, and a client built for a newer API should still be served.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from skulk_core.chat.tools import NamedChoice, ToolCall, ToolChoice, ToolSpec
from skulk_daemon.chat.images import image_from_base64
from skulk_daemon.chat.request_types import one_or_many
from skulk_daemon.chat.task import ChatTask, ImageInput, JsonSchemaFormat, TaskMessage
from skulk_daemon.errors import ApiError, decode_json
from skulk_daemon.errors import bad_request as _bad

BLOCK_SEPARATOR = "\n\n"
"""Joins the text blocks of one turn (and of ``system``): blocks are paragraphs."""

TOOL_ERROR_PREFIX = "Error: "
"""Marks a ``tool_result`` with ``is_error`` in the prompt; the model sees no flag."""


class TextBlock(msgspec.Struct, frozen=True, kw_only=True, tag="text"):
    text: str


class Base64Source(msgspec.Struct, frozen=True, kw_only=True, tag="base64"):
    media_type: str
    data: str


class UrlSource(msgspec.Struct, frozen=True, kw_only=True, tag="url"):
    url: str


class ImageBlock(msgspec.Struct, frozen=True, kw_only=True, tag="image"):
    source: Base64Source | UrlSource


class ToolUseBlock(msgspec.Struct, frozen=True, kw_only=True, tag="tool_use"):
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(msgspec.Struct, frozen=True, kw_only=True, tag="tool_result"):
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock] | None = None
    is_error: bool = False


class ThinkingBlock(msgspec.Struct, frozen=True, kw_only=True, tag="thinking"):
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(msgspec.Struct, frozen=True, kw_only=True, tag="redacted_thinking"):
    data: str


# Content blocks: fields Skulk does not act on (cache_control, citations) are ignored.
ContentBlock = (
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock
)


class InputMessage(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class ToolDefinition(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    """``custom`` (or absent) for a client tool; a server tool (``web_search_...``) is
    refused: Skulk runs no tools itself."""


class ToolChoiceAuto(msgspec.Struct, frozen=True, kw_only=True, tag="auto"):
    disable_parallel_tool_use: bool = False


class ToolChoiceAny(msgspec.Struct, frozen=True, kw_only=True, tag="any"):
    disable_parallel_tool_use: bool = False


class ToolChoiceTool(msgspec.Struct, frozen=True, kw_only=True, tag="tool"):
    name: str
    disable_parallel_tool_use: bool = False


class ToolChoiceNone(msgspec.Struct, frozen=True, kw_only=True, tag="none"):
    pass


ClaudeToolChoice = ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone


class _Thinking(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    budget_tokens: int | None = None
    display: str | None = None


class ThinkingEnabled(_Thinking, frozen=True, kw_only=True, tag="enabled"):
    budget_tokens: Annotated[int, msgspec.Meta(ge=1)]
    """Required and positive. Not enforced as a separate budget: the engine has none,
    and ``max_tokens`` bounds thinking and answer alike."""


class ThinkingDisabled(_Thinking, frozen=True, kw_only=True, tag="disabled"):
    pass


class ThinkingAdaptive(_Thinking, frozen=True, kw_only=True, tag="adaptive"):
    pass


class ThinkingBetweenTools(_Thinking, frozen=True, kw_only=True, tag="between_tools"):
    pass


ThinkingConfig = ThinkingEnabled | ThinkingDisabled | ThinkingAdaptive | ThinkingBetweenTools


class OutputFormat(msgspec.Struct, frozen=True, kw_only=True):
    type: Literal["json_schema"]
    schema: dict[str, Any]


class OutputConfig(msgspec.Struct, frozen=True, kw_only=True):
    effort: str | None = None
    format: OutputFormat | None = None


class MessagesRequest(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    messages: list[InputMessage]
    max_tokens: int
    """Required, as in Anthropic's API: a missing budget is a 400, not a default."""
    system: str | list[TextBlock] | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop_sequences: list[str] | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: ClaudeToolChoice | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None
    metadata: dict[str, Any] | None = None


_decoder = msgspec.json.Decoder(MessagesRequest)
_json = msgspec.json.Encoder()


def decode_messages_request(raw: bytes) -> MessagesRequest:
    return decode_json(raw, _decoder)


def _image(block: ImageBlock, where: str) -> ImageInput:
    match block.source:
        case Base64Source(media_type=media_type, data=data):
            return image_from_base64(data, media_type)
        case UrlSource():
            raise ApiError(
                400,
                f"{where}: image url sources are not accepted; send the image as a base64 source",
                code="invalid_image",
            )


def _text_block(text: str) -> TextBlock:
    return TextBlock(text=text)


def _tool_result(block: ToolResultBlock, name: str | None, where: str) -> TaskMessage:
    texts: list[str] = []
    images: list[ImageInput] = []
    for n, part in enumerate(one_or_many(block.content, _text_block)):
        match part:
            case TextBlock(text=text):
                texts.append(text)
            case ImageBlock():
                images.append(_image(part, f"{where}.content[{n}]"))
    text = BLOCK_SEPARATOR.join(texts)
    return TaskMessage(
        role="tool",
        content=f"{TOOL_ERROR_PREFIX}{text}" if block.is_error else text,
        images=tuple(images),
        tool_call_id=block.tool_use_id,
        name=name,
    )


def _user(
    blocks: tuple[ContentBlock, ...], index: int, tool_names: dict[str, str]
) -> list[TaskMessage]:
    """A user turn: its tool results become ``tool`` messages, then whatever text and
    images it carries become one user message after them."""
    results: list[TaskMessage] = []
    texts: list[str] = []
    images: list[ImageInput] = []
    for n, block in enumerate(blocks):
        where = f"messages[{index}].content[{n}]"
        match block:
            case TextBlock(text=text):
                texts.append(text)
            case ImageBlock():
                images.append(_image(block, where))
            case ToolResultBlock(tool_use_id=tool_use_id):
                results.append(_tool_result(block, tool_names.get(tool_use_id), where))
            case ToolUseBlock() | ThinkingBlock() | RedactedThinkingBlock():
                raise _bad(f"{where}: a {block_type(block)} block belongs in an assistant turn")
    if texts or images or not results:
        text = BLOCK_SEPARATOR.join(texts)
        results.append(TaskMessage(role="user", content=text, images=tuple(images)))
    return results


def _assistant(blocks: tuple[ContentBlock, ...], index: int) -> TaskMessage:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for n, block in enumerate(blocks):
        match block:
            case TextBlock(text=text):
                texts.append(text)
            case ToolUseBlock(id=id_, name=name, input=input_):
                calls.append(ToolCall(id=id_, name=name, arguments=_json.encode(input_).decode()))
            case ThinkingBlock() | RedactedThinkingBlock():
                # Earlier reasoning is not replayed: chat templates drop it from history.
                continue
            case ImageBlock() | ToolResultBlock():
                raise _bad(
                    f"messages[{index}].content[{n}]: a {block_type(block)} block belongs "
                    "in a user turn"
                )
    return TaskMessage(
        role="assistant", content=BLOCK_SEPARATOR.join(texts), tool_calls=tuple(calls)
    )


def block_type(block: ContentBlock) -> str:
    tag = type(block).__struct_config__.tag
    return str(tag)


def _messages(body: MessagesRequest) -> tuple[TaskMessage, ...]:
    out: list[TaskMessage] = []
    if body.system:  # an empty string or list is no system turn
        system = one_or_many(body.system, _text_block)
        out.append(TaskMessage(role="system", content=BLOCK_SEPARATOR.join(b.text for b in system)))
    tool_names: dict[str, str] = {}
    for index, message in enumerate(body.messages):
        blocks = one_or_many(message.content, _text_block)
        if message.role == "assistant":
            assistant = _assistant(blocks, index)
            tool_names.update((call.id, call.name) for call in assistant.tool_calls)
            out.append(assistant)
        else:
            out.extend(_user(blocks, index, tool_names))
    return tuple(out)


def _tools(body: MessagesRequest) -> tuple[ToolSpec, ...]:
    return tuple(
        ToolSpec(name=tool.name, description=tool.description, parameters=tool.input_schema)
        for tool in body.tools or ()
    )


def _tool_choice(choice: ClaudeToolChoice | None) -> ToolChoice | None:
    # NOTE: disable_parallel_tool_use needs nothing: a forced call's grammar admits
    # exactly one call, and under "auto" the model writes what it writes.
    match choice:
        case None:
            return None
        case ToolChoiceAuto():
            return "auto"
        case ToolChoiceAny():
            return "required"
        case ToolChoiceNone():
            return "none"
        case ToolChoiceTool(name=name):
            return NamedChoice(name)


def _thinking(config: ThinkingConfig | None) -> bool | None:
    """Whether to think."""
    match config:
        case None:
            return None
        case ThinkingDisabled():
            return False
        case ThinkingEnabled() | ThinkingAdaptive() | ThinkingBetweenTools():
            return True


def to_task(body: MessagesRequest) -> ChatTask:
    output = body.output_config
    return ChatTask(
        model=body.model,
        messages=_messages(body),
        max_tokens=body.max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        stop=tuple(body.stop_sequences or ()),
        tools=_tools(body),
        tool_choice=_tool_choice(body.tool_choice),
        response_format=(
            JsonSchemaFormat(schema=output.format.schema)
            if output is not None and output.format is not None
            else None
        ),
        enable_thinking=_thinking(body.thinking),
        reasoning_effort=output.effort if output is not None else None,
        # Anthropic always reports usage, in message_start and message_delta.
        include_usage=True,
    )
