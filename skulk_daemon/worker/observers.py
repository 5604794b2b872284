"""What observes the supervisor's generations: tracing, through these protocols (the
worker never imports the diagnostics that implement them), and the listeners told of
each generation's end (metrics, performance envelopes)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Protocol

from skulk_core.chat.generation import EngineChunk as Chunk
from skulk_core.chat.generation import ErrorChunk, FinishChunk
from skulk_core.ids import InstanceId, ModelId, NodeId, TaskId
from skulk_core.state.state import State


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


class GenerationWatch:
    """Who watches the supervisor's generations: the tracer while tracing is on
    (cluster-wide, in State), and every listener for each generation's end."""

    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state
        self.tracer: TraceOpener | None = None
        self.listeners: list[Callable[[ModelId, Chunk, str], None]] = []

    def _model(self, instance_id: InstanceId) -> ModelId:
        instance = self._state().instances.get(instance_id)
        return instance.shard_assignments.model_id if instance is not None else ModelId("")

    def trace(
        self,
        task_id: TaskId,
        instance_id: InstanceId,
        api: bool,
        lane: str | None,
        host: NodeId | None,
    ) -> GenerationObserver | None:
        """A recorder for this generation when tracing is on."""
        if self.tracer is None or not self._state().tracing_enabled:
            return None
        model = self._model(instance_id)
        return self.tracer.open(task_id, model, api=api, serving_lane=lane, host=host)

    def ended(self, instance_id: InstanceId, chunk: Chunk, served: str) -> None:
        """Tell every listener when ``chunk`` ends a generation."""
        if not self.listeners or not isinstance(chunk, FinishChunk | ErrorChunk):
            return
        model = self._model(instance_id)
        for listener in self.listeners:
            with contextlib.suppress(Exception):  # observers never break a generation
                listener(model, chunk, served)
