"""The converted MLX demo as an ``MlxRing`` over two daemons: each node's runner
holds its share of the layers (rank 0 also the embeddings and the head) and the
ranks talk over MLX's ring backend through the cluster's gates. It answers as the
whole model does, and when the node holding rank 0 goes, the cluster places the
model again on the survivor, which answers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from skulk_daemon.models.mlx_demo import MLX_DEMO_MODEL_ID, mlx_installed
from skulk_daemon.telemetry.mlx_probe import mlx_runs
from tests.daemon.pair import linked_pair
from tests.daemon.serving import wait_for
from tests.daemon.test_cluster import node_id
from tests.daemon_process import DaemonProcess
from tests.model_cache import mlx_whole_model_text

pytestmark = [
    pytest.mark.slow,
    # Two loads of the ring and one of the survivor, on a shared 2-core machine.
    pytest.mark.timeout(600),
    pytest.mark.xdist_group("runner_netns"),
    pytest.mark.skipif(not (mlx_installed() and mlx_runs()), reason="MLX does not run here"),
]

IDLE_SETTLE_S = 1.0
IDLE_S = 3.0
IDLE_CPU_SHARE = 0.05
"""Of one core, per runner (with its gate relay), while the ring has nothing to do."""
MLX = str(MLX_DEMO_MODEL_ID)
PROMPT = "The capital of France is"
TOKENS = 8


def ring_of(daemon: DaemonProcess) -> tuple[str, dict[str, Any]] | None:
    """The MLX demo's instance in /state once all its runners serve."""
    state = daemon.get("/state").json()
    for instance_id, tagged in state["instances"].items():
        ((kind, body),) = tagged.items()
        if kind != "MlxRingInstance" or body["shardAssignments"]["modelId"] != MLX:
            continue
        runners = body["shardAssignments"]["nodeToRunner"].values()
        if all("RunnerReady" in state["runners"].get(r, {}) for r in runners):
            return instance_id, body
    return None


def complete(daemon: DaemonProcess) -> str:
    body = {"model": MLX, "prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0}
    answer = httpx.post(f"{daemon.url}/v1/completions", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == TOKENS
    text: str = answer.json()["choices"][0]["text"]
    return text


def runner_cpu(daemon: DaemonProcess) -> list[float]:
    """CPU seconds of each runner of ``daemon``, with its children (the ring's relay)."""
    assert daemon.process is not None
    used = []
    for child in psutil.Process(daemon.process.pid).children():
        if "skulk_daemon.runner" not in " ".join(child.cmdline()):
            continue
        times = [one.cpu_times() for one in [child, *child.children(recursive=True)]]
        used.append(sum(t.user + t.system for t in times))
    return used


def idle_ring_cpu_shares(daemons: tuple[DaemonProcess, ...]) -> list[float]:
    """Each ring runner's share of a core over :data:`IDLE_S` seconds of no requests
    (after :data:`IDLE_SETTLE_S`: the last request's tail is not idling)."""
    time.sleep(IDLE_SETTLE_S)
    before = [seconds for daemon in daemons for seconds in runner_cpu(daemon)]
    started = time.monotonic()
    time.sleep(IDLE_S)
    after = [seconds for daemon in daemons for seconds in runner_cpu(daemon)]
    elapsed = time.monotonic() - started
    assert len(before) == len(after) == len(daemons), (before, after)
    return [(b - a) / elapsed for a, b in zip(before, after, strict=True)]


@pytest.fixture(scope="module")
def whole_model_text(request: pytest.FixtureRequest, shared_models_dir: Path) -> str:
    """What mlx-lm answers with the whole model in one process."""
    cache = request.config.rootpath / ".pytest_cache"
    return mlx_whole_model_text(cache, shared_models_dir, PROMPT, TOKENS)


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path, whole_model_text: str
) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    with linked_pair(tmp_path_factory.mktemp("mlx-ring"), shared_models_dir) as pair:
        yield pair


def test_a_two_node_ring_answers_as_the_whole_model_and_survives_its_serving_node(
    pair: tuple[DaemonProcess, DaemonProcess], whole_model_text: str
) -> None:
    first, second = pair
    placed = httpx.post(
        f"{first.url}/place_instance",
        json={"model_id": MLX, "min_nodes": 2, "instance_meta": "MlxRing", "context_tokens": 512},
        timeout=60,
    )
    assert placed.status_code == 200, placed.text
    instance_id, body = wait_for(lambda: ring_of(first), "the ring to serve", timeout=300)
    assignments = body["shardAssignments"]
    assert set(assignments["nodeToRunner"]) == {node_id(first), node_id(second)}
    shards = [next(iter(s.values())) for s in assignments["runnerToShard"].values()]
    ranges = sorted((s["startLayer"], s["endLayer"]) for s in shards)
    assert (
        ranges[0][0] == 0 and ranges[0][1] == ranges[1][0] and ranges[1][1] == shards[0]["nLayers"]
    )
    assert set(body["ringEndpoints"]) == {node_id(first), node_id(second)}
    assert complete(first) == whole_model_text
    # An idle ring costs (next to) nothing: no rank spins waiting for the next step.
    shares = idle_ring_cpu_shares(pair)
    assert all(share < IDLE_CPU_SHARE for share in shares), shares
    assert complete(second) == whole_model_text

    # The node holding rank 0 (the one that serves) goes away.
    rank0 = next(
        node
        for node, runner in assignments["nodeToRunner"].items()
        if next(iter(assignments["runnerToShard"][runner].values()))["deviceRank"] == 0
    )
    lost, survivor = (first, second) if node_id(first) == rank0 else (second, first)
    lost.kill()

    def replaced() -> tuple[str, dict[str, Any]] | None:
        found = ring_of(survivor)
        return found if found is not None and found[0] != instance_id else None

    _, again = wait_for(replaced, "the model placed again on the survivor", timeout=300)
    assert set(again["shardAssignments"]["nodeToRunner"]) == {node_id(survivor)}
    assert complete(survivor) == whole_model_text
