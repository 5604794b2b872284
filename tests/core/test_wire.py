from datetime import UTC, datetime

from skulk_core.cluster.state_document import render_state
from skulk_core.cluster.telemetry import (
    HealthLevel,
    NodeHealth,
    NodeIdentityInfo,
    NodeMemory,
    NodeResources,
    NodeSystem,
    NodeTelemetry,
    Participation,
)
from skulk_core.ids import InstanceId, ModelId, NodeId, NodeInstallId, RunnerId
from skulk_core.models.cards import Memory
from skulk_core.state.shards import (
    MlxRingInstance,
    PipelineShardMetadata,
    RunnerFailed,
    RunnerReady,
    ShardAssignments,
)
from skulk_core.state.state import State
from skulk_core.wire import to_wire

NODE = NodeId("12D3KooWnode")


def _state() -> State:
    instance = MlxRingInstance(
        instance_id=InstanceId("i1"),
        shard_assignments=ShardAssignments(
            model_id=ModelId("local/m"),
            node_to_runner={NODE: RunnerId("r1")},
            runner_to_shard={
                RunnerId("r1"): PipelineShardMetadata(
                    model_id=ModelId("local/m"),
                    device_rank=0,
                    world_size=1,
                    start_layer=0,
                    end_layer=18,
                    n_layers=18,
                )
            },
        ),
        context_token_limit=8192,
    )
    return State(
        instances={InstanceId("i1"): instance},
        runners={RunnerId("r1"): RunnerReady(), RunnerId("r2"): RunnerFailed(error_message="boom")},
        last_seen={NODE: datetime(2026, 11, 30, 1, 2, 3, tzinfo=UTC)},
    )


def test_instances_and_runners_are_single_key_tagged_camel_case() -> None:
    wire = to_wire(_state())
    assert isinstance(wire, dict)
    instance = wire["instances"]["i1"]  # type: ignore[index,call-overload]
    assert list(instance) == ["MlxRingInstance"]
    body = instance["MlxRingInstance"]
    assert body["instanceId"] == "i1"
    assert body["contextTokenLimit"] == 8192
    shard = body["shardAssignments"]["runnerToShard"]["r1"]
    assert shard == {
        "PipelineShardMetadata": {
            "modelId": "local/m",
            "deviceRank": 0,
            "worldSize": 1,
            "startLayer": 0,
            "endLayer": 18,
            "nLayers": 18,
        }
    }
    assert body["shardAssignments"]["nodeToRunner"] == {NODE: "r1"}
    assert wire["runners"] == {  # type: ignore[index]
        "r1": {"RunnerReady": {}},
        "r2": {"RunnerFailed": {"errorMessage": "boom"}},
    }
    assert wire["lastSeen"] == {NODE: "2026-11-30T01:02:03+00:00"}  # type: ignore[index]
    assert wire["lastEventAppliedIdx"] == -1  # type: ignore[index]


def test_render_state_puts_telemetry_beside_state() -> None:
    reading = NodeTelemetry(
        node_id=NODE,
        identity=NodeIdentityInfo(
            friendly_name="box",
            node_install_id=NodeInstallId("0b7e3c58-5a3c-4c5e-8f4f-3a2f6e1d9c10"),
            skulk_version="0.1.0",
        ),
        memory=NodeMemory(ram_total=Memory(in_bytes=100), ram_available=Memory(in_bytes=40)),
        system=NodeSystem(
            os="Linux",
            os_version="6",
            machine="x86_64",
            cpu_model="cpu",
            cpu_count=2,
            hostname="box",
            python_version="3.11",
        ),
        resources=NodeResources(
            backends=("llama_cpp",),
            participation=Participation.FULL,
            api_available=True,
            data_transport="zmq",
        ),
        observed_at=datetime(2026, 11, 30, tzinfo=UTC),
    )
    doc = render_state(_state(), {NODE: reading}, {NODE: NodeHealth(level=HealthLevel.OK)})
    assert doc["nodeMemory"] == {
        NODE: {
            "ramTotal": {"inBytes": 100},
            "ramAvailable": {"inBytes": 40},
            "swapTotal": None,
            "swapAvailable": None,
            "runnersRss": None,
        }
    }
    assert doc["nodeIdentities"][NODE]["nodeInstallId"] == "0b7e3c58-5a3c-4c5e-8f4f-3a2f6e1d9c10"  # type: ignore[index,call-overload]
    assert doc["nodeResources"][NODE]["participation"] == "full"  # type: ignore[index,call-overload]
    assert doc["nodeHealth"] == {NODE: {"level": "ok", "reasons": []}}
    for key in ("instances", "runners", "tasks", "downloads", "topology", "instanceFailures"):
        assert key in doc
