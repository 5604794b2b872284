"""Placement and instance management on a real node with the demo model installed."""

from __future__ import annotations

import asyncio
import copy
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from skulk_core.cluster.telemetry import NodeIdentityInfo, Participation
from skulk_core.placement import (
    PLACEMENT_INFO_PENDING,
    ClusterFacts,
    Placement,
    PlacementRefusal,
    PlacementRequest,
    RandomIds,
    place,
)
from skulk_core.state.events import (
    InstanceCreated,
    InstanceDeleted,
    InstanceFailed,
    KeepAliveSet,
)
from skulk_core.version import SKULK_VERSION
from skulk_daemon.node.eventlog import read_events
from skulk_daemon.placement import service as placement_api
from skulk_daemon.serve import build_node
from skulk_daemon.system.settings import resolve_settings
from skulk_daemon.telemetry.publisher import TelemetrySource
from tests.api.in_process import AppNode

pytestmark = pytest.mark.slow

DEMO = "local/gemma-3-270m-q4_k_m"
# 2 (K and V) x 18 layers x 1 KV head x 256 head dim x 2 bytes (f16).
DEMO_KV_BYTES_PER_TOKEN = 18432
DEMO_CONTEXT_LENGTH = 32768
FAILURE_HEADER = "X-Skulk-Placement-Failure"
RUNNER_STATES = {
    "RunnerIdle",
    "RunnerLoading",
    "RunnerLoaded",
    "RunnerWarmingUp",
    "RunnerReady",
    "RunnerRunning",
}


@pytest.fixture
def node(bare_app: AppNode) -> AppNode:
    """The session's bare node; every test leaves it with no instances."""
    return bare_app


def node_id(app: AppNode) -> str:
    value: str = app.get("/node_id").json()
    return value


def post(app: AppNode, path: str, **kwargs: Any) -> httpx.Response:
    return app.post(path, **kwargs)


def delete(app: AppNode, path: str) -> httpx.Response:
    return app.http.delete(path)


def untag(value: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    [(tag, body)] = value.items()
    return tag, body


def previews(app: AppNode, **params: Any) -> list[dict[str, Any]]:
    response = app.get("/instance/previews", params={"model_id": DEMO, **params})
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["previews"]
    return found


def assert_refused(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code"}
    assert error["code"] == code
    message: str = error["message"]
    return message


def test_previews_show_one_valid_placement_of_the_demo_model(node: AppNode) -> None:
    me = node_id(node)
    found = previews(node)
    [valid] = [p for p in found if p["error"] is None]
    assert valid["node_ids"] == [me]
    assert (valid["sharding"], valid["instance_meta"], valid["alternative"]) == (
        "Pipeline",
        "MlxRing",
        False,
    )
    assert valid["kv_bytes_per_token"] == DEMO_KV_BYTES_PER_TOKEN
    assert 256 <= valid["max_context_tokens"] <= DEMO_CONTEXT_LENGTH
    assert valid["default_context_tokens"] == min(8192, valid["max_context_tokens"])
    assert valid["reserves_context_at_load"] is True
    assert valid["memory_delta_by_node"][me] > 0

    # The instance is rendered exactly as /state renders instances.
    kind, instance = untag(valid["instance"])
    assert kind == "MlxRingInstance"
    assert instance["contextTokenLimit"] == valid["max_context_tokens"]
    [(runner, shard)] = instance["shardAssignments"]["runnerToShard"].items()
    assert instance["shardAssignments"]["nodeToRunner"] == {me: runner}
    assert untag(shard) == (
        "PipelineShardMetadata",
        {
            "modelId": DEMO,
            "deviceRank": 0,
            "worldSize": 1,
            "startLayer": 0,
            "endLayer": 18,
            "nLayers": 18,
        },
    )
    requirements = node.get("/models/requirements", params={"model_id": DEMO}).json()
    assert valid["card_digest"] == requirements["card_digest"]

    tensor = [p for p in found if p["sharding"] == "Tensor"]
    assert tensor and all(p["instance"] is None for p in tensor)
    assert all(p["error_code"] == "no_valid_placement" for p in tensor)
    assert "does not support Tensor sharding" in tensor[0]["error"]


def test_excluding_the_only_node_leaves_no_valid_preview(node: AppNode) -> None:
    found = previews(node, excluded_node_ids=[node_id(node)])
    assert found
    assert all(p["instance"] is None and p["error_code"] == "no_valid_placement" for p in found)
    assert any("exclusions removed every candidate" in p["error"] for p in found)
    assert all(p["instance"] is None for p in previews(node, node_ids=["12D3KooWnobody"]))


def test_preview_queries_are_validated_and_honoured(node: AppNode) -> None:
    for params in ({"context_tokens": 100}, {"min_nodes": 0}, {"sharding": "Diagonal"}):
        response = node.get("/instance/previews", params={"model_id": DEMO, **params})
        assert_refused(response, 400, "validation_error")
    assert_refused(
        node.get("/instance/previews", params={"model_id": "nobody/nothing"}),
        404,
        "model_not_found",
    )
    [valid] = [p for p in previews(node, context_tokens=2048) if p["error"] is None]
    _, instance = untag(valid["instance"])
    assert instance["contextTokenLimit"] == 2048
    too_big = previews(node, context_tokens=40000, sharding="Pipeline")
    assert all(p["instance"] is None for p in too_big)
    assert f"holds: {DEMO_CONTEXT_LENGTH} tokens" in too_big[0]["error"]
    two = previews(node, min_nodes=2)
    assert all(p["instance"] is None and p["node_count"] == 2 for p in two)


def test_place_creates_an_instance_and_delete_removes_it(node: AppNode) -> None:
    me = node_id(node)
    placed = post(node, "/place_instance", json={"model_id": DEMO, "context_tokens": 512})
    assert placed.status_code == 200, placed.text
    body = placed.json()
    assert body["message"] == "Command received."
    assert body["model_id"] == DEMO
    # The accepted command owns exactly the placement identity it created.
    instance_id = body["instance_id"]
    assert body["command_id"] == instance_id

    state = node.get("/state").json()
    kind, instance = untag(state["instances"][instance_id])
    assert kind == "MlxRingInstance"
    assert instance["contextTokenLimit"] == 512
    [runner] = instance["shardAssignments"]["nodeToRunner"].values()
    assert instance["shardAssignments"]["nodeToRunner"] == {me: runner}
    # Runners start idle; a worker may already have moved this one on.
    [status] = state["runners"][runner]
    assert status in RUNNER_STATES

    one = node.get(f"/instance/{instance_id}")
    assert one.status_code == 200
    assert one.json()["instance"] == {kind: instance}
    assert set(one.json()["runners"]) == {runner}

    deleted = delete(node, f"/instance/{instance_id}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["message"] == "Command received."
    assert deleted.json()["instance_id"] == instance_id
    assert deleted.json()["command_id"] != instance_id
    state = node.get("/state").json()
    assert instance_id not in state["instances"]
    assert runner not in state["runners"]
    assert_refused(node.get(f"/instance/{instance_id}"), 404, "instance_not_found")
    assert_refused(delete(node, f"/instance/{instance_id}"), 404, "instance_not_found")


def test_placing_a_placed_model_again_is_refused_unless_another_replica_is_asked(
    node: AppNode,
) -> None:
    placed = post(node, "/place_instance", json={"model_id": DEMO, "context_tokens": 512})
    assert placed.status_code == 200, placed.text
    first = placed.json()["instance_id"]
    try:
        before = node.get("/state").json()
        again = post(node, "/place_instance", json={"model_id": DEMO, "context_tokens": 512})
        message = assert_refused(again, 409, "model_already_placed")
        assert first in message and "allow_duplicate" in message
        after = node.get("/state").json()
        # Nothing was placed (the runner's own status events may still move on).
        assert after["instances"] == before["instances"] and list(after["instances"]) == [first]

        replica = post(
            node,
            "/place_instance",
            json={"model_id": DEMO, "context_tokens": 512, "allow_duplicate": True},
        )
        assert replica.status_code == 200, replica.text
        second = replica.json()["instance_id"]
        assert set(node.get("/state").json()["instances"]) == {first, second}
        assert delete(node, f"/instance/{second}").status_code == 200
    finally:
        assert delete(node, f"/instance/{first}").status_code == 200


@pytest.mark.parametrize(
    ("request_kwargs", "status", "code", "needle"),
    [
        (
            {"json": {"model_id": DEMO, "context_tokens": 40000}},
            400,
            "no_valid_placement",
            f"holds: {DEMO_CONTEXT_LENGTH} tokens",
        ),
        (
            {"json": {"model_id": DEMO, "min_nodes": 2}},
            400,
            "no_valid_placement",
            "needs a connected cycle of 2 nodes but only 1 node(s) are eligible",
        ),
        ({"json": {"model_id": "nobody/nothing"}}, 404, "model_not_found", "nobody/nothing"),
        (
            {"content": b'{"model_id": ', "headers": {"content-type": "application/json"}},
            400,
            "http_400",
            "",
        ),
        ({"json": {"model_id": 3}}, 400, "validation_error", "model_id"),
        ({"json": {"model_id": DEMO, "min_nodes": "two"}}, 400, "validation_error", "min_nodes"),
        ({"json": {"model_id": DEMO, "min_nodes": -1}}, 400, "validation_error", "min_nodes"),
        ({"json": {"model_id": DEMO, "min_nodes": 0}}, 400, "validation_error", "min_nodes"),
        ({"json": {"model_id": DEMO, "sharding": "Diagonal"}}, 400, "validation_error", "sharding"),
        ({"json": {"model_id": DEMO, "context_tokens": 255}}, 400, "validation_error", "context"),
        ({"json": {"model_id": DEMO, "excluded_nodes": "x"}}, 400, "validation_error", "excluded"),
        ({"json": {"model_id": DEMO, "modelId": DEMO}}, 400, "validation_error", "modelId"),
    ],
)
def test_refused_placements_leave_nothing_behind(
    node: AppNode,
    request_kwargs: dict[str, Any],
    status: int,
    code: str,
    needle: str,
) -> None:
    before = node.get("/state").json()
    response = post(node, "/place_instance", **request_kwargs)
    message = assert_refused(response, status, code)
    assert needle in message
    if code == "no_valid_placement":
        assert response.headers[FAILURE_HEADER] == "no_valid_placement"
    after = node.get("/state").json()
    # Not even an event: the refusal happened before any command reached the master.
    assert after["lastEventAppliedIdx"] == before["lastEventAppliedIdx"]
    assert after["instances"] == before["instances"] == {}


def test_the_placement_endpoint_shows_what_a_launch_would_stamp(node: AppNode) -> None:
    before = node.get("/state").json()["lastEventAppliedIdx"]
    chosen = node.get("/instance/placement", params={"model_id": DEMO})
    assert chosen.status_code == 200, chosen.text
    body = chosen.json()
    _, instance = untag(body["instance"])
    assert instance["contextTokenLimit"] == body["default_context_tokens"] == 8192
    assert body["kv_bytes_per_token"] == DEMO_KV_BYTES_PER_TOKEN
    refused = node.get("/instance/placement", params={"model_id": DEMO, "min_nodes": 2})
    assert_refused(refused, 400, "no_valid_placement")
    assert refused.headers[FAILURE_HEADER] == "no_valid_placement"
    assert_refused(
        node.get("/instance/placement", params={"model_id": "x/y"}), 404, "model_not_found"
    )
    # Nothing was placed: no instance event since (a runner's or a task's late report
    # from an earlier test may land meanwhile; the index alone would count it).
    since = [e.event for e in read_events(node.node.event_log.path) if e.idx > before]
    placed = (InstanceCreated, InstanceDeleted, InstanceFailed, KeepAliveSet)
    assert not [type(e).__name__ for e in since if isinstance(e, placed)]
    assert node.get("/state").json()["instances"] == {}


def test_an_exact_instance_from_a_preview_is_created_as_is(node: AppNode) -> None:
    [valid] = [p for p in previews(node, context_tokens=1024) if p["error"] is None]
    kind, instance = untag(valid["instance"])
    assert instance["contextTokenLimit"] == 1024
    created = post(node, "/instance", json={"instance": valid["instance"]})
    assert created.status_code == 200, created.text
    body = created.json()
    assert body["instance_id"] == instance["instanceId"]
    assert body["model_id"] == DEMO
    assert body["model_card"]["modelId"] == DEMO
    try:
        state = node.get("/state").json()
        assert state["instances"][body["instance_id"]] == {kind: instance}
        again = post(node, "/instance", json={"instance": valid["instance"]})
        assert_refused(again, 409, "instance_exists")
    finally:
        assert delete(node, f"/instance/{body['instance_id']}").status_code == 200
    assert node.get("/state").json()["instances"] == {}


def _mutated(instance: dict[str, Any], change: str) -> dict[str, Any]:
    mutated = copy.deepcopy(instance)
    _, body = untag(mutated)
    assignments = body["shardAssignments"]
    [(runner, shard)] = assignments["runnerToShard"].items()
    _, shard_body = untag(shard)
    if change == "shard_model":
        shard_body["modelId"] = "someone/else"
    elif change == "model":
        assignments["modelId"] = "nobody/nothing"
        shard_body["modelId"] = "nobody/nothing"
    elif change == "node":
        assignments["nodeToRunner"] = {"12D3KooWnobody": runner}
    elif change == "layers":
        shard_body["endLayer"] = 17
    elif change == "kind":
        mutated = {"NotAnInstance": body}
    return mutated


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ("shard_model", 400, "model_card_identity_mismatch"),
        ("model", 404, "model_not_found"),
        ("node", 400, "no_valid_placement"),
        ("layers", 400, "no_valid_placement"),
        ("kind", 400, "invalid_instance"),
    ],
)
def test_invalid_exact_instances_are_refused(
    node: AppNode, change: str, status: int, code: str
) -> None:
    [valid] = [p for p in previews(node) if p["error"] is None]
    before = node.get("/state").json()["lastEventAppliedIdx"]
    response = post(node, "/instance", json={"instance": _mutated(valid["instance"], change)})
    assert_refused(response, status, code)
    if status == 400 and code != "invalid_instance":
        assert response.headers[FAILURE_HEADER] == code
    assert node.get("/state").json()["lastEventAppliedIdx"] == before


def test_unknown_instances_are_not_found(node: AppNode) -> None:
    assert_refused(node.get("/instance/no-such-instance"), 404, "instance_not_found")
    assert_refused(delete(node, "/instance/no-such-instance"), 404, "instance_not_found")
    assert_refused(
        post(node, "/instance", json={"instance": {}, "extra": 1}), 400, "validation_error"
    )


def test_placement_waits_a_bounded_time_for_node_telemetry(
    tmp_path: Path, shared_models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A node that has joined but not yet reported its memory: the case of a cluster
    # that just formed. The real Node, with no telemetry recorded.
    monkeypatch.setattr(placement_api, "PLACEMENT_INFO_WAIT_SECONDS", 0.5)
    settings = resolve_settings(
        host="127.0.0.1",
        api_port=1,
        config_home=str(tmp_path / "config"),
        data_dir=str(tmp_path / "data"),
        models_dir=str(shared_models_dir),
    )
    live = build_node(settings)
    entry = live.catalog().get(DEMO)
    assert entry is not None

    def attempt(facts: ClusterFacts) -> Placement | PlacementRefusal:
        return place(entry.card, facts, PlacementRequest(), RandomIds())

    async def scenario() -> None:
        live.become_master(term=1)  # a cluster of one, without the fabric
        await live.start()
        started = time.monotonic()
        pending = await placement_api.plan_when_informed(live, attempt)
        assert isinstance(pending, PlacementRefusal)
        assert pending.code == PLACEMENT_INFO_PENDING
        assert time.monotonic() - started >= 0.5
        error = placement_api.placement_error(pending)
        assert (error.status_code, error.code) == (503, PLACEMENT_INFO_PENDING)
        assert error.headers == {FAILURE_HEADER: PLACEMENT_INFO_PENDING}

        # Telemetry that arrives during the wait ends it with a placement.
        source = TelemetrySource(
            node_id=live.node_id,
            identity=NodeIdentityInfo(
                friendly_name="test",
                node_install_id=live.identity.install_id,
                skulk_version=SKULK_VERSION,
            ),
            models_dir=shared_models_dir,
            participation=Participation.FULL,
        )
        reading = await asyncio.to_thread(source.read)
        asyncio.get_running_loop().call_later(0.1, live.record_telemetry, reading)
        result = await placement_api.plan_when_informed(live, attempt)
        assert isinstance(result, Placement)

    try:
        asyncio.run(scenario())
    finally:
        live.close()
