"""Driving an engine from a test the way a runner would: per-task chunk queues."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from skulk_core.chat.generation import (
    EngineChunk,
    ErrorChunk,
    FinishChunk,
    GenerationRequest,
    SamplingParams,
    TokenChunk,
)
from skulk_core.ids import TaskId
from skulk_daemon.engines.llama_cpp import LlamaCppEngine, LlamaCppSettings, set_llama_logging
from tests.engines.demo_model import TEST_CONTEXT_TOKENS, TEST_SLOTS, TEST_THREADS

CHUNK_WAIT_S = 120.0  # a hang guard, not a timing claim


class Served:
    """One engine plus per-task chunk queues, as a runner would route them."""

    def __init__(self, engine: LlamaCppEngine, queues: dict[str, queue.SimpleQueue[EngineChunk]]):
        self.engine = engine
        self._queues = queues

    def submit(self, task_id: str, prompt: str, **sampling: Any) -> None:
        self._queues[task_id] = queue.SimpleQueue()
        params = SamplingParams(**{"temperature": 0.0, **sampling})
        self.engine.submit(
            GenerationRequest(task_id=TaskId(task_id), prompt=prompt, sampling=params)
        )

    def cancel(self, task_id: str) -> None:
        self.engine.cancel(TaskId(task_id))

    def next_chunk(self, task_id: str) -> EngineChunk:
        return self._queues[task_id].get(timeout=CHUNK_WAIT_S)

    def collect(self, task_id: str) -> tuple[list[TokenChunk], FinishChunk | ErrorChunk]:
        tokens: list[TokenChunk] = []
        while True:
            chunk = self.next_chunk(task_id)
            if isinstance(chunk, TokenChunk):
                tokens.append(chunk)
            else:
                return tokens, chunk

    def finish(self, task_id: str) -> tuple[str, FinishChunk]:
        tokens, end = self.collect(task_id)
        assert isinstance(end, FinishChunk), end
        return "".join(t.text for t in tokens), end

    def run(self, task_id: str, prompt: str, **sampling: Any) -> tuple[str, FinishChunk]:
        self.submit(task_id, prompt, **sampling)
        return self.finish(task_id)


def serve(model: Path, *, settle_after: float | None = None, **settings: int) -> Iterator[Served]:
    """An engine on ``model``; it settles no slot unless ``settle_after`` says when,
    so what a test's next request reuses does not depend on how long it paused."""
    set_llama_logging(verbose=False)
    # Served.submit creates a task's queue before the engine can answer it.
    queues: dict[str, queue.SimpleQueue[EngineChunk]] = {}
    engine = LlamaCppEngine(
        LlamaCppSettings(
            model,
            context_tokens=settings.get("context_tokens", TEST_CONTEXT_TOKENS),
            slots=settings.get("slots", TEST_SLOTS),
            n_threads=TEST_THREADS,
            prompt_cache_bytes=settings.get("prompt_cache_bytes", 0),
            reuse_replies=bool(settings.get("reuse_replies", 0)),
            settle_after=settle_after,
        ),
        lambda chunk: queues[chunk.task_id].put(chunk),
    )
    engine.load()
    engine.warm_up()
    try:
        yield Served(engine, queues)
    finally:
        engine.unload()
