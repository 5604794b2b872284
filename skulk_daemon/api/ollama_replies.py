"""The shapes of Ollama's chat and generate replies, for the OpenAPI document.

:mod:`skulk_daemon.chat.ollama_wire` writes these objects as dicts; the Structs here
say what those dicts hold (each NDJSON line, or the one JSON object of
``stream: false``), and the contract test holds the two together.
"""

from __future__ import annotations

from typing import Literal

import msgspec


class OllamaTopLogprob(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    logprob: float
    bytes: list[int]


class OllamaLogprob(OllamaTopLogprob, frozen=True, kw_only=True):
    top_logprobs: list[OllamaTopLogprob]


class OllamaToolFunction(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    name: str
    arguments: dict[str, object]


class OllamaToolCall(msgspec.Struct, frozen=True, kw_only=True):
    id: str | None = None
    function: OllamaToolFunction


class OllamaReplyMessage(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["assistant"]
    content: str
    thinking: str | None = None
    tool_calls: list[OllamaToolCall] | None = None


class _Reply(msgspec.Struct, frozen=True, kw_only=True):
    """What every line shares; the ``done: true`` line adds the reason, the token
    counts and the durations (nanoseconds), except for a load probe's answer."""

    model: str
    """The model as the request named it."""
    created_at: str
    done: bool
    done_reason: Literal["stop", "length", "load"] | None = None
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_duration: int | None = None
    eval_duration: int | None = None
    prompt_eval_count: int | None = None
    eval_count: int | None = None
    logprobs: list[OllamaLogprob] | None = None


class OllamaChatReply(_Reply, frozen=True, kw_only=True):
    message: OllamaReplyMessage


class OllamaGenerateReply(_Reply, frozen=True, kw_only=True):
    response: str
    thinking: str | None = None
    context: list[int] | None = None
