"""Cluster diagnostics merge each node's bundle: versions and the runner timeline."""

from __future__ import annotations

import msgspec

from skulk_core.diagnostics.answers import TimelineSource, Unreachable
from skulk_core.diagnostics.bundle import FlightRecord, RunnerView
from skulk_core.diagnostics.cluster import (
    ClusterVersionStatus,
    NodeVersionStatus,
    cluster_version_status,
    merge_timeline,
    node_version_status,
)


def test_version_statuses() -> None:
    assert node_version_status("1.0", "1.0") is NodeVersionStatus.CURRENT
    assert node_version_status("1.0", "0.9") is NodeVersionStatus.VERSION_MISMATCH
    for missing in (None, "", "unknown", "None"):
        assert node_version_status("1.0", missing) is NodeVersionStatus.UNKNOWN
    current, old, unknown = (
        NodeVersionStatus.CURRENT,
        NodeVersionStatus.VERSION_MISMATCH,
        NodeVersionStatus.UNKNOWN,
    )
    assert cluster_version_status([current, current]) is ClusterVersionStatus.CONSISTENT
    assert cluster_version_status([current, old, unknown]) is ClusterVersionStatus.MIXED
    assert cluster_version_status([current, unknown]) is ClusterVersionStatus.UNKNOWN


def _runner(runner_id: str, model_id: str, rank: int) -> RunnerView:
    return RunnerView(
        runner_id=runner_id,
        instance_id="i",
        model_id=model_id,
        status_kind=None,
        phase="loading",
        seconds_in_phase=0.0,
        phase_budget_seconds=None,
        supervisor_phase="starting",
        device_rank=rank,
        world_size=2,
        rpc_donor=False,
        active_tasks=0,
        task_ids=[],
        pid=None,
        failure=None,
    )


def _entry(at: str, runner_id: str, phase: str) -> FlightRecord:
    return FlightRecord(at=at, runner_id=runner_id, event="phase", phase=phase)


def test_the_timeline_interleaves_ranks_by_time_and_sorts_runners_by_model_and_rank() -> None:
    sources = {
        "b": TimelineSource(
            supervisor_runners=[_runner("r1", "m", 1)],
            flight_recorder=[_entry("2026-12-01T10:00:02+00:00", "r1", "loading")],
        ),
        "a": TimelineSource(
            supervisor_runners=[_runner("r0", "m", 0), _runner("e0", "e", 0)],
            flight_recorder=[
                _entry("2026-12-01T10:00:01+00:00", "r0", "loading"),
                _entry("2026-12-01T10:00:03+00:00", "r0", "ready"),
            ],
        ),
        # An older build without these blocks counts as empty, not as an error.
        "c": msgspec.convert({"nodeId": "c"}, TimelineSource),
    }
    gone = Unreachable(node_id="d", error="no reachable API route")
    merged = merge_timeline("a", sources, [gone])
    assert [(r.node_id, r.runner_id) for r in merged.runners] == [
        ("a", "e0"),
        ("a", "r0"),
        ("b", "r1"),
    ]
    assert [(e.node_id, e.phase) for e in merged.entries] == [
        ("a", "loading"),
        ("b", "loading"),
        ("a", "ready"),
    ]
    wire = msgspec.to_builtins(merged)
    assert wire["unreachableNodes"] == [{"nodeId": "d", "error": "no reachable API route"}]
    assert wire["entries"][0] == {
        "at": "2026-12-01T10:00:01+00:00",
        "runnerId": "r0",
        "event": "phase",
        "phase": "loading",
        "nodeId": "a",
    }
