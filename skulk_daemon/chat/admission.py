"""Admission: everything that can be refused before a request reaches a runner.

One path for every wire format (Chat Completions today; Responses, Claude and
Ollama adapters produce the same :class:`Admitted`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from skulk_core.cards import ModelCard, ModelTask
from skulk_core.ids import CommandId, InstanceId, ModelId, TaskId, new_command_id, new_task_id
from skulk_core.routing import select_instance
from skulk_daemon.api.errors import ApiError
from skulk_daemon.chat.prompt import PromptError, render_prompt
from skulk_daemon.chat.protocol import ChatCompletionRequest
from skulk_daemon.engines.base import GenerationRequest, SamplingParams
from skulk_daemon.node import Node

DEFAULT_MAX_OUTPUT_TOKENS = 4096
MAX_STOP_SEQUENCES = 16
MAX_TOP_LOGPROBS = 20


def default_max_output_tokens() -> int:
    """The shared default output budget.

    ``SKULK_MAX_OUTPUT_TOKENS`` (or the legacy ``SKULK_MAX_TOKENS``) overrides it.
    """
    for name in ("SKULK_MAX_OUTPUT_TOKENS", "SKULK_MAX_TOKENS"):
        raw = os.environ.get(name)
        if raw and raw.isdigit() and int(raw) > 0:
            return int(raw)
    return DEFAULT_MAX_OUTPUT_TOKENS


@dataclass(frozen=True, slots=True)
class Admitted:
    command_id: CommandId
    task_id: TaskId
    model: str
    instance_id: InstanceId
    card: ModelCard
    generation: GenerationRequest
    include_usage: bool
    created: int


def _bad(message: str, code: str = "invalid_request") -> ApiError:
    return ApiError(400, message, code=code)


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    if len(stops) > MAX_STOP_SEQUENCES:
        raise _bad(f"at most {MAX_STOP_SEQUENCES} stop sequences are allowed")
    if any(not s for s in stops):
        raise _bad("stop sequences must not be empty")
    return stops


def _check_ranges(body: ChatCompletionRequest) -> None:
    if body.temperature is not None and not 0 <= body.temperature <= 2:
        raise _bad("temperature must be between 0 and 2")
    if body.top_p is not None and not 0 < body.top_p <= 1:
        raise _bad("top_p must be greater than 0 and at most 1")
    if body.min_p is not None and not 0 <= body.min_p <= 1:
        raise _bad("min_p must be between 0 and 1")
    if body.top_k is not None and body.top_k < 0:
        raise _bad("top_k must not be negative")
    if body.top_logprobs is not None and not 0 <= body.top_logprobs <= MAX_TOP_LOGPROBS:
        raise _bad(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}")
    if body.n is not None and body.n != 1:
        raise _bad("only n=1 is supported")


def admit(node: Node, body: ChatCompletionRequest) -> Admitted:
    if not body.messages:
        raise _bad("messages must not be empty")
    max_tokens = body.max_completion_tokens or body.max_tokens
    explicit = body.max_tokens is not None or body.max_completion_tokens is not None
    if explicit and (max_tokens is None or max_tokens <= 0):
        raise _bad("max_tokens must be a positive integer")
    _check_ranges(body)
    entry = node.catalog().get(ModelId(body.model))
    if entry is not None and ModelTask.TEXT_GENERATION not in entry.card.tasks:
        raise _bad(f"model {body.model} does not support text generation (TextGeneration)")
    instance = select_instance(node.state, ModelId(body.model))
    if entry is None or instance is None:
        raise ApiError(404, f"No instance found for model {body.model}", code="model_not_found")
    card = entry.card
    if (
        any(
            isinstance(m.content, list) and any(p.type == "image_url" for p in m.content)
            for m in body.messages
        )
        and "vision" not in card.capabilities
    ):
        raise _bad(f"model {body.model} does not accept images", code="vision_not_supported")
    limit = instance.context_token_limit
    if explicit and max_tokens is not None and limit is not None and max_tokens >= limit:
        raise _bad(
            f"context_length_exceeded: max_tokens {max_tokens} cannot fit the instance's "
            f"context limit of {limit} tokens (the prompt needs at least one)",
            code="context_length_exceeded",
        )
    try:
        prompt = render_prompt(card, body.messages)
    except PromptError as exc:
        raise _bad(str(exc), code="invalid_messages") from None
    task_id = new_task_id()
    sampling = SamplingParams(
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=body.top_k or 0,
        min_p=body.min_p or 0.0,
        seed=body.seed,
        stop=_stops(body.stop),
        max_tokens=max_tokens if explicit and max_tokens else default_max_output_tokens(),
        strict_max_tokens=explicit,
        frequency_penalty=body.frequency_penalty or 0.0,
        presence_penalty=body.presence_penalty or 0.0,
        repetition_penalty=body.repetition_penalty or 1.0,
        repetition_context_size=body.repetition_context_size or 64,
        logprobs=bool(body.logprobs),
        top_logprobs=body.top_logprobs or 0,
    )
    return Admitted(
        command_id=new_command_id(),
        task_id=task_id,
        model=body.model,
        instance_id=instance.instance_id,
        card=card,
        generation=GenerationRequest(task_id=task_id, prompt=prompt, sampling=sampling),
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        created=int(time.time()),
    )
