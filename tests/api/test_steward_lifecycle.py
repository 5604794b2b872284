"""The steward's turn cancellation and its liveness canary, on the real app in process.

One app for the module with intelligent-fabric mode on and the demo model as the
brain. A turn is cancelled by its command id or by the client going away mid-turn:
the step generating stops and no further step or tool call starts. Three failed
liveness probes (each times out: the probe's bound is made zero) make the master
replace the steward's placement, and a passing probe leaves it ready again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skulk_core.ids import CommandId
from skulk_daemon.steward import canary
from skulk_daemon.steward.proposals import ProposalBook
from skulk_daemon.steward.service import StewardService
from tests.api.in_process import AppNode
from tests.daemon.serving import sse_lines, wait_for, wait_idle

pytestmark = pytest.mark.slow

STEWARD = "skulk/steward"
QUESTION = "Which node is the busiest, and why? Check every node's telemetry."


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path) -> Iterator[AppNode]:
    with AppNode(
        root=tmp_path_factory.mktemp("steward-lifecycle"),
        models_dir=shared_models_dir,
        config_yaml="intelligent_fabric:\n  enabled: true\n",
    ) as node:
        wait_for(lambda: node.get("/v1/steward").json()["ready"], "the steward", timeout=180)
        yield node


def steward(app: AppNode) -> StewardService:
    service = app.services.steward
    assert service is not None
    return service


def status(app: AppNode) -> dict[str, Any]:
    value: dict[str, Any] = app.get("/v1/steward").json()
    return value


def _deltas(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(raw line, its delta) for each data line of the stream."""
    for line in lines:
        if line.startswith("data: {"):
            body = json.loads(line.removeprefix("data: "))
            choices = body.get("choices") or [{}]
            yield line, choices[0].get("delta") or {}
        else:
            yield line, {}


def _settled(app: AppNode, command_id: str) -> None:
    """The turn is over on the server, its runner idle, and no step starts afterwards."""
    wait_for(lambda: not steward(app).owns(CommandId(command_id)), "the turn to end", timeout=30)
    instance_id = status(app)["instance_id"]
    wait_idle(app, instance_id)
    time.sleep(1.0)
    assert app.get("/state").json()["tasks"] == {}


def test_cancelling_a_turn_by_its_command_id_stops_the_investigation(app: AppNode) -> None:
    body = {
        "model": STEWARD,
        "stream": True,
        "messages": [{"role": "user", "content": QUESTION}],
    }
    with app.http.stream("POST", "/v1/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        command_id = response.headers["X-Skulk-Command-Id"]
        lines = _deltas(sse_lines(response))
        next(d for _, d in lines if "(baseline)" in (d.get("reasoning_content") or ""))
        assert steward(app).owns(CommandId(command_id))
        cancelled = app.http.post(f"/v1/cancel/{command_id}")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json() == {"message": "Steward turn cancelled.", "command_id": command_id}
        asked = time.monotonic()
        rest = list(lines)
        # The step generating stops (within a keep-alive tick), not at its token budget.
        assert time.monotonic() - asked < 10.0
    raw = [line for line, _ in rest]
    assert raw[-1] == "data: [DONE]"
    assert any('"error"' in line for line in raw)
    # At most the step that had already finished generating runs its tool; no answer.
    tools = [d for _, d in rest if "[tool]" in (d.get("reasoning_content") or "")]
    assert len(tools) <= 1
    assert not any(d.get("content") for _, d in rest)
    _settled(app, command_id)
    again = app.http.post(f"/v1/cancel/{command_id}")
    assert again.status_code == 404


def test_a_client_going_away_mid_turn_stops_the_investigation(app: AppNode) -> None:
    body = {
        "model": STEWARD,
        "stream": True,
        "messages": [{"role": "user", "content": QUESTION}],
    }
    with app.http.stream("POST", "/v1/chat/completions", json=body, timeout=120) as response:
        command_id = response.headers["X-Skulk-Command-Id"]
        lines = _deltas(sse_lines(response))
        next(d for _, d in lines if "(baseline)" in (d.get("reasoning_content") or ""))
        assert steward(app).owns(CommandId(command_id))
    # Closed before the answer: the server hears the disconnect and cancels the turn.
    _settled(app, command_id)
    # The steward answers the next question as usual.
    quick = {"model": STEWARD, "messages": [{"role": "user", "content": "How many nodes?"}]}
    answered = app.post("/v1/chat/completions", json=quick, timeout=60)
    assert answered.status_code == 200, answered.text


def test_the_steward_itself_is_never_a_proposal_target(app: AppNode) -> None:
    """Only the hidden steward runs its brain model here: stop and restart find no
    ordinary instance, so no proposal is recorded."""
    book = ProposalBook(app.node)
    arguments = {"model_id": status(app)["steward_model"], "rationale": "test"}
    for tool in ("stop_model", "restart_model"):
        text = app._test_client.blocking_portal.call(book.propose, tool, arguments, "")
        assert text.startswith("no proposal:") and "system instances are never eligible" in text
    assert app.get("/v1/steward/proposals").json()["proposals"] == []


def test_three_failed_liveness_probes_replace_the_steward(
    app: AppNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = status(app)
    assert before["state"] == "ready"
    monkeypatch.setattr(canary, "CANARY_TIMEOUT_SECONDS", 0.0)
    monkeypatch.setattr(canary, "CANARY_INTERVAL_SECONDS", 0.5)
    steward(app).canary._next = 0.0
    wait_for(lambda: status(app)["state"] == "degraded", "a failed probe", timeout=30)
    assert status(app)["ready"] is True  # degraded still answers
    replaced = wait_for(
        lambda: (s := status(app))["instance_id"] not in (None, before["instance_id"]) and s,
        "the replacement placement",
        timeout=60,
    )
    assert replaced["enabled"] is True
    assert before["instance_id"] not in app.get("/state").json()["instances"]
    monkeypatch.undo()
    steward(app).canary._next = 0.0
    wait_for(lambda: status(app)["state"] == "ready", "the replacement ready", timeout=180)
