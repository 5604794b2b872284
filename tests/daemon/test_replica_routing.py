"""Two replicas of one model on two nodes: a conversation's next turn goes to the
replica that holds its history, whichever node's API it comes through, and moves to
the surviving replica when that node dies."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from skulk_core.cluster.telemetry import TELEMETRY_INTERVAL_SECONDS
from tests.daemon.serving import DEMO, wait_for
from tests.daemon.test_cluster import converged, node_id
from tests.daemon_process import DaemonProcess
from tests.lazy_sdk import openai

pytestmark = pytest.mark.slow

SYSTEM = (
    "You are the keeper of a lighthouse on a rock at the end of the bay. Every evening "
    "you climb the two hundred steps, trim the wick, polish the lens and watch the "
    "ships pass on their way to the harbour. In winter the storms come from the north "
    "and the waves break over the gallery, and you write in your log the name of every "
    "ship you see, the hour, the wind and the state of the sea. "
) * 3
TRIES = 8


def _place(daemon: DaemonProcess, excluded: list[str]) -> str:
    placed = httpx.post(
        f"{daemon.url}/place_instance",
        # Replicas on purpose: a model already placed is otherwise refused (409).
        json={
            "model_id": DEMO,
            "context_tokens": 2048,
            "excluded_nodes": excluded,
            "allow_duplicate": True,
        },
        timeout=60,
    )
    assert placed.status_code == 200, placed.text
    instance_id: str = placed.json()["instance_id"]
    return instance_id


def _ready_everywhere(daemons: list[DaemonProcess], instance_id: str) -> None:
    for daemon in daemons:
        wait_for(lambda d=daemon: d.runner_status(instance_id) == "RunnerReady", "the replica")


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    root = tmp_path_factory.mktemp("replicas")
    # b first: it stays master when a dies, so the dead replica leaves State at once.
    b = DaemonProcess(root=root / "b", models_dir=shared_models_dir)
    a = DaemonProcess(
        root=root / "a",
        models_dir=shared_models_dir,
        peers=[b.fabric_address],
    )
    try:
        b.start()
        a.start()
        wait_for(lambda: converged([a, b], 2), "two nodes to converge", timeout=60)
        yield a, b
    finally:
        a.kill()
        b.kill()


def _turn(client: openai.OpenAI, messages: list[dict[str, str]]) -> tuple[str, int]:
    answer = client.chat.completions.create(
        model=DEMO,
        messages=messages,  # type: ignore[arg-type]
        temperature=0,
        max_tokens=8,
    )
    usage = answer.usage
    assert usage is not None and usage.prompt_tokens_details is not None
    return answer.choices[0].message.content or "", usage.prompt_tokens_details.cached_tokens or 0


def test_a_conversation_follows_its_replica_and_fails_over(
    pair: tuple[DaemonProcess, DaemonProcess],
) -> None:
    a, b = pair
    through_a = openai.OpenAI(base_url=f"{a.url}/v1", api_key="unused", max_retries=0)
    through_b = openai.OpenAI(base_url=f"{b.url}/v1", api_key="unused", max_retries=0)
    # The first replica's id sorts in the upper half, so the second one below can
    # be drawn to sort before it in a few tries (ids are random).
    on_a = _place(a, [node_id(b)])
    for _ in range(TRIES):
        if on_a >= "8":
            break
        assert httpx.delete(f"{a.url}/instance/{on_a}", timeout=30).status_code == 200
        on_a = _place(a, [node_id(b)])
    _ready_everywhere([a, b], on_a)
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Which ship did you see this morning?"},
    ]
    reply, cached = _turn(through_a, messages)
    assert cached == 0  # the first turn is cold

    # A second replica on b, whose id sorts first: a router blind to prefixes would
    # send every request on an idle cluster there (ties go to id order).
    on_b = _place(a, [node_id(a)])
    for _ in range(TRIES):
        if on_b < on_a:
            break
        assert httpx.delete(f"{a.url}/instance/{on_b}", timeout=30).status_code == 200
        on_b = _place(a, [node_id(a)])
    assert on_b < on_a, "could not get a replica id sorting before the first"
    _ready_everywhere([a, b], on_b)
    # Let a's telemetry (which names what it sent to each instance) reach b.
    time.sleep(2 * TELEMETRY_INTERVAL_SECONDS + 0.5)

    # The next turn comes through b's API and still lands on a's replica, which holds
    # the history: its prefix comes from the cache instead of a prefill.
    messages += [
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "And what was the wind like?"},
    ]
    reply, cached = _turn(through_b, messages)
    assert cached >= 64

    # A conversation neither replica has seen goes to the idle one first in id order.
    fresh = [{"role": "system", "content": "Translate to French. " * 30}]
    fresh.append({"role": "user", "content": "Good morning."})
    _, cached = _turn(through_b, fresh)
    assert cached == 0

    # When a dies, the same conversation moves to b's replica and is answered there.
    a.kill()
    wait_for(
        lambda: (
            on_a not in b.get("/state").json()["instances"]
            or b.runner_status(on_a) != "RunnerReady"
        ),
        "b to drop a's replica",
        timeout=60,
    )
    messages += [
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "Did any ship come in late?"},
    ]
    _, cached = _turn(through_b, messages)
    # b's replica never held this conversation: at most the chat template's opening
    # tokens (shared with the fresh one it served) come from its cache.
    assert cached < 8
