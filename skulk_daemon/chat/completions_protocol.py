"""OpenAI (legacy) Completions wire types: ``POST /v1/completions``.

Decoded leniently, as OpenAI does (unknown fields are ignored); what msgspec cannot
check (a token-array prompt, ``suffix``, ranges) is refused in
``chat/completions_request.py``. Streamed chunks have the answer's own shape
(``object: "text_completion"``, ``choices[].text``), as OpenAI sends them.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from skulk_daemon.chat.openai_protocol import StreamOptions, Usage

PromptItem = str | int | list[int]
"""One element of a list prompt: a text, a token id, or a list of token ids."""


class CompletionRequest(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    prompt: str | list[PromptItem]
    """A text, or a list of texts (one choice each, ``n`` times); token arrays are
    refused (this node tokenizes on the runner)."""
    suffix: str | None = None
    """Fill-in-the-middle text after the completion; refused unless empty."""
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    """Unset: the shared default, or ``inference.default_max_tokens`` on a base card."""
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    repetition_context_size: int | None = None
    logprobs: int | None = None
    """The number of most likely tokens to list beside each sampled one (0 lists only
    the sampled token's log probability)."""
    echo: bool = False
    """The prompt is repeated at the start of each choice's text."""
    n: int | None = None
    best_of: int | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None


class CompletionLogprobs(msgspec.Struct, frozen=True, kw_only=True):
    """Per generated token: its text, log probability, the most likely alternatives
    and where it starts in the choice's ``text``."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


CompletionFinishReason = Literal["stop", "length"]


class CompletionChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: CompletionFinishReason | None
    """``None`` on every streamed chunk but a choice's last."""


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    """The answer (``stream: false``)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    system_fingerprint: str | None = None


class CompletionChunk(msgspec.Struct, frozen=True, kw_only=True):
    """One streamed event (``stream: true``): text for one choice, or, last of all with
    ``stream_options.include_usage``, no choices and the usage."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
