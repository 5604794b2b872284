"""Helpers for tests that talk to a daemon serving the demo model."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import httpx

from tests.daemon_process import Node, runner_status

DEMO = "local/gemma-3-270m-q4_k_m"
CONTEXT = 1024
PROMPT = [{"role": "user", "content": "Count: one, two, three,"}]


def wait_for(predicate: Any, what: str, timeout: float = 180.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def place(
    daemon: Node, context: int = CONTEXT, model_id: str = DEMO, *, another: bool = False
) -> str:
    """Place ``model_id`` on the daemon's node and wait until its runner is ready;
    ``another`` places a further replica of a model that is placed already."""
    previews = daemon.get("/instance/previews", params={"model_id": model_id}).json()["previews"]
    assert any("error" not in p or p["error"] is None for p in previews), previews
    placed = daemon.post(
        "/place_instance",
        json={
            "model_id": model_id,
            "sharding": "Pipeline",
            "instance_meta": "MlxRing",
            "min_nodes": 1,
            "context_tokens": context,
            **({"allow_duplicate": True} if another else {}),
        },
        timeout=30,
    )
    assert placed.status_code == 200, placed.text
    instance_id: str = placed.json()["instance_id"]
    wait_for(lambda: daemon.runner_status(instance_id) == "RunnerReady", "RunnerReady")
    return instance_id


@runtime_checkable
class Settles(Protocol):
    """A node whose background reports a test can wait for (the in-process app)."""

    def settle(self) -> None: ...


def wait_idle(daemon: Node, instance_id: str) -> None:
    """Wait until the instance's runner is ready again with no task in flight.

    On an in-process node the node's reports are applied first, so an earlier
    answered request's task is gone from ``/state`` for good once this returns (a
    daemon process applies them a moment after it answers)."""
    if isinstance(daemon, Settles):
        daemon.settle()

    def idle() -> bool:
        # One /state a poll: the runner's status is read from the same answer.
        state = daemon.get("/state").json()
        return runner_status(state, instance_id) == "RunnerReady" and not state["tasks"]

    wait_for(idle, "the runner to be idle again", timeout=30)


def sse_lines(response: httpx.Response) -> Iterator[str]:
    for line in response.iter_lines():
        if line:
            yield line
