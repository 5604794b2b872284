"""Render a conversation into the model's prompt text with the card's chat template.

Templates are Jinja (the Hugging Face convention llama.cpp follows), rendered in a
sandbox: a card is data, and its template must not reach the filesystem or Python
internals. Compiled templates are cached by their source text.

A template is also bounded in time, loop steps and the size of everything it builds
(``chat/template_sandbox.py``), and the rendered prompt is at most
:data:`MAX_PROMPT_CHARS`. A card can come from any operator of the cluster, so a hostile
or broken template (a nested loop, a ``replace`` that multiplies a string) fails its own
request with a 400 instead of stalling the node.

Tools reach the model one of two ways. A template that knows about tools (it
reads the ``tools`` variable, as Qwen's, Llama 3's and Mistral's do) gets them,
and the history's calls and results, in the Hugging Face shape. Any other
template (Gemma 3's, a base model's) gets Skulk's tool prompt: the functions
described in the system turn, calls written as a bare JSON object, and tool
results folded into user turns, which the output parser reads back.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from skulk_core.chat.reasoning import ThinkingControls
from skulk_core.chat.tools import NO_TOOLS, ToolCall, ToolOffer, ToolSpec
from skulk_core.models.cards import ModelCard, ModelKind, served_kind
from skulk_daemon.chat.task import TaskMessage
from skulk_daemon.chat.template_budget import (
    MAX_PROMPT_CHARS,
    PromptError,
    check_deadline,
    render_budget,
)

if TYPE_CHECKING:
    import jinja2

__all__ = [
    "MAX_PROMPT_CHARS",
    "PromptError",
    "plain_prompt",
    "render_prompt",
    "template_supports_tools",
]

_USES_TOOLS = re.compile(r"\btools\b")


@functools.lru_cache(maxsize=32)
def _compile(source: str) -> jinja2.Template:
    # NOTE: Jinja loads with the first template compiled, not at the node's start (issue 43).
    from skulk_daemon.chat.template_sandbox import compile_template  # noqa: PLC0415

    return compile_template(source)


def template_supports_tools(card: ModelCard) -> bool:
    return (
        served_kind(card) == ModelKind.INSTRUCT
        and card.chat_template is not None
        and bool(_USES_TOOLS.search(card.chat_template))
    )


def plain_prompt(messages: Sequence[TaskMessage]) -> str:
    """The turns as plain text, with no template: what a base model (or a raw
    completion prompt, one turn of it) continues. Ollama's ``{{ .Prompt }}``.

    Each turn starts on a new line, but an assistant turn follows the text before it
    directly: the model wrote it as the continuation of exactly that text, so the
    next request's prompt repeats what was generated and its cells can be reused.
    """
    parts: list[str] = []
    for index, message in enumerate(messages):
        if index and message.role != "assistant":
            parts.append("\n")
        parts.append(message.content)
    prompt = "".join(parts)
    if len(prompt) > MAX_PROMPT_CHARS:
        raise PromptError(f"the prompt is longer than {MAX_PROMPT_CHARS} characters")
    return prompt


def _tool_json(tool: ToolSpec) -> dict[str, object]:
    function: dict[str, object] = {"name": tool.name, "parameters": tool.parameters or {}}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _call_json(call: ToolCall) -> dict[str, object]:
    try:
        arguments: object = json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        arguments = call.arguments
    return {"name": call.name, "arguments": arguments}


def tool_prompt(offer: ToolOffer) -> str:
    """Skulk's tool instructions, for templates that do not take tools themselves."""
    lines = [
        "You can call these functions. To call one, reply with only a JSON object of the "
        'form {"name": "<function name>", "arguments": {<arguments>}} and nothing else; '
        "to call several, reply with a JSON list of such objects. Otherwise reply normally.",
    ]
    if offer.mode == "required":
        lines.append("You must call one of these functions.")
    elif offer.mode == "named":
        lines.append(f"You must call the function {offer.tools[0].name}.")
    lines.append("Functions:")
    lines.extend(
        json.dumps(_tool_json(tool)["function"], ensure_ascii=False) for tool in offer.tools
    )
    return "\n".join(lines)


def _native_dict(message: TaskMessage) -> dict[str, object]:
    item: dict[str, object] = {"role": message.role, "content": message.content}
    if message.images:
        item["content"] = [{"type": "image"} for _ in message.images] + [
            {"type": "text", "text": message.content}
        ]
    if message.tool_calls:
        item["tool_calls"] = [
            {"id": call.id, "type": "function", "function": _call_json(call)}
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        item["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        item["name"] = message.name
    return item


def _folded(messages: Sequence[TaskMessage], offer: ToolOffer) -> list[TaskMessage]:
    """The conversation for a template without tool support: the tool prompt in the
    system turn, calls as JSON text, results as user turns, same-role runs merged
    (strict templates such as Gemma's require alternating turns)."""
    names = {call.id: call.name for m in messages for call in m.tool_calls}
    out: list[TaskMessage] = []
    for original in messages:
        message = original
        if original.role == "assistant" and original.tool_calls:
            calls = [_call_json(call) for call in original.tool_calls]
            text = json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)
            content = f"{original.content}\n{text}" if original.content else text
            message = TaskMessage(role="assistant", content=content)
        elif original.role == "tool":
            name = original.name or names.get(original.tool_call_id or "", "the function")
            message = TaskMessage(role="user", content=f"Result of {name}:\n{original.content}")
        if out and out[-1].role == message.role:
            merged = f"{out[-1].content}\n\n{message.content}"
            out[-1] = replace(out[-1], content=merged, images=out[-1].images + message.images)
        else:
            out.append(message)
    if offer.tools:
        preamble = tool_prompt(offer)
        if out and out[0].role == "system":
            out[0] = replace(out[0], content=f"{out[0].content}\n\n{preamble}")
        else:
            out.insert(0, TaskMessage(role="system", content=preamble))
    return out


def render_prompt(
    card: ModelCard,
    messages: Sequence[TaskMessage],
    *,
    offer: ToolOffer = NO_TOOLS,
    thinking: ThinkingControls | None = None,
    extra: dict[str, object] | None = None,
    raw: bool = False,
) -> str:
    """The prompt text for ``messages``, ending with the assistant's generation prompt.

    A base card (or ``raw``, a prompt sent as written) gets :func:`plain_prompt`.
    """
    native = template_supports_tools(card)
    conversation = list(messages) if native else _folded(messages, offer)
    if raw or card.chat_template is None or served_kind(card) == ModelKind.BASE:
        return plain_prompt(conversation)
    template = _compile(card.chat_template)
    import jinja2  # noqa: PLC0415 (loaded by the compile above)

    variables: dict[str, object] = dict(extra or {})
    if native and offer.tools:
        variables["tools"] = [_tool_json(tool) for tool in offer.tools]
    if thinking is not None and thinking.enable_thinking is not None:
        variables["enable_thinking"] = thinking.enable_thinking
    if thinking is not None and thinking.reasoning_effort is not None:
        variables["reasoning_effort"] = thinking.reasoning_effort
    try:
        with render_budget():
            return _bounded_render(
                template,
                messages=[_native_dict(m) for m in conversation],
                add_generation_prompt=True,
                bos_token=card.bos_token or "",
                eos_token=card.eos_token or "",
                **variables,
            )
    except PromptError:
        raise
    except RecursionError:
        raise PromptError("the chat template recursed too deeply") from None
    except jinja2.TemplateError as exc:
        raise PromptError(f"the chat template could not render this conversation: {exc}") from None


def _bounded_render(template: jinja2.Template, **variables: object) -> str:
    """The template's output, streamed so that its size and time are checked as it grows."""
    parts: list[str] = []
    size = 0
    for part in template.generate(**variables):
        size += len(part)
        if size > MAX_PROMPT_CHARS:
            raise PromptError(f"the chat template rendered more than {MAX_PROMPT_CHARS} characters")
        parts.append(part)
        check_deadline()
    return "".join(parts)
