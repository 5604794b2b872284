"""Three real daemons on loopback form one cluster: one master, one ordered State,
kept through the loss of any node, the master included."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.daemon.serving import DEMO, PROMPT, wait_for
from tests.daemon.tailnet import TAILNET_STATUS, fake_tailscale
from tests.daemon_process import DaemonProcess

pytestmark = pytest.mark.slow

# Small enough that a test crosses them: followers catch up from snapshots.
FAST_ENV = {"SKULK_SNAPSHOT_EVERY": "12", "SKULK_RETAINED_EVENTS": "6"}


def diagnostics(daemon: DaemonProcess) -> dict[str, Any]:
    cluster: dict[str, Any] = daemon.get("/v1/diagnostics/node").json()["cluster"]
    return cluster


def replicated(daemon: DaemonProcess) -> dict[str, Any]:
    """The event-sourced part of /state (telemetry differs by when it was read)."""
    state = daemon.get("/state").json()
    keep = (
        "instances",
        "runners",
        "topology",
        "instanceFailures",
        "customModelCards",
        "masterNodeId",
        "electionTerm",
        "lastEventAppliedIdx",
    )
    return {key: state.get(key) for key in keep}


def converged(daemons: list[DaemonProcess], members: int) -> dict[str, Any] | None:
    views = [replicated(d) for d in daemons]
    first = views[0]
    if len(first["topology"]["nodes"]) != members or first.get("masterNodeId") is None:
        return None
    if any(view != first for view in views[1:]):
        return None
    masters = {diagnostics(d)["master"] for d in daemons}
    return first if masters == {first["masterNodeId"]} else None


def three_nodes(root: Path, models_dir: Path) -> Iterator[list[DaemonProcess]]:
    """Nodes a, b and c; only c finds a ``tailscale`` CLI (a fake printing a running
    status: there is no tailscale on this machine), so each node's tailnet identity
    tells them apart."""
    first = DaemonProcess(
        root=root / "a",
        models_dir=models_dir,
        extra_env=FAST_ENV,
    )
    nodes = [first]
    tailnet_path = f"{fake_tailscale(root / 'bin')}{os.pathsep}{os.environ['PATH']}"
    for name in ("b", "c"):
        env = {**FAST_ENV, "PATH": tailnet_path} if name == "c" else FAST_ENV
        nodes.append(
            DaemonProcess(
                root=root / name,
                models_dir=models_dir,
                peers=[first.fabric_address],
                extra_env=env,
            )
        )
    try:
        for node in nodes:
            node.start()
        yield nodes
    finally:
        for node in nodes:
            node.kill()


@pytest.fixture(scope="module")
def shared_cluster(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[list[DaemonProcess]]:
    """Three nodes for the whole module: each test leaves them three converged nodes
    (any master), except the last two, which kill one each."""
    yield from three_nodes(tmp_path_factory.mktemp("cluster"), shared_models_dir)


def node_id(daemon: DaemonProcess) -> str:
    value: str = daemon.get("/node_id").json()
    return value


def custom_card(model_id: str) -> dict[str, Any]:
    """A small custom card ``POST /models/add-card`` takes (a State change to order)."""
    return {
        "modelId": model_id,
        "sourceRepository": model_id,
        "sourceRevision": "0" * 40,
        "storageSize": {"inBytes": 1000},
        "nLayers": 2,
        "hiddenSize": 8,
        "supportsTensor": False,
        "tasks": ["TextGeneration"],
        "ggufFile": "model-Q4_K_M.gguf",
    }


def add_cards(daemon: DaemonProcess, count: int, prefix: str) -> None:
    """Change State ``count`` times through ``daemon`` (forwarded to the master)."""
    for i in range(count):
        card = custom_card(f"test/{prefix}-{i}")
        response = daemon.post("/models/add-card", json={"model_card": card})
        assert response.status_code in (200, 201), response.text


def test_three_nodes_converge_on_one_master_and_one_state(
    shared_cluster: list[DaemonProcess],
) -> None:
    view = wait_for(lambda: converged(shared_cluster, 3), "three nodes to converge", timeout=60)
    ids = {node_id(d) for d in shared_cluster}
    assert set(view["topology"]["nodes"]) == ids
    assert view["masterNodeId"] in ids
    # Every node reports its live fabric connections as topology edges.
    edges = wait_for(
        lambda: len(replicated(shared_cluster[0])["topology"]["connections"]) >= 4 or None,
        "topology edges",
        timeout=30,
    )
    assert edges
    # A command sent to any node reaches the master and is applied everywhere.
    add_cards(shared_cluster[2], 3, "via-c")
    view = wait_for(lambda: converged(shared_cluster, 3), "the cards to replicate", timeout=30)
    assert {f"test/via-c-{i}" for i in range(3)} <= set(view["customModelCards"])


def test_a_restarted_follower_catches_up_from_a_snapshot(
    shared_cluster: list[DaemonProcess],
) -> None:
    view = wait_for(lambda: converged(shared_cluster, 3), "three nodes to converge", timeout=60)
    master_id = view["masterNodeId"]
    follower = next(d for d in shared_cluster if node_id(d) != master_id)
    code, _ = follower.stop(signal.SIGTERM)
    assert code == 0
    writer = next(d for d in shared_cluster if d is not follower)
    # More changes than the master retains: only a snapshot can bring it back.
    add_cards(writer, 15, "while-away")
    follower.start()
    view = wait_for(lambda: converged(shared_cluster, 3), "the follower to catch up", timeout=60)
    assert {f"test/while-away-{i}" for i in range(15)} <= set(view["customModelCards"])
    assert "installed the master's snapshot" in follower.log_text()
    # Its own data dir now holds a snapshot too: a second restart loads it from disk.
    assert (follower.data_dir / "state.snapshot").exists()


def test_a_process_without_the_cluster_key_is_refused(
    shared_cluster: list[DaemonProcess], tmp_path: Path, shared_models_dir: Path
) -> None:
    wait_for(lambda: converged(shared_cluster, 3), "three nodes to converge", timeout=60)
    intruder = DaemonProcess(
        root=tmp_path / "intruder",
        models_dir=shared_models_dir,
        peers=[shared_cluster[0].fabric_address],
        extra_env={"SKULK_CLUSTER_KEY": "not-the-cluster-key-at-all-000000"},
    )
    try:
        intruder.start()
        refused = wait_for(
            lambda: diagnostics(shared_cluster[0])["refusedPeers"] or None, "a refusal", timeout=30
        )
        assert any("cluster key" in r["reason"] for r in refused)
        intruder_id = node_id(intruder)
        assert intruder_id not in replicated(shared_cluster[0])["topology"]["nodes"]
        assert all(p["nodeId"] != intruder_id for p in diagnostics(shared_cluster[0])["peers"])
    finally:
        intruder.kill()


def test_a_master_cut_off_and_back_steps_down_to_the_new_one(
    shared_cluster: list[DaemonProcess],
) -> None:
    """A partition, as the old master sees it: frozen (SIGSTOP) while the others
    elect and move on, then back (SIGCONT). One master afterwards, the newer one,
    and the old master holds every event it missed, none twice."""
    view = wait_for(lambda: converged(shared_cluster, 3), "three nodes to converge", timeout=60)
    old_id = view["masterNodeId"]
    old = next(d for d in shared_cluster if node_id(d) == old_id)
    others = [d for d in shared_cluster if d is not old]
    assert old.process is not None
    old.process.send_signal(signal.SIGSTOP)
    try:
        wait_for(
            lambda: {diagnostics(d)["master"] for d in others} - {old_id, None} or None,
            "the others to elect a new master",
            timeout=60,
        )
        add_cards(others[0], 4, "while-cut-off")
    finally:
        old.process.send_signal(signal.SIGCONT)
    healed = wait_for(lambda: converged(shared_cluster, 3), "the cluster to heal", timeout=60)
    assert healed["masterNodeId"] != old_id
    assert {f"test/while-cut-off-{i}" for i in range(4)} <= set(healed["customModelCards"])
    assert diagnostics(old)["role"] == "follower"


def test_cluster_wide_config_reaches_every_node_without_the_token_in_state(
    shared_cluster: list[DaemonProcess],
) -> None:
    wait_for(lambda: converged(shared_cluster, 3), "three nodes to converge", timeout=60)
    writer, *others = shared_cluster
    token = "hf_" + "Zq7" * 12
    config = writer.get("/config").json()["config"]
    config.update(hf_token=token, logging={"level": "debug", "event_log": True})
    put = httpx.put(f"{writer.url}/config", json=config, timeout=30)
    assert put.status_code == 200, put.text

    def applied(daemon: DaemonProcess) -> bool:
        body = daemon.get("/config").json()
        return bool(
            body["config"]["logging"]["level"] == "debug" and body["editing"]["secrets"]["hf_token"]
        )

    wait_for(lambda: all(applied(d) for d in others), "every node to take the settings", 30)
    for daemon in shared_cluster:
        state = daemon.get("/state")
        assert token not in state.text  # State carries a revision, never the secret
        assert state.json()["clusterSettings"]["hfTokenRevision"]
        assert token not in daemon.get("/config").text
    # A later update that sends no token keeps every node's token.
    reader = others[0]
    unchanged = reader.get("/config").json()["config"]
    unchanged.update(logging={"level": "info", "event_log": True})
    assert httpx.put(f"{reader.url}/config", json=unchanged, timeout=30).status_code == 200
    wait_for(
        lambda: all(
            d.get("/config").json()["config"]["logging"]["level"] == "info" for d in shared_cluster
        ),
        "the info level everywhere",
        30,
    )
    assert all(d.get("/config").json()["editing"]["secrets"]["hf_token"] for d in shared_cluster)


def test_the_cluster_proxy_reports_the_selected_nodes_tailnet(
    shared_cluster: list[DaemonProcess],
) -> None:
    wait_for(lambda: converged(shared_cluster, 3), "three nodes to converge", timeout=60)
    plain, _, tailnet = shared_cluster
    other = node_id(tailnet)
    proxied = plain.get(f"/v1/diagnostics/cluster/{other}")
    assert proxied.status_code == 200, proxied.text
    bundle = proxied.json()
    assert bundle["nodeId"] == other
    assert bundle["tailscale"] == TAILNET_STATUS
    # The node that served the request has no tailscale CLI: its own block says so.
    own = plain.get("/v1/diagnostics/node").json()["tailscale"]
    assert own["running"] is False and own["selfIp"] is None
    back = tailnet.get(f"/v1/diagnostics/cluster/{node_id(plain)}").json()["tailscale"]
    assert back["running"] is False


def alive(cluster: list[DaemonProcess]) -> list[DaemonProcess]:
    """The module's nodes still running (the last two tests each kill one for good)."""
    return [d for d in cluster if d.process is not None and d.process.poll() is None]


# The two tests that kill a node for good come last and share the module's cluster:
# the first leaves two nodes, the second one (each also runs alone on three).


def test_the_master_dies_a_new_one_is_elected_and_the_instance_keeps_serving(
    shared_cluster: list[DaemonProcess],
) -> None:
    cluster = alive(shared_cluster)
    assert len(cluster) == 3
    view = wait_for(lambda: converged(cluster, 3), "three nodes to converge", timeout=60)
    master_id = view["masterNodeId"]
    master = next(d for d in cluster if node_id(d) == master_id)
    survivors = [d for d in cluster if d is not master]
    host = survivors[0]
    placed = httpx.post(
        f"{host.url}/place_instance",
        json={
            "model_id": DEMO,
            "min_nodes": 1,
            "context_tokens": 1024,
            "excluded_nodes": [master_id, node_id(survivors[1])],
        },
        timeout=60,
    )
    assert placed.status_code == 200, placed.text
    instance_id = placed.json()["instance_id"]
    wait_for(lambda: host.runner_status(instance_id) == "RunnerReady", "the runner", timeout=120)

    master.kill()
    new_view = wait_for(
        lambda: (
            converged(survivors, 3)
            if replicated(survivors[0])["masterNodeId"] != master_id
            else None
        ),
        "a new master",
        timeout=60,
    )
    assert new_view["masterNodeId"] in {node_id(d) for d in survivors}
    assert instance_id in new_view["instances"]
    body = {"model": DEMO, "messages": PROMPT, "max_tokens": 4, "temperature": 0}
    answer = httpx.post(f"{host.url}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 4
    # The dead master leaves the topology; its loss failed nothing it did not host.
    gone = wait_for(lambda: converged(survivors, 2), "the dead master's removal", timeout=60)
    assert master_id not in gone["topology"]["nodes"]
    assert instance_id in gone["instances"] and not gone["instanceFailures"]
    # The next test places its own instance on a follower it then loses.
    assert httpx.delete(f"{host.url}/instance/{instance_id}", timeout=30).status_code == 200
    wait_for(
        lambda: not replicated(host)["instances"],
        "the instance to go",
        timeout=60,
    )


def test_a_lost_node_fails_its_instances_naming_the_node(
    shared_cluster: list[DaemonProcess],
) -> None:
    cluster = alive(shared_cluster)
    members = len(cluster)
    assert members >= 2
    view = wait_for(lambda: converged(cluster, members), "the nodes to converge", timeout=60)
    master_id = view["masterNodeId"]
    follower = next(d for d in cluster if node_id(d) != master_id)
    lost_id = node_id(follower)
    others = [node_id(d) for d in cluster if d is not follower]
    placed = httpx.post(
        f"{follower.url}/place_instance",
        json={"model_id": DEMO, "context_tokens": 1024, "excluded_nodes": others},
        timeout=60,
    )
    assert placed.status_code == 200, placed.text
    instance_id = placed.json()["instance_id"]
    follower.kill()
    rest = [d for d in cluster if d is not follower]
    view = wait_for(lambda: converged(rest, members - 1), "the lost node's removal", timeout=60)
    assert instance_id not in view["instances"]
    (failure,) = view["instanceFailures"]
    assert failure["errorCode"] == f"node_lost:{lost_id}"
    assert lost_id in failure["affectedNodeIds"]
