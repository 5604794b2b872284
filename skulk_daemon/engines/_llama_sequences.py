"""The llama.cpp engine's bookkeeping: what its inbox holds and what a slot tracks."""

from __future__ import annotations

import threading
import time

from skulk_core.chat.generation import (
    ERROR_CONTEXT_LENGTH_EXCEEDED,
    ErrorChunk,
    FinishChunk,
    FinishReason,
    GenerationRequest,
    GenerationStats,
)
from skulk_core.ids import TaskId
from skulk_daemon.engines._llama_draw import Draw
from skulk_daemon.engines._llama_sampling import (
    MAX_TOP_LOGPROBS,
    SamplerHandle,
    is_plain_greedy,
)
from skulk_daemon.engines._text import TextStream


class Pending:
    """A submitted request, tokenized, waiting for a slot."""

    __slots__ = ("max_tokens", "request", "submitted_at", "tokens")

    def __init__(
        self, request: GenerationRequest, tokens: list[int], max_tokens: int, submitted_at: float
    ) -> None:
        self.request = request
        self.tokens = tokens
        self.max_tokens = max_tokens
        self.submitted_at = submitted_at


class CancelOrder:
    __slots__ = ("task_id",)

    def __init__(self, task_id: TaskId) -> None:
        self.task_id = task_id


class WarmUp:
    """Asks the scheduler thread (the context's only user) for one scratch decode."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: str | None = None


InboxItem = Pending | CancelOrder | WarmUp


class Sequence:
    """A request holding a slot (a llama.cpp sequence id)."""

    __slots__ = (
        "batched",
        "cached_exact",
        "cached_tokens",
        "chain",
        "draw",
        "first_token_at",
        "grammar",
        "greedy",
        "in_flight_at_admission",
        "logprobs",
        "max_in_flight",
        "max_tokens",
        "n_generated",
        "next_token",
        "pending",
        "pos",
        "prefill_s",
        "reply",
        "seq_id",
        "task_id",
        "text",
        "top_logprobs",
    )

    def __init__(
        self,
        pending: Pending,
        seq_id: int,
        chain: SamplerHandle | None,
        grammar: SamplerHandle | None,
        in_flight: int,
        *,
        cached_tokens: int = 0,
        cached_exact: int = 0,
    ) -> None:
        """``in_flight``: sequences holding a slot with this one admitted, itself
        included; ``cached_tokens``: prompt tokens whose cells the slot kept, the
        first ``cached_exact`` of them exact (see ``_llama_slots``)."""
        params = pending.request.sampling
        self.pending = pending
        self.task_id = pending.request.task_id
        self.seq_id = seq_id
        self.chain = chain
        self.greedy = is_plain_greedy(params)
        """An argmax samples it (``chain`` and ``draw`` are then None)."""
        self.draw = Draw(params) if chain is None and not self.greedy else None
        """Samples a plain chain in numpy (see ``_llama_draw``); ``chain`` is then None."""
        self.grammar = grammar
        self.max_tokens = pending.max_tokens
        self.text = TextStream(params.stop)
        self.logprobs = params.logprobs or params.top_logprobs > 0
        self.top_logprobs = params.top_logprobs
        self.in_flight_at_admission = in_flight
        self.max_in_flight = in_flight
        self.cached_tokens = cached_tokens
        self.cached_exact = cached_exact
        self.first_token_at = 0.0
        self.prefill_s = 0.0
        self.pos = 0
        self.next_token = -1
        self.n_generated = 0
        self.reply: list[int] = []
        """Generated tokens a decode step has written cells for, in order (a sampled
        request's next turn may reuse them)."""
        self.batched = False
        """Whether a decode step carried this sequence together with others."""

    def finish_chunk(self, reason: FinishReason) -> FinishChunk:
        n_prompt = len(self.pending.tokens)
        generated = self.n_generated
        decoding = time.perf_counter() - self.first_token_at if generated > 1 else 0.0
        ttft = self.first_token_at - self.pending.submitted_at if generated else 0.0
        return FinishChunk(
            task_id=self.task_id,
            finish_reason=reason,
            prompt_tokens=n_prompt,
            completion_tokens=generated,
            stop_sequence=self.text.matched if reason == "stop" else None,
            stats=GenerationStats(
                # The rate of the prefill that ran: cached tokens took no time.
                prompt_tps=(n_prompt - self.cached_tokens) / self.prefill_s
                if self.prefill_s
                else 0.0,
                generation_tps=(generated - 1) / decoding if decoding else 0.0,
                prompt_tokens=n_prompt,
                generation_tokens=generated,
                serving_batches=self.batched,
                in_flight_at_admission=self.in_flight_at_admission,
                max_in_flight_at_admission=self.max_in_flight,
                cached_tokens=self.cached_tokens,
                time_to_first_token_ms=ttft * 1000.0,
            ),
        )


def error_chunk(task_id: TaskId, code: str, message: str) -> ErrorChunk:
    return ErrorChunk(task_id=task_id, code=code, message=message)


def unserved_finish(pending: Pending) -> FinishChunk:
    """A request cancelled before it got a slot: nothing decoded, nothing generated."""
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
            max_in_flight_at_admission=0,
            time_to_first_token_ms=0.0,
        ),
    )


def invalid_request(max_tokens: int, top_logprobs: int) -> str | None:
    """Why sampling parameters no engine can serve are refused, or None."""
    if max_tokens < 1:
        return "max_tokens must be positive"
    if not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
        return f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}"
    return None


def context_exceeded(prompt: int, max_tokens: int, window: int, prompt_alone: bool) -> str:
    """The refusal of a prompt (and ``max_tokens``) that do not fit the window."""
    if prompt_alone:
        detail = f"the prompt is {prompt} tokens, which leaves no room to generate"
    else:
        detail = f"the prompt is {prompt} tokens and max_tokens is {max_tokens}, more than fit"
    return (
        f"{ERROR_CONTEXT_LENGTH_EXCEEDED}: {detail} in this model's {window}-token context window"
    )


def token_budget(prompt: int, max_tokens: int, strict: bool, window: int) -> int | str:
    """How many tokens a ``prompt``-token request may generate in a ``window``-token
    sequence (``max_tokens`` or the room left, whichever is less), or why it does not
    fit: no room at all, or less than a ``strict`` request's ``max_tokens``."""
    room = window - prompt
    if room < 1 or (strict and max_tokens > room):
        return context_exceeded(prompt, max_tokens, window, room < 1)
    return min(max_tokens, room)
