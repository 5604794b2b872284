"""The engine interface: what a runner asks of an inference backend.

An engine owns one loaded model and serves many generations at once. Requests go
in with :meth:`Engine.submit` (non-blocking); everything that comes out, for every
request, goes to the single :data:`ChunkSink` the engine was built with, as a
stream of :data:`~skulk_core.chat.generation.EngineChunk` values per task: zero or
more ``TokenChunk``, then exactly one terminal ``FinishChunk`` or ``ErrorChunk``.

The request and chunk types are the inference wire, shared with the runner
protocol and the fabric: they live in :mod:`skulk_core.chat.generation`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

import msgspec

from skulk_core.chat.generation import EngineChunk, GenerationRequest
from skulk_core.ids import TaskId
from skulk_core.models.kv_cache import LLAMA_CPP_SEQUENCES

DEFAULT_SLOTS: Final = LLAMA_CPP_SEQUENCES
"""Sequences an engine serves at once unless told otherwise."""

ChunkSink = Callable[[EngineChunk], None]
"""Where an engine delivers chunks. Called from the engine's own thread (and,
for requests refused on sight, from the thread calling ``submit``), so it must be
thread-safe and quick: it sits on the decode loop's hot path."""


class PromptCacheStats(msgspec.Struct, frozen=True, kw_only=True):
    """A host-RAM prompt cache: its budget, what it holds, what it has done."""

    budget_bytes: int
    bytes: int
    entries: int
    saved: int
    """Prefixes stored so far."""
    restored: int
    """Prefixes restored into a slot so far."""
    restored_tokens: int
    """Prompt tokens whose cells came from this cache rather than a prefill."""
    evicted: int
    """Entries dropped to stay within the budget."""


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
    """Prompt tokens decoded (prefilled) so far."""
    generated_tokens: int
    completed: int
    cached_tokens: int = 0
    """Prompt tokens served from cells a slot kept (or the prompt cache restored)
    instead of being prefilled."""
    settled_tokens: int = 0
    """Tokens decoded again while idle to make a slot's cells exact (not counted in
    ``prompt_tokens``)."""
    prompt_cache: PromptCacheStats | None = None
    """The host-RAM prompt cache, for engines that have one."""


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
