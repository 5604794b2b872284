"""The inference wire: what a generation asks for and what comes back.

A :class:`GenerationRequest` goes to an engine; what comes out, per request, is a
stream of :data:`EngineChunk` values: zero or more :class:`TokenChunk`, then
exactly one terminal :class:`FinishChunk` or :class:`ErrorChunk`.

These values cross every process and node boundary on the serving path: the
runner's stdin/stdout protocol, and the fabric (``RunTask`` carries the request,
a command's data frames carry its chunks), so they are msgspec Structs with tags
and live here, in the pure layer both sides share. ``ErrorChunk.code`` takes the
``ERROR_*`` values below, and a few the daemon adds where it routes requests.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from skulk_core.ids import TaskId

FinishReason = Literal["stop", "length", "cancelled"]

ERROR_CONTEXT_LENGTH_EXCEEDED: Final = "context_length_exceeded"
"""The prompt (or prompt plus a strict ``max_tokens``) does not fit the window."""
ERROR_INVALID_REQUEST: Final = "invalid_request"
"""The request cannot be served as asked (an empty prompt, a task id in use)."""
ERROR_ENGINE_FAILED: Final = "engine_failed"
"""The engine itself broke while serving (llama_decode failed); retrying elsewhere may work."""


class SamplingParams(msgspec.Struct, frozen=True, kw_only=True):
    """How to pick tokens. The defaults change nothing (plain softmax sampling).

    ``temperature <= 0`` means greedy decoding. ``max_tokens`` is clamped to the
    room left in the per-sequence window unless ``strict_max_tokens`` is set, in
    which case a request that cannot fit it is refused with
    ``context_length_exceeded`` (the spec's rule for an explicit ``max_tokens``).
    """

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    repetition_context_size: int = 64
    logprobs: bool = False
    top_logprobs: int = 0
    strict_max_tokens: bool = False
    grammar: str | None = None
    """A GBNF grammar (root rule ``root``) every completion must match; llama.cpp
    masks tokens that would leave it, so the output cannot violate it."""


class GenerationRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One generation. ``prompt`` is already rendered by the chat template.

    The engine tokenizes it with special tokens parsed (so ``<start_of_turn>``
    is one token) and adds BOS only when the text does not already start with it.
    """

    task_id: TaskId
    prompt: str
    sampling: SamplingParams


class GenerationStats(msgspec.Struct, frozen=True, kw_only=True):
    """What one finished generation cost, for usage reports and the dashboard."""

    prompt_tps: float
    generation_tps: float
    prompt_tokens: int
    generation_tokens: int
    serving_batches: bool
    """Whether the engine decoded this sequence in a step together with other
    sequences (continuous batching), at least once."""
    in_flight_at_admission: int
    """Sequences holding a slot once this one was admitted, itself included (so at
    least 1 for a request that was served; 0 only for one cancelled in the queue)."""
    time_to_first_token_ms: float
    """From submission (queueing included) to the first sampled token."""
    max_in_flight_at_admission: int = 0
    """The most sequences holding a slot, itself included, at any admission while
    this one held its slot (at least :attr:`in_flight_at_admission`)."""
    cached_tokens: int = 0
    """Prompt tokens served from the KV cache (a prefix an earlier request left),
    not prefilled again; ``prompt_tokens`` still counts the whole prompt."""


class TokenChunk(msgspec.Struct, frozen=True, kw_only=True, tag="token"):
    """One sampled token and the text it released.

    Every sampled token gets exactly one chunk, but ``text`` may be empty: text
    is held back while it is an incomplete UTF-8 sequence or could still turn
    into a stop string, and released with a later token (or dropped, if it
    became the stop string). Concatenating ``text`` gives the completion.
    """

    task_id: TaskId
    text: str
    token_id: int
    logprob: float | None = None
    top_logprobs: list[tuple[str, float]] | None = None


class FinishChunk(msgspec.Struct, frozen=True, kw_only=True, tag="finish"):
    """The generation ended; ``completion_tokens`` counts every sampled token."""

    task_id: TaskId
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    stats: GenerationStats
    stop_sequence: str | None = None
    """The request's stop string that ended generation (``finish_reason`` "stop")."""


class ErrorChunk(msgspec.Struct, frozen=True, kw_only=True, tag="error"):
    """The generation could not run or broke; ``message`` is safe to show a user."""

    task_id: TaskId
    code: str
    message: str


EngineChunk = TokenChunk | FinishChunk | ErrorChunk
TerminalChunk = FinishChunk | ErrorChunk
