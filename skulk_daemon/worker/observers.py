"""What observes the supervisor's generations: tracing, through these protocols (the
worker never imports the diagnostics that implement them)."""

from __future__ import annotations

from typing import Protocol

from skulk_core.chat.generation import EngineChunk as Chunk
from skulk_core.ids import ModelId, NodeId, TaskId


class GenerationObserver(Protocol):
    """Sees one generation's chunks as they pass, then its end (last chunk or None)."""

    def chunk(self, chunk: Chunk) -> None: ...

    def finish(self, last: Chunk | None) -> None: ...


class TraceOpener(Protocol):
    def open(
        self,
        task_id: TaskId,
        model_id: ModelId,
        *,
        api: bool,
        serving_lane: str | None,
        host: NodeId | None,
    ) -> GenerationObserver: ...
