"""Traces of single requests across the cluster, and their Chrome trace rendering.

Each node that takes part in a traced task (the API node, the master, the node whose
runner serves it) keeps its own :class:`TraceRecord` for the task id: spans on lanes
such as ``api``, ``master`` or ``runner rank 0``. Merging records from several nodes
(:func:`merge`) dedups by span identity and keeps each source node; the merged
record renders as Chrome trace JSON (:func:`chrome_trace`: one process per node, one
thread per lane, times in microseconds) that Perfetto and ``chrome://tracing`` open.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Final

import msgspec

from skulk_core.diagnostics.trace_answers import (
    UNSET,
    ChromeEvent,
    ChromeTrace,
    ChromeTraceInfo,
    SpanStats,
    TraceStats,
    TraceSummary,
)

TASK_ID_PATTERN: Final = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
MAX_SPANS_PER_RECORD: Final = 256


class TraceSpan(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    name: str
    node_id: str
    lane: str
    start_us: int
    """Wall clock, microseconds since the epoch (merged across nodes)."""
    duration_us: int | None = None
    """None: an instant (a first token, an ordered command)."""
    args: dict[str, Any] = {}


class TraceRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    task_id: str
    kind: str
    model_id: str
    started_us: int
    source_nodes: tuple[str, ...]
    spans: tuple[TraceSpan, ...] = ()
    tags: tuple[str, ...] = ()


def valid_task_id(task_id: str) -> bool:
    return bool(TASK_ID_PATTERN.match(task_id))


def add_spans(record: TraceRecord, spans: Sequence[TraceSpan]) -> TraceRecord:
    """``record`` with ``spans`` appended (bounded), their nodes among its sources."""
    merged = (*record.spans, *spans)[:MAX_SPANS_PER_RECORD]
    nodes = tuple(sorted({*record.source_nodes, *(s.node_id for s in spans)}))
    started = min([record.started_us, *(s.start_us for s in spans)])
    return msgspec.structs.replace(record, spans=merged, source_nodes=nodes, started_us=started)


def merge(records: Iterable[TraceRecord]) -> TraceRecord | None:
    """One record from every node's record of the same task (None for none)."""
    records = list(records)
    if not records:
        return None
    seen: set[tuple[str, str, str, int]] = set()
    spans: list[TraceSpan] = []
    for record in records:
        for span in record.spans:
            key = (span.node_id, span.lane, span.name, span.start_us)
            if key not in seen:
                seen.add(key)
                spans.append(span)
    spans.sort(key=lambda s: (s.start_us, s.node_id, s.lane))
    first = min(records, key=lambda r: r.started_us)
    known = next((r for r in records if r.model_id), first)
    return TraceRecord(
        task_id=first.task_id,
        kind=known.kind,
        model_id=known.model_id,
        started_us=min(r.started_us for r in records),
        source_nodes=tuple(sorted({n for r in records for n in r.source_nodes})),
        spans=tuple(spans[:MAX_SPANS_PER_RECORD]),
        tags=tuple(sorted({t for r in records for t in r.tags})),
    )


def summary(record: TraceRecord) -> TraceSummary:
    """What ``GET /v1/traces`` lists for one record."""
    return TraceSummary(
        task_id=record.task_id,
        kind=record.kind,
        model_id=record.model_id,
        started_at_us=record.started_us,
        source_nodes=list(record.source_nodes),
        span_count=len(record.spans),
        tags=list(record.tags),
    )


def stats(record: TraceRecord) -> TraceStats:
    """Timing summaries: the whole task's extent, and per span name."""
    by_name: dict[str, SpanStats] = {}
    end = record.started_us
    for span in record.spans:
        duration = span.duration_us or 0
        end = max(end, span.start_us + duration)
        entry = by_name.get(span.name, SpanStats(count=0, total_ms=0.0, max_ms=0.0))
        by_name[span.name] = SpanStats(
            count=entry.count + 1,
            total_ms=round(entry.total_ms + duration / 1000, 3),
            max_ms=max(entry.max_ms, round(duration / 1000, 3)),
        )
    return TraceStats(
        task_id=record.task_id,
        model_id=record.model_id,
        source_nodes=list(record.source_nodes),
        total_ms=round((end - record.started_us) / 1000, 3),
        spans=dict(sorted(by_name.items())),
    )


def chrome_trace(record: TraceRecord) -> ChromeTrace:
    """Chrome trace JSON (the "JSON Object Format"): ``traceEvents`` with one process
    per node and one thread per lane, complete (``X``) and instant (``i``) events."""
    nodes = sorted({s.node_id for s in record.spans} | set(record.source_nodes))
    pids = {node: index + 1 for index, node in enumerate(nodes)}
    lanes: dict[tuple[str, str], int] = {}
    events = [
        ChromeEvent(
            ph="M", name="process_name", pid=pids[node], tid=0, args={"name": f"node {node}"}
        )
        for node in nodes
    ]
    for span in record.spans:
        key = (span.node_id, span.lane)
        if key not in lanes:
            lanes[key] = len([k for k in lanes if k[0] == span.node_id]) + 1
            events.append(
                ChromeEvent(
                    ph="M",
                    name="thread_name",
                    pid=pids[span.node_id],
                    tid=lanes[key],
                    args={"name": span.lane},
                )
            )
        instant = span.duration_us is None
        events.append(
            ChromeEvent(
                ph="i" if instant else "X",
                name=span.name,
                cat=span.lane.split(" ", 1)[0],
                pid=pids[span.node_id],
                tid=lanes[key],
                ts=span.start_us,
                args=dict(span.args),
                s="t" if instant else UNSET,
                dur=UNSET if span.duration_us is None else max(0, span.duration_us),
            )
        )
    return ChromeTrace(
        trace_events=events,
        display_time_unit="ms",
        other_data=ChromeTraceInfo(
            task_id=record.task_id,
            model_id=record.model_id,
            kind=record.kind,
            source_nodes=list(record.source_nodes),
        ),
    )
