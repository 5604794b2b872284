"""The ``/v1/tracing`` and ``/v1/traces*`` answers as wire types: the switch, record
summaries, timing stats, deletions, and the Chrome trace JSON a download carries."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from skulk_core.diagnostics.answers import Unreachable

Unset = msgspec.UnsetType
UNSET: Final = msgspec.UNSET


class TracingState(msgspec.Struct, frozen=True, kw_only=True):
    """Whether new requests are traced, cluster-wide."""

    enabled: bool


class TraceSummary(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What ``GET /v1/traces`` lists for one record."""

    task_id: str
    kind: str
    model_id: str
    started_at_us: int
    source_nodes: list[str]
    span_count: int
    tags: list[str]


class NodeTraces(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    node_id: str
    traces: list[TraceSummary]


class ClusterTraces(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Every member's summaries, one per task, newest first."""

    traces: list[TraceSummary]
    unreachable_nodes: list[Unreachable]


class DeletedTraces(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    deleted: list[str]
    not_found: list[str]


class SpanStats(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    count: int
    total_ms: float
    max_ms: float


class TraceStats(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Timing summaries: the whole task's extent, and per span name."""

    task_id: str
    model_id: str
    source_nodes: list[str]
    total_ms: float
    spans: dict[str, SpanStats]


class ChromeEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One Chrome trace event: metadata (``M``: no category or time), complete (``X``,
    with ``dur``) or instant (``i``, with scope ``s``)."""

    ph: str
    name: str
    pid: int
    tid: int
    args: dict[str, Any]
    cat: str | Unset = UNSET
    ts: int | Unset = UNSET
    dur: int | Unset = UNSET
    s: str | Unset = UNSET


class ChromeTraceInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    task_id: str
    model_id: str
    kind: str
    source_nodes: list[str]


class ChromeTrace(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Chrome trace JSON (the "JSON Object Format") that Perfetto and
    ``chrome://tracing`` open."""

    trace_events: list[ChromeEvent]
    display_time_unit: str
    other_data: ChromeTraceInfo
