"""Cluster diagnostics merge each node's bundle: versions and the runner timeline."""

from __future__ import annotations

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


def test_the_timeline_interleaves_ranks_by_time_and_sorts_runners_by_model_and_rank() -> None:
    bundles = {
        "b": {
            "supervisorRunners": [{"runnerId": "r1", "modelId": "m", "deviceRank": 1}],
            "flightRecorder": [
                {"at": "2026-12-01T10:00:02+00:00", "runnerId": "r1", "phase": "loading"},
            ],
        },
        "a": {
            "supervisorRunners": [
                {"runnerId": "r0", "modelId": "m", "deviceRank": 0},
                {"runnerId": "e0", "modelId": "e", "deviceRank": 0},
            ],
            "flightRecorder": [
                {"at": "2026-12-01T10:00:01+00:00", "runnerId": "r0", "phase": "loading"},
                {"at": "2026-12-01T10:00:03+00:00", "runnerId": "r0", "phase": "ready"},
            ],
        },
        # An older build without these blocks counts as empty, not as an error.
        "c": {"nodeId": "c"},
    }
    merged = merge_timeline(bundles, [{"nodeId": "d", "error": "no reachable API route"}])
    assert [(r["nodeId"], r["runnerId"]) for r in merged["runners"]] == [
        ("a", "e0"),
        ("a", "r0"),
        ("b", "r1"),
    ]
    assert [(e["nodeId"], e["phase"]) for e in merged["entries"]] == [
        ("a", "loading"),
        ("b", "loading"),
        ("a", "ready"),
    ]
    assert merged["unreachableNodes"] == [{"nodeId": "d", "error": "no reachable API route"}]
