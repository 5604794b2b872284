"""Ollama ``/api/chat`` and ``/api/generate`` bodies → :class:`ChatTask`.

Ollama's Go server ignores fields it does not know, and its clients send many
(``num_gpu``, ``mirostat``, ``keep_alive`` ...), so unknown fields are accepted
here too. What cannot be honoured and would silently change the output (a
``suffix`` for fill-in-the-middle, a per-request ``template``, a prior
``context``) is refused instead of dropped.
"""

from __future__ import annotations

import dataclasses
from typing import Final, Literal

import msgspec

from skulk_core.chat.tools import ToolCall, ToolSpec
from skulk_core.placement.keep_alive import KeepAliveError, parse_keep_alive
from skulk_daemon.chat.images import image_from_base64
from skulk_daemon.chat.openai_protocol import FunctionTool
from skulk_daemon.chat.openai_request import tool_spec_from_openai
from skulk_daemon.chat.request_types import json_text, one_or_many, optional_text
from skulk_daemon.chat.task import (
    ChatTask,
    ImageInput,
    JsonObjectFormat,
    JsonSchemaFormat,
    ResponseFormat,
    TaskMessage,
)
from skulk_daemon.errors import bad_request as _bad
from skulk_daemon.errors import decode_json

NUM_PREDICT_DEFAULT: Final = -1
"""Ollama's "no limit" (here: the shared default output budget)."""
THINK_LEVELS: Final = ("low", "medium", "high")


class OllamaOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The sampling options Skulk maps; the rest (``num_ctx``, ``num_gpu`` ...) are
    runtime settings of Ollama's own loader and are ignored."""

    num_predict: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    stop: list[str] | str | None = None
    seed: int | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


class OllamaFunctionCall(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    arguments: str | dict[str, object] = {}
    """An object (Ollama's form) or JSON text (OpenAI's)."""


class OllamaToolCall(msgspec.Struct, frozen=True, kw_only=True):
    id: object = None
    """A string; any other value reads as no id."""
    function: OllamaFunctionCall


class OllamaMessage(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    images: list[str] | None = None
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    thinking: str | None = None


class _Common(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    format: str | dict[str, object] | None = None
    options: OllamaOptions | None = None
    think: bool | str | None = None
    stream: bool = True
    keep_alive: str | float | None = None
    logprobs: bool = False
    top_logprobs: int | None = None


class OllamaChatRequest(_Common, frozen=True, kw_only=True):
    messages: list[OllamaMessage] = []
    tools: list[FunctionTool] | None = None


class OllamaGenerateRequest(_Common, frozen=True, kw_only=True):
    prompt: str = ""
    system: str | None = None
    images: list[str] | None = None
    raw: bool = False
    suffix: str | None = None
    template: str | None = None
    context: list[int] | None = None


class OllamaShowRequest(msgspec.Struct, frozen=True, kw_only=True):
    name: str | None = None
    model: str | None = None
    verbose: bool = False


_chat_decoder = msgspec.json.Decoder(OllamaChatRequest)
_generate_decoder = msgspec.json.Decoder(OllamaGenerateRequest)
_show_decoder = msgspec.json.Decoder(OllamaShowRequest)


def decode_chat(raw: bytes) -> OllamaChatRequest:
    return decode_json(raw, _chat_decoder)


def decode_generate(raw: bytes) -> OllamaGenerateRequest:
    return decode_json(raw, _generate_decoder)


def decode_show(raw: bytes) -> OllamaShowRequest:
    return decode_json(raw or b"{}", _show_decoder)


def _images(raw: list[str] | None) -> tuple[ImageInput, ...]:
    # Ollama images are bare base64 with no media type; the bytes say what they are.
    return tuple(image_from_base64(data) for data in raw or ())


def _tool_call(call: OllamaToolCall) -> ToolCall:
    function = call.function
    return ToolCall(
        id=optional_text(call.id) or "", name=function.name, arguments=json_text(function.arguments)
    )


def _message(message: OllamaMessage) -> TaskMessage:
    return TaskMessage(
        role=message.role,
        content=message.content or "",
        images=_images(message.images),
        tool_calls=tuple(_tool_call(call) for call in message.tool_calls or ()),
        tool_call_id=message.tool_call_id,
        name=message.tool_name if message.role == "tool" else None,
    )


def response_format(raw: str | dict[str, object] | None) -> ResponseFormat | None:
    """``"json"`` is any JSON object; an object is a JSON Schema; ``""`` is plain text."""
    match raw:
        case None | "":
            return None
        case "json":
            return JsonObjectFormat()
        case dict():
            return JsonSchemaFormat(schema=raw)
    raise _bad('format must be "json" or a JSON Schema object', code="invalid_response_format")


def _thinking(raw: bool | str | None) -> tuple[bool | None, str | None]:
    """``think`` → (enable_thinking, reasoning_effort)."""
    match raw:
        case None | bool():
            return raw, None
        case str() if raw.lower() in THINK_LEVELS:
            return True, raw.lower()
    raise _bad(f"think must be true, false or one of {', '.join(THINK_LEVELS)}")


def _max_tokens(num_predict: int | None) -> int | None:
    if num_predict is None or num_predict == NUM_PREDICT_DEFAULT:
        return None
    if num_predict <= 0:
        raise _bad(
            f"options.num_predict must be a positive integer or {NUM_PREDICT_DEFAULT}, "
            f"not {num_predict}"
        )
    return num_predict


def _task(
    body: _Common,
    messages: tuple[TaskMessage, ...],
    *,
    model: str,
    tools: tuple[ToolSpec, ...] = (),
) -> ChatTask:
    options = body.options or OllamaOptions()
    enable_thinking, effort = _thinking(body.think)
    return ChatTask(
        model=model,
        messages=messages,
        max_tokens=_max_tokens(options.num_predict),
        temperature=options.temperature,
        top_p=options.top_p,
        top_k=options.top_k,
        min_p=options.min_p,
        # Ollama reads a negative seed as "random".
        seed=options.seed if options.seed is not None and options.seed >= 0 else None,
        stop=one_or_many(options.stop, str),
        frequency_penalty=options.frequency_penalty,
        presence_penalty=options.presence_penalty,
        repetition_penalty=options.repeat_penalty,
        # 0 disables the window in Ollama and -1 means the whole context: neither is
        # a window size, so both keep the engine's default.
        repetition_context_size=(
            options.repeat_last_n if options.repeat_last_n and options.repeat_last_n > 0 else None
        ),
        logprobs=body.logprobs or bool(body.top_logprobs),
        top_logprobs=body.top_logprobs,
        tools=tools,
        response_format=response_format(body.format),
        enable_thinking=enable_thinking,
        reasoning_effort=effort,
    )


def chat_to_task(body: OllamaChatRequest, model: str) -> ChatTask:
    """``model`` is the catalog id ``body.model`` resolved to."""
    messages = tuple(_message(m) for m in body.messages)
    tools = tuple(tool_spec_from_openai(t, i) for i, t in enumerate(body.tools or ()))
    return _task(body, messages, model=model, tools=tools)


def keep_alive(body: _Common) -> float | msgspec.UnsetType | None:
    """The request's ``keep_alive`` in seconds (``None``: forever); unset when absent.

    It applies to instances placed on demand (``inference.load_on_demand``): they stay
    that long once idle, and ``0`` unloads them once the request is answered.
    """
    if body.keep_alive is None:
        return msgspec.UNSET
    try:
        return parse_keep_alive(body.keep_alive)
    except KeepAliveError as exc:
        raise _bad(str(exc), code="invalid_keep_alive") from None


def is_load_probe(body: OllamaGenerateRequest) -> bool:
    """An empty generate: Ollama clients send it to load a model, and get no text."""
    return not body.prompt and not body.system and not body.images


def generate_to_task(body: OllamaGenerateRequest, model: str) -> ChatTask:
    if body.suffix:
        raise _bad("suffix (fill-in-the-middle) is not supported", code="unsupported_field")
    if body.template:
        raise _bad("per-request template overrides are not supported", code="unsupported_field")
    if body.context:
        raise _bad(
            "context (a prior response's tokens) is not supported; use /api/chat with the "
            "conversation's messages",
            code="unsupported_field",
        )
    messages: list[TaskMessage] = []
    if body.system and not body.raw:
        messages.append(TaskMessage(role="system", content=body.system))
    messages.append(TaskMessage(role="user", content=body.prompt, images=_images(body.images)))
    # ``raw``: the prompt goes to the model as written, with no chat template.
    return dataclasses.replace(_task(body, tuple(messages), model=model), raw=body.raw)
