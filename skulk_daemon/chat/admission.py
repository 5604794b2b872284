"""Admission: everything that can be refused before a request reaches a runner.

One path for every wire format: each adapter builds a :class:`ChatTask`, and
:func:`admit` validates it, picks the instance, renders the prompt and builds the
engine request. A refusal is an :class:`ApiError`; each format's controller
renders it in that format's error shape.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from skulk_core.chat.generation import GenerationRequest, SamplingParams
from skulk_core.chat.reasoning import ThinkingControls, prompt_opens_thinking, resolve_thinking
from skulk_core.chat.tools import ToolChoiceError, ToolOffer, resolve_tool_choice
from skulk_core.cluster.prefixes import prompt_fingerprint
from skulk_core.cluster.routing import select_instance
from skulk_core.ids import CommandId, InstanceId, ModelId, TaskId, new_command_id, new_task_id
from skulk_core.models.cards import ModelCard, ModelKind, ModelTask, served_kind
from skulk_core.models.listing import resolved_capabilities
from skulk_core.models.suggest import suggestion
from skulk_core.state.shards import Instance
from skulk_daemon.chat.grammars import (
    GrammarError,
    json_object_grammar,
    json_schema_grammar,
    tool_call_grammar,
)
from skulk_daemon.chat.prompt import PromptError, render_prompt
from skulk_daemon.chat.task import ChatTask, JsonObjectFormat, JsonSchemaFormat
from skulk_daemon.errors import ApiError, bad_request
from skulk_daemon.node.node import Node

DEFAULT_MAX_OUTPUT_TOKENS = 4096
MAX_STOP_SEQUENCES = 16
MAX_TOP_LOGPROBS = 20
MAX_IMAGE_BYTES = 32 * 1024 * 1024
"""Request-scoped encoded image media, summed over the request (the spec's bound)."""


def default_max_output_tokens(configured: int | None = None) -> int:
    """The shared default output budget: ``SKULK_MAX_OUTPUT_TOKENS`` (or the legacy
    ``SKULK_MAX_TOKENS``), else ``configured`` (``inference.max_output_tokens``), else
    :data:`DEFAULT_MAX_OUTPUT_TOKENS`."""
    for name in ("SKULK_MAX_OUTPUT_TOKENS", "SKULK_MAX_TOKENS"):
        raw = os.environ.get(name)
        if raw and raw.isdigit() and int(raw) > 0:
            return int(raw)
    return DEFAULT_MAX_OUTPUT_TOKENS if configured is None else configured


@dataclass(frozen=True, slots=True)
class Admitted:
    command_id: CommandId
    task_id: TaskId
    model: str
    instance_id: InstanceId
    card: ModelCard
    generation: GenerationRequest
    offer: ToolOffer
    starts_in_reasoning: bool
    include_usage: bool
    created: int


def _check_ranges(task: ChatTask) -> None:
    if task.temperature is not None and not 0 <= task.temperature <= 2:
        raise bad_request("temperature must be between 0 and 2")
    if task.top_p is not None and not 0 < task.top_p <= 1:
        raise bad_request("top_p must be greater than 0 and at most 1")
    if task.min_p is not None and not 0 <= task.min_p <= 1:
        raise bad_request("min_p must be between 0 and 1")
    if task.top_k is not None and task.top_k < 0:
        raise bad_request("top_k must not be negative")
    if task.top_logprobs is not None and not 0 <= task.top_logprobs <= MAX_TOP_LOGPROBS:
        raise bad_request(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}")
    if len(task.stop) > MAX_STOP_SEQUENCES:
        raise bad_request(f"at most {MAX_STOP_SEQUENCES} stop sequences are allowed")
    if any(not s for s in task.stop):
        raise bad_request("stop sequences must not be empty")


def _check_images(task: ChatTask, card: ModelCard) -> None:
    images = [image for message in task.messages for image in message.images]
    if not images:
        return
    if sum(image.encoded_bytes for image in images) > MAX_IMAGE_BYTES:
        raise ApiError(
            413,
            f"image input exceeds the {MAX_IMAGE_BYTES // (1024 * 1024)} MiB request bound",
            code="image_too_large",
        )
    if not resolved_capabilities(card).supports_vision:
        raise bad_request(f"model {task.model} does not accept images", code="vision_not_supported")
    # NOTE: the llama.cpp runner loads no multimodal projector yet, so even a card
    # that declares vision cannot see an image here. Refuse rather than drop it.
    raise bad_request(
        f"model {task.model} declares vision, but this node's llama.cpp runner cannot "
        "load its image projector yet",
        code="vision_not_supported",
    )


def _grammar(task: ChatTask, offer: ToolOffer) -> str | None:
    try:
        if offer.mode in ("required", "named"):
            return tool_call_grammar(offer.tools)
        match task.response_format:
            case None:
                return None
            case JsonObjectFormat():
                return json_object_grammar()
            case JsonSchemaFormat(schema=schema):
                return json_schema_grammar(schema)
    except GrammarError as exc:
        raise bad_request(str(exc), code="invalid_response_format") from None


def _thinking(task: ChatTask, card: ModelCard) -> ThinkingControls:
    caps = resolved_capabilities(card)
    return resolve_thinking(
        supports_thinking=caps.supports_thinking,
        supports_toggle=caps.supports_thinking_toggle,
        enable_thinking=task.enable_thinking,
        reasoning_effort=task.reasoning_effort,
    )


def _output_budget(node: Node, task: ChatTask, card: ModelCard) -> int:
    """The request's ``max_tokens``, else the default for the card's kind.

    NOTE: a base model has no end of turn to stop at, so without a bound it writes
    until the window fills (minutes on a CPU); it gets the configured, small default.
    """
    if task.max_tokens is not None:
        return task.max_tokens
    inference = node.config.inference
    if served_kind(card) == ModelKind.BASE:
        return inference.default_max_tokens
    return default_max_output_tokens(inference.max_output_tokens)


def _replicas(node: Node, model_id: ModelId) -> int:
    return sum(1 for i in node.state.instances.values() if i.shard_assignments.model_id == model_id)


def _check_fits(task: ChatTask, instance: Instance, card: ModelCard) -> None:
    _check_images(task, card)
    limit = instance.context_token_limit
    if task.max_tokens is not None and limit is not None and task.max_tokens >= limit:
        raise bad_request(
            f"context_length_exceeded: max_tokens {task.max_tokens} cannot fit the instance's "
            f"context limit of {limit} tokens (the prompt needs at least one)",
            code="context_length_exceeded",
        )


def _render(task: ChatTask, card: ModelCard, offer: ToolOffer) -> str:
    try:
        return render_prompt(
            card,
            task.messages,
            offer=offer,
            thinking=_thinking(task, card),
            extra=task.extra_template_args,
            raw=task.raw,
        )
    except PromptError as exc:
        raise bad_request(str(exc), code="invalid_messages") from None


def admit(node: Node, task: ChatTask, *, pinned: InstanceId | None = None) -> Admitted:
    """Validate ``task`` and build its engine request; raises :class:`ApiError`.

    ``pinned`` serves it on that instance only (the steward's own steps): it never
    falls back to a sibling, and a pin that is gone is refused as unavailable."""
    if not task.messages:
        raise bad_request("messages must not be empty")
    if task.max_tokens is not None and task.max_tokens <= 0:
        raise bad_request("max_tokens must be a positive integer")
    _check_ranges(task)
    try:
        offer = resolve_tool_choice(task.tools, task.tool_choice)
    except ToolChoiceError as exc:
        raise bad_request(str(exc), code="invalid_tool_choice") from None
    entry = node.catalog().get(ModelId(task.model))
    if entry is not None and ModelTask.TEXT_GENERATION not in entry.card.tasks:
        raise bad_request(f"model {task.model} does not support text generation (TextGeneration)")
    model_id = ModelId(task.model)
    if pinned is not None:
        instance = node.state.instances.get(pinned)
        if instance is None or instance.shard_assignments.model_id != model_id:
            raise ApiError(
                503, f"instance {pinned} is no longer placed", code="instance_unavailable"
            )
    else:
        instance = select_instance(node.state, model_id)
    if entry is None or instance is None:
        # A model the catalog does not know is most often a typo: name the close ones.
        typo = suggestion(task.model, node.catalog().by_id) if entry is None else ""
        raise ApiError(
            404, f"No instance found for model {task.model}{typo}", code="model_not_found"
        )
    # The instance serves with the card it was placed with, whatever the catalog says now.
    card = node.state.instance_cards.get(instance.instance_id, entry.card)
    _check_fits(task, instance, card)
    grammar = _grammar(task, offer)
    prompt = _render(task, card, offer)
    # With replicas, the one holding the longest prefix of this prompt serves it (one
    # instance needs no fingerprint: the hashes are only worth computing to choose).
    routed = None
    if pinned is None and _replicas(node, model_id) > 1:
        routed = select_instance(
            node.state, model_id, fingerprint=prompt_fingerprint(prompt), held=node.prefix_holders()
        )
    if routed is not None and routed.instance_id != instance.instance_id:
        routed_card = node.state.instance_cards.get(routed.instance_id, entry.card)
        _check_fits(task, routed, routed_card)
        if routed_card != card:
            card, prompt = routed_card, _render(task, routed_card, offer)
        instance = routed
    task_id = new_task_id()
    sampling = SamplingParams(
        temperature=1.0 if task.temperature is None else task.temperature,
        top_p=1.0 if task.top_p is None else task.top_p,
        top_k=task.top_k or 0,
        min_p=task.min_p or 0.0,
        seed=task.seed,
        stop=task.stop,
        max_tokens=_output_budget(node, task, card),
        strict_max_tokens=task.max_tokens is not None,
        frequency_penalty=task.frequency_penalty or 0.0,
        presence_penalty=task.presence_penalty or 0.0,
        repetition_penalty=task.repetition_penalty or 1.0,
        repetition_context_size=task.repetition_context_size or 64,
        logprobs=task.logprobs,
        top_logprobs=task.top_logprobs or 0,
        grammar=grammar,
    )
    return Admitted(
        command_id=new_command_id(),
        task_id=task_id,
        model=task.model,
        instance_id=instance.instance_id,
        card=card,
        generation=GenerationRequest(task_id=task_id, prompt=prompt, sampling=sampling),
        offer=offer,
        starts_in_reasoning=prompt_opens_thinking(prompt),
        include_usage=task.include_usage,
        created=int(time.time()),
    )
