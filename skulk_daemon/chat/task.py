"""The one internal chat task every wire format converges on.

Chat Completions, Responses, Claude Messages and Ollama each decode their own
body and translate it into a :class:`ChatTask`; from there admission, prompt
rendering, dispatch and turn parsing are shared, so validation and behaviour are
the same whichever format a client speaks. Only the response shaping differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from skulk_core.chat.tools import ToolCall, ToolChoice, ToolSpec

TaskRole = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ImageInput:
    """One request-scoped image: decoded bytes, never stored or replicated."""

    media_type: str
    data: bytes
    encoded_bytes: int
    """Size as the client sent it (base64): what the 32 MiB request bound counts."""


@dataclass(frozen=True, slots=True)
class TaskMessage:
    role: TaskRole
    content: str = ""
    images: tuple[ImageInput, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    """The tool's name on a ``tool`` message (when the format carries it)."""


@dataclass(frozen=True, slots=True)
class JsonObjectFormat:
    """Any JSON object."""


@dataclass(frozen=True, slots=True)
class JsonSchemaFormat:
    schema: dict[str, Any]
    name: str | None = None


ResponseFormat = JsonObjectFormat | JsonSchemaFormat


@dataclass(frozen=True, slots=True)
class ChatTask:
    """A format-neutral chat request. ``None`` means the client did not say."""

    model: str
    messages: tuple[TaskMessage, ...]
    max_tokens: int | None = None
    """An explicit output budget; ``None`` takes the shared default (not strict)."""
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    repetition_context_size: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice | None = None
    response_format: ResponseFormat | None = None
    enable_thinking: bool | None = None
    reasoning_effort: str | None = None
    include_usage: bool = False
    raw: bool = False
    """The messages' text is the prompt as written, with no chat template, whatever
    the card (``/v1/completions``, Ollama's ``raw`` generate: one user message)."""
    extra_template_args: dict[str, Any] = field(default_factory=dict)


def as_history(messages: tuple[TaskMessage, ...]) -> tuple[TaskMessage, ...]:
    """User and assistant turns with content, as text: a steward turn's conversation
    (client system messages and tool turns are not part of it)."""
    return tuple(
        TaskMessage(role=m.role, content=m.content)
        for m in messages
        if m.role in ("user", "assistant") and m.content.strip()
    )
