"""The engine interface: what a runner asks of an inference backend.

An engine owns one loaded model and serves many generations at once. Requests go
in with :meth:`Engine.submit` (non-blocking); everything that comes out, for every
request, goes to the single :data:`ChunkSink` the engine was built with, as a
stream of :data:`EngineChunk` values per task: zero or more :class:`TokenChunk`,
then exactly one terminal :class:`FinishChunk` or :class:`ErrorChunk`.

These types also travel on the runner's stdin/stdout protocol, so they are
msgspec Structs with tags.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal, Protocol

import msgspec

from skulk_core.ids import TaskId

FinishReason = Literal["stop", "length", "cancelled"]

DEFAULT_SLOTS: Final = 4
"""Sequences an engine serves at once unless told otherwise."""

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
    serving_batches: int
    """Decode batches (prefill and generation) this sequence took part in."""
    in_flight_at_admission: int
    """Sequences already holding a slot when this one was admitted."""
    time_to_first_token_ms: float
    """From submission (queueing included) to the first sampled token."""


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

ChunkSink = Callable[[EngineChunk], None]
"""Where an engine delivers chunks. Called from the engine's own thread (and,
for requests refused on sight, from the thread calling ``submit``), so it must be
thread-safe and quick: it sits on the decode loop's hot path."""


class EngineStats(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of an engine's load and lifetime counters."""

    loaded: bool
    slots: int
    context_tokens: int
    active: int
    waiting: int
    decode_batches: int
    """``llama_decode`` calls so far (prefill chunks and generation steps)."""
    prompt_tokens: int
    generated_tokens: int
    completed: int


class Engine(Protocol):
    """One loaded model serving concurrent generations.

    Lifecycle: ``load`` → ``warm_up`` → any number of ``submit``/``cancel`` →
    ``unload``. ``submit`` and ``cancel`` return immediately; results go to the
    sink the engine was constructed with.
    """

    def load(self) -> None:
        """Load the model and start serving; raises :class:`EngineLoadError`."""

    def warm_up(self) -> None:
        """Run one tiny decode so the first real request does not pay for setup."""

    def submit(self, request: GenerationRequest) -> None:
        """Queue a generation; its chunks arrive on the sink."""

    def cancel(self, task_id: TaskId) -> None:
        """Stop a queued or running generation (it ends with ``"cancelled"``).

        Unknown or finished task ids are ignored.
        """

    def unload(self) -> None:
        """Cancel everything in flight, stop the engine and free the model."""

    def stats(self) -> EngineStats:
        """A snapshot of load and counters; safe from any thread."""


class EngineLoadError(RuntimeError):
    """The model could not be loaded; the message is for an operator."""
