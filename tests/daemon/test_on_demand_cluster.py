"""Load on demand across two nodes: a request at a follower loads, the master unloads.

The follower's API places the model (its PlacementService), the Ollama request's
``keep_alive`` travels to the master as a command, and the master's keep-alive agent,
which hears every task wherever it ran, unloads the instance for both nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.serving import DEMO, wait_for
from tests.daemon_process import DaemonProcess
from tests.lazy_sdk import ollama

pytestmark = pytest.mark.slow

CONFIG = "inference:\n  load_on_demand: true\n  keep_alive: 1h\n"


@pytest.fixture(scope="module")
def nodes(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[list[DaemonProcess]]:
    root = tmp_path_factory.mktemp("on-demand-cluster")
    first = DaemonProcess(root=root / "a", models_dir=shared_models_dir)
    second = DaemonProcess(
        root=root / "b",
        models_dir=shared_models_dir,
        peers=[first.fabric_address],
    )
    made = [first, second]
    try:
        for node in made:
            node.config_home.mkdir(parents=True, exist_ok=True)
            (node.config_home / "skulk.yaml").write_text(CONFIG, encoding="utf-8")
            node.start()
        yield made
    finally:
        for node in made:
            node.kill()


def intents(node: DaemonProcess) -> list[dict[str, Any]]:
    state = node.get("/state").json()
    return [
        state.get("placementIntents", {}).get(instance_id, {})
        for instance_id, tagged in state["instances"].items()
        if next(iter(tagged.values()))["shardAssignments"]["modelId"] == DEMO
    ]


def test_a_follower_loads_on_demand_and_the_master_unloads(nodes: list[DaemonProcess]) -> None:
    def follower() -> DaemonProcess | None:
        state = nodes[0].get("/state").json()
        master = state.get("masterNodeId")
        if master is None or len(state["topology"]["nodes"]) != 2:
            return None
        found = [n for n in nodes if n.get("/node_id").json() != master]
        # Both nodes' telemetry must have arrived, or a placement waits for it.
        return found[0] if len(state.get("nodeMemory", {})) == 2 else None

    api: DaemonProcess = wait_for(follower, "two nodes and a master", 120)
    client = ollama.Client(host=f"{api.url}/ollama", timeout=300)
    try:
        reply = client.generate(model=DEMO, prompt="Count: one, two,", options={"num_predict": 3})
        assert reply.done
        for node in nodes:
            wait_for(
                lambda node=node: [i.get("keepAliveSeconds") for i in intents(node)] == [3600.0],
                "the on-demand instance on every node",
                30,
            )
        unload = client.generate(model=DEMO, prompt="", keep_alive=0)
        assert unload.done_reason == "unload"
        for node in nodes:
            wait_for(lambda node=node: intents(node) == [], "the master to unload it", 120)
    finally:
        client.close()
