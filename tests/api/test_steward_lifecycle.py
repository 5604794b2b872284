"""The steward's turn cancellation and its liveness canary, on the real app in process.

One app for the module with intelligent-fabric mode on and the demo model as the
brain. A turn is cancelled by its command id or by the client going away mid-turn:
the step generating stops and no further step or tool call starts. Three failed
liveness probes (each times out: the probe's bound is made zero) make the master
replace the steward's placement, and a passing probe leaves it ready again.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from skulk_core.ids import CommandId
from skulk_core.steward.lifecycle import StewardStatus
from skulk_daemon.chat.task import ChatTask, TaskMessage
from skulk_daemon.extensions.context import ExtensionContext
from skulk_daemon.extensions.middleware import (
    BaseChatMiddleware,
    ChatMiddlewareRunner,
    ChatResponseSummary,
    NamedMiddleware,
)
from skulk_daemon.steward import canary, turn
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


@pytest.fixture(autouse=True)
def _probe_deferred(app: AppNode) -> Iterator[None]:
    """The liveness canary's one-token probe (every 60 s on the master) is a task in
    ``/state`` like a turn's step, so a test that checks no step starts after a turn
    would count a probe that falls in its window (a full run on a faster machine saw a
    one-task ``Running`` there once; alone the test passed). Each test runs with the
    next probe an hour away; the liveness test sets its own schedule."""
    steward(app).canary._next = time.monotonic() + 3600
    yield
    steward(app).canary._next = time.monotonic() + canary.CANARY_INTERVAL_SECONDS


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


TRACE_MARKS = ("[surface]", "[tool]", "(baseline)")


def test_the_brain_models_own_id_answers_as_an_ordinary_model_without_tools(
    app: AppNode,
) -> None:
    """Only the reserved id selects the harness: the brain's card id (served here by the
    steward's own instance, the only one of the model) is a plain completion."""
    brain = status(app)["steward_model"]
    body = {
        "model": brain,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "The capital of France is"}],
    }
    answered = app.post("/v1/chat/completions", json=body, timeout=60)
    assert answered.status_code == 200, answered.text
    assert answered.json()["model"] == brain
    message = answered.json()["choices"][0]["message"]
    trace = (message.get("reasoning_content") or "") + (message.get("content") or "")
    assert not any(mark in trace for mark in TRACE_MARKS)
    assert not steward(app).owns(CommandId(answered.headers["X-Skulk-Command-Id"]))
    # The same question to the reserved id runs the harness (its trace shows it).
    steward_turn = app.post(
        "/v1/chat/completions",
        json={
            **body,
            "model": STEWARD,
            "messages": [{"role": "user", "content": "How many nodes?"}],
        },
        timeout=60,
    )
    assert "[surface]" in steward_turn.json()["choices"][0]["message"]["reasoning_content"]


def test_a_turn_that_asks_for_thinking_still_runs_with_thinking_off(
    app: AppNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every generation of the turn (each investigation step) is admitted with thinking
    off, whatever the client asked for; the client going away after the first tool
    step ends the turn early."""
    admitted: list[ChatTask] = []
    real_admit = turn.admit

    def recording_admit(node: Any, task: ChatTask, **kwargs: Any) -> Any:
        admitted.append(task)
        return real_admit(node, task, **kwargs)

    monkeypatch.setattr(turn, "admit", recording_admit)
    body = {
        "model": STEWARD,
        "stream": True,
        "enable_thinking": True,
        "reasoning_effort": "high",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": QUESTION}],
    }
    with app.http.stream("POST", "/v1/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        command_id = response.headers["X-Skulk-Command-Id"]
        lines = _deltas(sse_lines(response))
        next(d for _, d in lines if "[tool]" in (d.get("reasoning_content") or ""))
        # The baseline's line comes before any generation; the client stays until the
        # first investigation step is admitted, then goes away mid-turn.
        wait_for(lambda: admitted, "the first investigation step's admission", timeout=60)
    _settled(app, command_id)
    for task in admitted:
        assert task.enable_thinking is False
        assert task.reasoning_effort is None
        assert "enable_thinking" not in task.extra_template_args


def test_a_steward_gone_after_the_readiness_check_ends_the_turn_in_an_error_chunk(
    app: AppNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check passes on a placement that is gone by the time a step is dispatched
    (a repair at exactly the wrong moment): the stream has begun, so the turn ends
    promptly with an error chunk in the chat-completions error shape, then [DONE]."""
    service = steward(app)
    real_check = service.check

    def check_then_vanish(task: ChatTask) -> StewardStatus:
        return msgspec.structs.replace(real_check(task), instance_id="inst-repaired-away")

    monkeypatch.setattr(service, "check", check_then_vanish)
    body = {"model": STEWARD, "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
    started = time.monotonic()
    with app.http.stream("POST", "/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        raw = list(sse_lines(response))
    assert time.monotonic() - started < 30
    assert raw[-1] == "data: [DONE]"
    errors = [json.loads(x.removeprefix("data: ")) for x in raw if x.startswith('data: {"error"')]
    assert len(errors) == 1
    error = errors[0]["error"]
    assert error["code"] == "instance_unavailable" and error["type"] == "server_error"
    assert "no longer placed" in error["message"]
    contents = [json.loads(x.removeprefix("data: ")) for x in raw if x.startswith("data: {")]
    assert not any((c.get("choices") or [{}])[0].get("delta", {}).get("content") for c in contents)


class _Raises(BaseChatMiddleware):
    async def transform_chat_request(self, context: Any, task_params: ChatTask) -> ChatTask:
        raise RuntimeError("a broken extension")

    async def observe_chat_response(self, context: Any, task_params: Any, summary: Any) -> None:
        raise RuntimeError("a broken observer")


class _DropsTheQuestion(BaseChatMiddleware):
    """Replaces the prompt and leaves the trailing user message empty (so no user
    message is left once the history is filtered), and tries to reroute the model."""

    async def transform_chat_request(self, context: Any, task_params: ChatTask) -> ChatTask:
        messages = (
            TaskMessage(role="system", content="HIJACKED PROMPT"),
            *task_params.messages[1:-1],
            TaskMessage(role="user", content="  "),
        )
        return dataclasses.replace(task_params, model="other/model", messages=messages)


@dataclasses.dataclass
class _Observer(BaseChatMiddleware):
    seen: list[tuple[ChatTask, ChatResponseSummary]] = dataclasses.field(default_factory=list)

    async def observe_chat_response(
        self, context: Any, task_params: ChatTask, summary: ChatResponseSummary
    ) -> None:
        self.seen.append((task_params, summary))


def test_a_transform_leaving_no_question_is_discarded_and_a_raising_middleware_skipped(
    app: AppNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    observer = _Observer()
    runner = ChatMiddlewareRunner(
        [
            NamedMiddleware("raises", _Raises()),
            NamedMiddleware("drops-the-question", _DropsTheQuestion()),
            NamedMiddleware("observer", observer),
        ],
        ExtensionContext(app.node),
    )
    monkeypatch.setattr(app.services.chat, "_hooks", runner)
    question = "How many nodes do you currently have?"
    body = {"model": STEWARD, "messages": [{"role": "user", "content": question}]}
    answered = app.post("/v1/chat/completions", json=body, timeout=60)
    # The steward answers the operator's own question as though no extension ran.
    assert answered.status_code == 200, answered.text
    assert answered.json()["model"] == STEWARD
    content = answered.json()["choices"][0]["message"]["content"]
    assert "1 node" in content
    wait_for(lambda: observer.seen, "the observer", timeout=10)
    time.sleep(0.5)
    assert len(observer.seen) == 1  # once per turn, not per step
    params, summary = observer.seen[0]
    # The params describe the turn that ran: the reserved model, the steward's own
    # prompt and the original question (the discarded transform left no trace).
    assert params.model == STEWARD
    assert [m.role for m in params.messages] == ["system", "user"]
    assert params.messages[0].content == steward(app).system_prompt
    assert params.messages[1].content == question
    assert summary.text == content and not summary.error
