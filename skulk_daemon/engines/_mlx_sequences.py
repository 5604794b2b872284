"""What the MLX engine tracks per request, and how a request's sampling becomes MLX's."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

import mlx.core as mx
from mlx_lm.sample_utils import make_logits_processors, make_sampler

from skulk_core.chat.generation import (
    ERROR_CONTEXT_LENGTH_EXCEEDED,
    FinishChunk,
    FinishReason,
    GenerationRequest,
    GenerationStats,
    SamplingParams,
)
from skulk_core.ids import TaskId
from skulk_daemon.engines._text import TextStream

MAX_TOP_LOGPROBS: Final = 20
"""The same bound the llama.cpp engine enforces (the spec's ``top_logprobs`` range)."""

Sampler = Callable[[mx.array], mx.array]
LogitsProcessor = Callable[[mx.array, mx.array], mx.array]


def refusal(params: SamplingParams) -> str | None:
    """Why sampling parameters are refused before any work, or None."""
    if params.max_tokens < 1:
        return "max_tokens must be positive"
    if not 0 <= params.top_logprobs <= MAX_TOP_LOGPROBS:
        return f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}"
    return None


def token_budget(prompt: int, params: SamplingParams, window: int) -> int | str:
    """How many tokens the request may generate in a ``window``-token sequence, or why
    it does not fit (the llama.cpp engine's rule, so both engines refuse alike)."""
    room = window - prompt
    if room < 1:
        detail = f"the prompt is {prompt} tokens, which leaves no room to generate"
    elif params.strict_max_tokens and params.max_tokens > room:
        detail = (
            f"the prompt is {prompt} tokens and max_tokens is {params.max_tokens}, more than fit"
        )
    else:
        return min(params.max_tokens, room)
    return (
        f"{ERROR_CONTEXT_LENGTH_EXCEEDED}: {detail} in this model's {window}-token context window"
    )


def sampler_for(params: SamplingParams) -> Sampler:
    """MLX's sampler for ``params`` (greedy at ``temperature <= 0``)."""
    if params.temperature <= 0:
        return make_sampler(0.0)
    top_p = params.top_p if 0 < params.top_p < 1 else 0.0
    return make_sampler(params.temperature, top_p=top_p, min_p=params.min_p, top_k=params.top_k)


def processors_for(params: SamplingParams, matcher: object | None) -> list[LogitsProcessor]:
    """Penalties first, then the grammar's mask (last, so nothing re-allows a token)."""
    processors: list[LogitsProcessor] = make_logits_processors(
        repetition_penalty=params.repetition_penalty if params.repetition_penalty != 1.0 else None,
        repetition_context_size=params.repetition_context_size,
        presence_penalty=params.presence_penalty or None,
        frequency_penalty=params.frequency_penalty or None,
    )
    if matcher is not None:
        from skulk_daemon.engines._mlx_grammar import GrammarProcessor  # noqa: PLC0415

        processors.append(GrammarProcessor(matcher))  # type: ignore[arg-type]
    return processors


class Pending:
    """A submitted request, tokenized, waiting for the scheduler."""

    __slots__ = ("matcher", "max_tokens", "request", "submitted_at", "tokens")

    def __init__(
        self,
        request: GenerationRequest,
        tokens: list[int],
        max_tokens: int,
        submitted_at: float,
        matcher: object | None = None,
    ) -> None:
        self.request = request
        self.tokens = tokens
        self.max_tokens = max_tokens
        self.submitted_at = submitted_at
        self.matcher = matcher
        """The request's compiled grammar (an llguidance matcher), if it has one."""


class CancelOrder:
    __slots__ = ("task_id",)

    def __init__(self, task_id: TaskId) -> None:
        self.task_id = task_id


class WarmUp:
    """Decode one token and forget it; ``done`` is set when finished."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: str | None = None


class Sequence:
    """One request in the batch generator: its text stream and its timings."""

    def __init__(self, pending: Pending, in_flight: int, cached: int, detokenizer: object) -> None:
        self.pending = pending
        self.stream = TextStream(pending.request.sampling.stop)
        self.detokenizer = detokenizer
        self.in_flight = in_flight
        self.max_in_flight = in_flight
        self.cached = cached
        self.generated: list[int] = []
        self.admitted_at = time.perf_counter()
        self.first_token_at: float | None = None
        self.batched = False

    @property
    def task_id(self) -> TaskId:
        return self.pending.request.task_id

    def finish(self, reason: FinishReason, stop: str | None) -> FinishChunk:
        now = time.perf_counter()
        n_prompt = len(self.pending.tokens)
        first = self.first_token_at or now
        prefill_s = max(first - self.admitted_at, 1e-9)
        decode_s = max(now - first, 1e-9)
        n_out = len(self.generated)
        return FinishChunk(
            task_id=self.task_id,
            finish_reason=reason,
            prompt_tokens=n_prompt,
            completion_tokens=n_out,
            stop_sequence=stop,
            stats=GenerationStats(
                prompt_tps=(n_prompt - self.cached) / prefill_s,
                generation_tps=(n_out - 1) / decode_s if n_out > 1 else 0.0,
                prompt_tokens=n_prompt,
                generation_tokens=n_out,
                serving_batches=self.batched,
                in_flight_at_admission=self.in_flight,
                max_in_flight_at_admission=self.max_in_flight,
                time_to_first_token_ms=(first - self.pending.submitted_at) * 1000,
                cached_tokens=self.cached,
            ),
        )


def unserved_finish(pending: Pending) -> FinishChunk:
    """A request cancelled before it was admitted: nothing decoded."""
    n_prompt = len(pending.tokens)
    return FinishChunk(
        task_id=pending.request.task_id,
        finish_reason="cancelled",
        prompt_tokens=n_prompt,
        completion_tokens=0,
        stats=GenerationStats(
            prompt_tps=0.0,
            generation_tps=0.0,
            prompt_tokens=n_prompt,
            generation_tokens=0,
            serving_batches=False,
            in_flight_at_admission=0,
            time_to_first_token_ms=0.0,
        ),
    )
