"""Tracing single requests: the local trace store and the recorders that feed it.

While ``State.tracing_enabled`` is set (``PUT /v1/tracing``, ordered like any other
change, so every node agrees), each node records its part of every new generation:

- the API node (where the request arrived): an ``api`` lane span for the request;
- the serving node: a ``runner rank N`` lane with queue+prefill and decode spans
  from the engine's own statistics;
- the master: a ``master`` lane span from the task's creation to its deletion in
  State, with the indexes it ordered them at.

Each node writes its records under ``<data dir>/traces/<task id>.json`` (temp file +
rename); a janitor keeps the newest :data:`MAX_TRACES` and nothing older than
:data:`MAX_AGE_SECONDS`. The cluster endpoints merge every node's record of a task.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

import msgspec

from skulk_core.chat.generation import EngineChunk, ErrorChunk, FinishChunk, TokenChunk
from skulk_core.diagnostics.traces import (
    TraceRecord,
    TraceSpan,
    add_spans,
    valid_task_id,
)
from skulk_core.ids import ModelId, NodeId, TaskId
from skulk_core.state.events import IndexedEvent, TaskCreated, TaskDeleted
from skulk_core.state.state import State

log = logging.getLogger(__name__)

TRACE_DIR: Final = "traces"
MAX_TRACES: Final = 256
MAX_AGE_SECONDS: Final = 7 * 24 * 3600.0
JANITOR_SECONDS: Final = 300.0
# Master spans waiting for their task's deletion; beyond this the oldest are dropped.
MAX_OPEN_MASTER_SPANS: Final = 1024

_decoder = msgspec.json.Decoder(TraceRecord)
_encoder = msgspec.json.Encoder()


def now_us() -> int:
    return time.time_ns() // 1000


class TraceStore:
    """This node's trace records, one JSON file per task id."""

    def __init__(
        self,
        data_dir: Path,
        node_id: NodeId,
        exported: Callable[[str, str, Sequence[TraceSpan]], None] | None = None,
    ) -> None:
        self.root = data_dir / TRACE_DIR
        self.node_id = node_id
        self._exported = exported
        """Also handed every recorded span (OTLP export), off the event loop."""
        self._lock = threading.Lock()
        self._swept_at = 0.0

    def _path(self, task_id: str) -> Path | None:
        return self.root / f"{task_id}.json" if valid_task_id(task_id) else None

    def add(self, task_id: str, kind: str, model_id: str, spans: Sequence[TraceSpan]) -> None:
        """Append ``spans`` to the task's record (written off the event loop)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._write(task_id, kind, model_id, spans)
            return
        loop.run_in_executor(None, self._write, task_id, kind, model_id, spans)

    def _write(self, task_id: str, kind: str, model_id: str, spans: Sequence[TraceSpan]) -> None:
        path = self._path(task_id)
        if path is None or not spans:
            return
        if self._exported is not None:
            try:
                self._exported(task_id, model_id, spans)
            except Exception:  # an exporter never breaks tracing
                log.exception("tracing: the OTLP export of %s failed", task_id)
        with self._lock:
            try:
                self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
                record = self._read(path) or TraceRecord(
                    task_id=task_id,
                    kind=kind,
                    model_id=model_id,
                    started_us=min(s.start_us for s in spans),
                    source_nodes=(self.node_id,),
                )
                if not record.model_id and model_id:
                    record = msgspec.structs.replace(record, model_id=model_id, kind=kind)
                temp = path.with_suffix(".tmp")
                temp.write_bytes(_encoder.encode(add_spans(record, spans)))
                os.replace(temp, path)
            except OSError as exc:
                log.warning("tracing: cannot write the trace of %s: %s", task_id, exc)
        if time.monotonic() - self._swept_at > JANITOR_SECONDS or self._over_count():
            self._swept_at = time.monotonic()
            self.sweep()

    def _over_count(self) -> bool:
        # Cheap enough per write: the directory holds at most a few hundred names.
        return sum(1 for _ in self.root.glob("*.json")) > MAX_TRACES

    @staticmethod
    def _read(path: Path) -> TraceRecord | None:
        try:
            return _decoder.decode(path.read_bytes())
        except (OSError, msgspec.DecodeError):
            return None

    def get(self, task_id: str) -> TraceRecord | None:
        path = self._path(task_id)
        return None if path is None else self._read(path)

    def records(self) -> list[TraceRecord]:
        """Every stored record, newest first."""
        if not self.root.is_dir():
            return []
        found = [self._read(p) for p in self.root.glob("*.json")]
        return sorted((r for r in found if r), key=lambda r: r.started_us, reverse=True)

    def delete(self, task_ids: Sequence[str]) -> tuple[list[str], list[str]]:
        deleted: list[str] = []
        missing: list[str] = []
        with self._lock:
            for task_id in task_ids:
                path = self._path(task_id)
                try:
                    if path is None:
                        raise FileNotFoundError(task_id)
                    path.unlink()
                    deleted.append(task_id)
                except FileNotFoundError:
                    missing.append(task_id)
        return deleted, missing

    def sweep(self, now: float | None = None) -> int:
        """The janitor: drop records past the age bound, then the oldest past the count
        bound. Returns how many went."""
        now = time.time() if now is None else now
        if not self.root.is_dir():
            return 0
        with self._lock:
            files = sorted(self.root.glob("*.json"), key=lambda p: p.stat().st_mtime)
            doomed = [p for p in files if now - p.stat().st_mtime > MAX_AGE_SECONDS]
            kept = [p for p in files if p not in doomed]
            doomed += kept[: max(0, len(kept) - MAX_TRACES)]
            for path in doomed:
                path.unlink(missing_ok=True)
        return len(doomed)


class GenerationTrace:
    """One generation's spans on this node, recorded as its chunks pass."""

    def __init__(
        self,
        store: TraceStore,
        task_id: TaskId,
        model_id: ModelId,
        *,
        api: bool,
        serving_lane: str | None,
        host: NodeId | None = None,
    ) -> None:
        self._store, self._task_id, self._model_id = store, task_id, model_id
        self._api, self._lane, self._host = api, serving_lane, host
        self._start = now_us()
        self._first: int | None = None

    def chunk(self, chunk: EngineChunk) -> None:
        if isinstance(chunk, TokenChunk) and self._first is None:
            self._first = now_us()

    def finish(self, last: EngineChunk | None) -> None:
        end = now_us()
        node = self._store.node_id
        spans: list[TraceSpan] = []
        outcome = _outcome(last)
        if self._api:
            args = {"outcome": outcome, "servedBy": self._host or node}
            spans.append(self._span("request", "api", self._start, end, args))
            if self._first is not None:
                spans.append(
                    TraceSpan(name="first token", node_id=node, lane="api", start_us=self._first)
                )
        if self._lane is not None:
            spans.append(self._span("generate", self._lane, self._start, end, {"outcome": outcome}))
            first = self._first or end
            stats = last.stats if isinstance(last, FinishChunk) else None
            prefill = (
                {}
                if stats is None
                else {
                    "promptTokens": stats.prompt_tokens,
                    "cachedTokens": stats.cached_tokens,
                    "promptTps": round(stats.prompt_tps, 2),
                    "inFlightAtAdmission": stats.in_flight_at_admission,
                }
            )
            spans.append(self._span("queue + prefill", self._lane, self._start, first, prefill))
            decode = (
                {}
                if stats is None
                else {
                    "completionTokens": stats.generation_tokens,
                    "decodeTps": round(stats.generation_tps, 2),
                    "servingBatches": stats.serving_batches,
                }
            )
            spans.append(self._span("decode", self._lane, first, end, decode))
        self._store.add(self._task_id, "TextGeneration", self._model_id, spans)

    def _span(
        self, name: str, lane: str, start: int, end: int, args: Mapping[str, object]
    ) -> TraceSpan:
        return TraceSpan(
            name=name,
            node_id=self._store.node_id,
            lane=lane,
            start_us=start,
            duration_us=max(0, end - start),
            args=dict(args),
        )


def _outcome(last: EngineChunk | None) -> str:
    match last:
        case FinishChunk(finish_reason=reason):
            return str(reason)
        case ErrorChunk(code=code):
            return code
        case _:
            return "abandoned"


class Tracer:
    """What the supervisor opens a :class:`GenerationTrace` with (its ``TraceOpener``)."""

    def __init__(self, store: TraceStore) -> None:
        self.store = store

    def open(
        self,
        task_id: TaskId,
        model_id: ModelId,
        *,
        api: bool,
        serving_lane: str | None,
        host: NodeId | None,
    ) -> GenerationTrace:
        return GenerationTrace(
            self.store, task_id, model_id, api=api, serving_lane=serving_lane, host=host
        )


class MasterTraces:
    """The master's lane: each traced task from its creation to its deletion in State."""

    def __init__(self, store: TraceStore) -> None:
        self._store = store
        self._open: OrderedDict[str, tuple[int, int, str, str]] = OrderedDict()

    def ordered(self, before: State, events: list[IndexedEvent]) -> None:
        if not before.tracing_enabled and not self._open:
            return
        for indexed in events:
            match indexed.event:
                case TaskCreated(task=task) if before.tracing_enabled:
                    instance = before.instances.get(task.instance_id)
                    model = instance.shard_assignments.model_id if instance else ""
                    self._open[task.task_id] = (now_us(), indexed.idx, task.kind, model)
                    while len(self._open) > MAX_OPEN_MASTER_SPANS:
                        self._open.popitem(last=False)
                case TaskDeleted(task_id=task_id) if task_id in self._open:
                    start, created, kind, model = self._open.pop(task_id)
                    span = TraceSpan(
                        name="task in State",
                        node_id=self._store.node_id,
                        lane="master",
                        start_us=start,
                        duration_us=max(0, now_us() - start),
                        args={"createdIdx": created, "deletedIdx": indexed.idx},
                    )
                    self._store.add(task_id, kind, model, [span])
                case _:
                    pass
