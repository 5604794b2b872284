"""Trace records merge across nodes and render as Chrome trace JSON."""

from __future__ import annotations

import msgspec

from skulk_core.diagnostics.traces import (
    TraceRecord,
    TraceSpan,
    add_spans,
    chrome_trace,
    merge,
    stats,
    valid_task_id,
)
from tests.chrome_trace import lanes, parse_chrome_trace


def _span(node: str, lane: str, name: str, start: int, duration: int | None = 10) -> TraceSpan:
    return TraceSpan(name=name, node_id=node, lane=lane, start_us=start, duration_us=duration)


def _record(node: str, *spans: TraceSpan, model: str = "m") -> TraceRecord:
    empty = TraceRecord(
        task_id="t1",
        kind="TextGeneration",
        model_id=model,
        started_us=spans[0].start_us,
        source_nodes=(node,),
    )
    return add_spans(empty, spans)


def test_records_from_three_nodes_merge_and_render() -> None:
    api = _record(
        "a", _span("a", "api", "request", 100, 900), _span("a", "api", "first token", 300, None)
    )
    host = _record(
        "b",
        _span("b", "runner rank 0", "queue + prefill", 150, 150),
        _span("b", "runner rank 0", "decode", 300, 600),
    )
    master = _record("c", _span("c", "master", "task in State", 120, 880), model="")
    merged = merge([api, host, master, host])  # a duplicate answer is deduped
    assert merged is not None
    assert merged.source_nodes == ("a", "b", "c")
    assert merged.model_id == "m"
    assert [s.name for s in merged.spans] == [
        "request",
        "task in State",
        "queue + prefill",
        "first token",
        "decode",
    ]
    document = parse_chrome_trace(msgspec.json.encode(chrome_trace(merged)).decode())
    assert lanes(document) == {
        "node a": {"api"},
        "node b": {"runner rank 0"},
        "node c": {"master"},
    }
    summary = stats(merged)
    assert summary.total_ms == 0.9
    assert msgspec.to_builtins(summary.spans["decode"]) == {
        "count": 1,
        "totalMs": 0.6,
        "maxMs": 0.6,
    }


def test_nothing_to_merge_and_task_id_bounds() -> None:
    assert merge([]) is None
    assert valid_task_id("0f9c2a1e-7d3b-4c55-9a1f-2b8c0d4e6f70")
    for bad in ("", "../etc/passwd", "a" * 129, "x y"):
        assert not valid_task_id(bad)
