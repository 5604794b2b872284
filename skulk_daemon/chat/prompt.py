"""Render a conversation into the model's prompt text with the card's chat template.

Templates are Jinja (the Hugging Face convention llama.cpp follows), rendered in a
sandbox: a card is data, and its template must not reach the filesystem or Python
internals. Compiled templates are cached by their source text.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from skulk_core.cards import ModelCard
from skulk_daemon.chat.protocol import ChatMessage


class PromptError(ValueError):
    """The conversation cannot be rendered with this model's template."""


def _raise_exception(message: str) -> None:
    raise PromptError(message)


@functools.lru_cache(maxsize=32)
def _compile(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now(UTC).strftime(fmt)
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise PromptError(f"the model card's chat template is invalid: {exc}") from None


def _message_dict(message: ChatMessage) -> dict[str, Any]:
    role = "user" if message.role == "function" else message.role
    # Models trained before the "developer" role read it as a system message.
    if role == "developer":
        role = "system"
    item: dict[str, Any] = {"role": role, "content": message.text()}
    if message.name is not None:
        item["name"] = message.name
    if message.tool_calls is not None:
        item["tool_calls"] = message.tool_calls
    if message.tool_call_id is not None:
        item["tool_call_id"] = message.tool_call_id
    return item


def render_prompt(card: ModelCard, messages: list[ChatMessage]) -> str:
    """The prompt text for ``messages``, ending with the assistant's generation prompt."""
    if card.chat_template is None:
        # A card with no template is a plain completion model: concatenate the text.
        return "\n".join(message.text() for message in messages)
    template = _compile(card.chat_template)
    try:
        return template.render(
            messages=[_message_dict(m) for m in messages],
            add_generation_prompt=True,
            bos_token=card.bos_token or "",
            eos_token=card.eos_token or "",
        )
    except PromptError:
        raise
    except jinja2.TemplateError as exc:
        raise PromptError(f"the chat template could not render this conversation: {exc}") from None
