"""``/v1/diagnostics/*`` on an in-process node serving the demo model."""

from __future__ import annotations

import os
from typing import Any

from tests.api.in_process import Served
from tests.daemon.serving import DEMO

DOCTOR_FIELDS = {
    "checkId",
    "title",
    "verdict",
    "detail",
    "consequence",
    "remediation",
    "fixAvailable",
}


def _bundle(served: Served) -> dict[str, Any]:
    response = served.app.get("/v1/diagnostics/node")
    assert response.status_code == 200, response.text
    bundle: dict[str, Any] = response.json()
    return bundle


def test_the_bundle_shows_runtime_runners_processes_placements_and_doctor(
    demo_app: Served,
) -> None:
    bundle = _bundle(demo_app)
    state = demo_app.app.get("/state").json()
    node_id = state["topology"]["nodes"][0]
    runtime = bundle["runtime"]
    assert runtime["nodeId"] == node_id == bundle["nodeId"]
    assert runtime["masterNodeId"] == node_id
    assert runtime["skulkVersion"] and "skulkCommit" in runtime
    assert runtime["pid"] == os.getpid()

    [runner] = bundle["supervisorRunners"]
    status_kind = next(iter(state["runners"][runner["runnerId"]]))
    assert runner["statusKind"] == status_kind == "RunnerReady"
    assert runner["modelId"] == "local/gemma-3-270m-q4_k_m"
    assert runner["phase"] == "ready"
    assert runner["deviceRank"] == 0 and runner["worldSize"] == 1

    # The runner's life so far, oldest first, stamped for merging across nodes.
    phases = [e["phase"] for e in bundle["flightRecorder"] if e["runnerId"] == runner["runnerId"]]
    assert phases[:2] == ["starting", "loading"]
    assert "warming_up" in phases and "ready" in phases

    [daemon] = [p for p in bundle["processes"] if p["role"] == "daemon"]
    assert daemon["pid"] == os.getpid()
    # The test process may hold other in-process nodes' runners too (the suite's
    # workers share one process across modules): this node's is among them.
    runners = {p["pid"]: p for p in bundle["processes"] if p["role"] == "runner"}
    assert runners[runner["pid"]]["runnerId"] == runner["runnerId"]
    assert runners[runner["pid"]]["rssBytes"] > 50 * 1024**2  # the model is mapped

    [placement] = bundle["placements"]
    assert placement["instanceId"] == demo_app.instance_id
    assert placement["masterInPlacement"] is True

    doctor = bundle["doctor"]
    assert 0 < len(doctor) <= 64
    assert all(set(entry) == DOCTOR_FIELDS for entry in doctor)
    by_id = {entry["checkId"]: entry for entry in doctor}
    assert by_id["runner.stuck"]["verdict"] == "pass"
    assert by_id["engine.amx"]["verdict"] in ("pass", "warn")
    assert bundle["resources"]["engine"]["importable"] is True


def test_capture_holds_the_runners_recorder_and_process_samples(demo_app: Served) -> None:
    runner_id = _bundle(demo_app)["supervisorRunners"][0]["runnerId"]
    response = demo_app.app.post(
        "/v1/diagnostics/node/capture",
        json={"runnerId": runner_id, "includeProcessSamples": True, "sampleDurationSeconds": 0.3},
    )
    assert response.status_code == 200, response.text
    capture = response.json()
    assert capture["runner"]["runnerId"] == runner_id
    assert {e["runnerId"] for e in capture["flightRecorder"]} == {runner_id}
    assert any("phase ready" in e["event"] for e in capture["runnerProcessRecorder"])
    samples = capture["processSamples"]
    assert samples and {s["pid"] for s in samples} == {capture["runner"]["pid"]}
    assert samples[0]["threads"] and capture["partialFailures"] == []
    assert capture["memory"]["daemonRssBytes"] > 0


def test_unknown_runners_tasks_and_nodes_are_404s_that_say_where_to_look(
    demo_app: Served,
) -> None:
    app = demo_app.app
    runner_id = _bundle(demo_app)["supervisorRunners"][0]["runnerId"]
    missing = app.post("/v1/diagnostics/node/capture", json={"runnerId": "nope"})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "runner_not_found"
    idle = app.post(f"/v1/diagnostics/node/runners/{runner_id}/cancel", json={"taskId": "t"})
    assert idle.status_code == 404
    assert "supervisorRunners[].taskIds" in idle.json()["error"]["message"]
    stranger = app.get("/v1/diagnostics/cluster/not-a-member")
    assert stranger.status_code == 404
    assert stranger.json()["error"]["code"] == "node_not_found"
    bad = app.post("/v1/diagnostics/node/capture", json={"sampleDurationSeconds": "long"})
    assert bad.status_code == 400


def test_a_one_node_cluster_sweep_and_timeline(demo_app: Served) -> None:
    app = demo_app.app
    cluster = app.get("/v1/diagnostics/cluster").json()
    [entry] = cluster["nodes"]
    assert entry["ok"] is True and entry["versionStatus"] == "current"
    assert cluster["versionStatus"] == "consistent"
    timeline = app.get("/v1/diagnostics/cluster/timeline").json()
    assert timeline["unreachableNodes"] == []
    assert [r["runnerId"] for r in timeline["runners"]] == [
        r["runnerId"] for r in entry["bundle"]["supervisorRunners"]
    ]
    assert timeline["entries"] == sorted(timeline["entries"], key=lambda e: e["at"])
    own = app.get(f"/v1/diagnostics/cluster/{entry['nodeId']}").json()
    assert own["runtime"]["nodeId"] == entry["nodeId"]


def test_a_generation_feeds_this_nodes_performance_envelope(demo_app: Served) -> None:
    app = demo_app.app
    body = {
        "model": DEMO,
        "messages": [{"role": "user", "content": "Count: one, two,"}],
        "max_tokens": 4,
        "temperature": 0,
    }
    assert app.post("/v1/chat/completions", json=body).status_code == 200
    report = app.get("/v1/diagnostics/performance-envelopes").json()
    [envelope] = [e for e in report["envelopes"] if e["modelId"] == DEMO]
    assert envelope["engine"].startswith("llama.cpp/")
    assert envelope["quantization"] != "unknown"
    assert envelope["buckets"][0]["concurrency"] >= 1
    assert envelope["buckets"][0]["p50TtftMs"] > 0
    cluster = app.get("/v1/diagnostics/performance-envelopes/cluster").json()
    assert [n["ok"] for n in cluster["nodes"]] == [True]
