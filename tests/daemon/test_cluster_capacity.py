"""Two placements racing through two nodes' APIs for room on a third node's memory:
the master orders them one at a time and admits only what fits, so the node is
never oversubscribed, whichever API each request came through."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from skulk_core.placement.fit import HEADROOM_BYTES
from tests.daemon.serving import DEMO, wait_for
from tests.daemon.test_cluster import converged, node_id
from tests.daemon_process import DaemonProcess

pytestmark = pytest.mark.slow

# The demo at its largest window: its KV cache makes one instance a few hundred MB.
WINDOW = 32768
GIB = 1024**3


@pytest.fixture(scope="module")
def trio(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[tuple[DaemonProcess, DaemonProcess, DaemonProcess, int]]:
    root = tmp_path_factory.mktemp("capacity")
    a = DaemonProcess(root=root / "a", models_dir=shared_models_dir)
    b = DaemonProcess(
        root=root / "b",
        models_dir=shared_models_dir,
        peers=[a.fabric_address],
    )
    host = DaemonProcess(
        root=root / "c",
        models_dir=shared_models_dir,
        peers=[a.fabric_address],
    )
    try:
        a.start()
        b.start()
        # What one instance takes from a node, from a plan that reserves nothing.
        plan = wait_for(
            lambda: (
                (
                    r := httpx.get(
                        f"{a.url}/instance/placement",
                        params={"model_id": DEMO, "context_tokens": WINDOW},
                        timeout=30,
                    )
                ).status_code
                == 200
                and r.json()
            ),
            "a plan for one instance",
            timeout=60,
        )
        one = next(iter(plan["memory_delta_by_node"].values()))
        # Let Skulk's models hold one instance and three quarters on the host: one fits,
        # two do not. A limit, unlike a reserve, does not move with the machine's free
        # memory (runners of earlier tests still giving memory back).
        room = one + HEADROOM_BYTES + one * 3 // 4
        host.config_home.mkdir(parents=True, exist_ok=True)
        (host.config_home / "skulk.yaml").write_text(f"node:\n  memory_limit_gb: {room / GIB}\n")
        host.start()
        wait_for(lambda: converged([a, b, host], 3), "three nodes to converge", timeout=60)
        yield a, b, host, one
    finally:
        for daemon in (a, b, host):
            daemon.kill()


def test_two_racing_placements_cannot_oversubscribe_a_node(
    trio: tuple[DaemonProcess, DaemonProcess, DaemonProcess, int],
) -> None:
    a, b, host, one = trio
    target = node_id(host)
    others = [node_id(a), node_id(b)]
    # Two replicas on purpose (a model already placed is otherwise refused with 409):
    # what is raced here is the host's memory.
    body = {
        "model_id": DEMO,
        "context_tokens": WINDOW,
        "excluded_nodes": others,
        "allow_duplicate": True,
    }

    def place(daemon: DaemonProcess) -> httpx.Response:
        return httpx.post(f"{daemon.url}/place_instance", json=body, timeout=60)

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(place, [a, b]))
    codes = sorted(answer.status_code for answer in answers)
    assert codes == [200, 400], [answer.text for answer in answers]
    refused = next(answer for answer in answers if answer.status_code == 400)
    assert refused.headers["X-Skulk-Placement-Failure"] == "no_valid_placement"
    message = refused.json()["error"]["message"]
    # The refusal names the node and why: memory committed to the instance just placed
    # (planned, and not yet held by its runner).
    assert f"node {target}" in message and "committed to instances placed" in message
    # Exactly one instance, on the host, and it serves.
    instances = a.get("/state").json()["instances"]
    assert len(instances) == 1
    (tagged,) = instances.values()
    (placed,) = tagged.values()
    assert list(placed["shardAssignments"]["nodeToRunner"]) == [target]
    instance_id = next(iter(instances))
    wait_for(lambda: host.runner_status(instance_id) == "RunnerReady", "the instance to serve")
    assert one > 0
