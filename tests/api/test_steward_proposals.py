"""Steward proposals end to end on the real app: the proposal tool's own code creates
a ``stop_model`` proposal (the model's choice of tool is not what is tested here), an
operator decides it over HTTP, and the master dispatches, refuses or expires it."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from skulk_core.ids import new_command_id
from skulk_core.placement import PlacementRefusal
from skulk_core.state.commands import CreateProposal
from skulk_core.state.proposals import ProposalAction, ProposalStatus, StewardProposal
from skulk_daemon.steward import dispatch
from skulk_daemon.steward.dispatch import ProposalDispatcher
from skulk_daemon.steward.proposals import ProposalBook
from tests.api.in_process import AppNode
from tests.daemon.serving import CONTEXT, DEMO, wait_for


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path) -> Iterator[AppNode]:
    with AppNode(root=tmp_path_factory.mktemp("proposals"), models_dir=shared_models_dir) as node:
        yield node


@pytest.fixture(scope="module")
def instance_id(app: AppNode) -> str:
    placed = app.post(
        "/place_instance", json={"model_id": DEMO, "min_nodes": 1, "context_tokens": CONTEXT}
    )
    assert placed.status_code == 200, placed.text
    value: str = placed.json()["instance_id"]
    return value


def propose_stop(app: AppNode) -> str:
    book = ProposalBook(app.node)
    portal = app._test_client.blocking_portal
    text = portal.call(
        book.propose, "stop_model", {"model_id": DEMO, "rationale": "test"}, "[tool] trace"
    )
    assert text.startswith("proposal prop_"), text
    return text.split()[1]


def proposal(app: AppNode, proposal_id: str) -> dict[str, Any]:
    listed = app.get("/v1/steward/proposals")
    assert listed.status_code == 200, listed.text
    return next(p for p in listed.json()["proposals"] if p["proposal_id"] == proposal_id)


def decide(app: AppNode, proposal_id: str, approved: bool) -> Any:
    return app.post(f"/v1/steward/proposals/{proposal_id}/decision", json={"approved": approved})


def test_a_rejected_proposal_changes_nothing_and_decides_only_once(
    app: AppNode, instance_id: str
) -> None:
    pid = propose_stop(app)
    item = proposal(app, pid)
    assert item["status"] == "pending" and item["action"] == "stop_model"
    assert item["target"].startswith(f"model {DEMO} on ")
    expires = datetime.fromisoformat(item["expires_at"]) - datetime.fromisoformat(
        item["created_at"]
    )
    assert expires == timedelta(minutes=10)
    # The audit shows no internal ids.
    assert instance_id not in app.get("/v1/steward/proposals").text
    assert decide(app, pid, False).status_code == 200
    rejected = proposal(app, pid)
    assert rejected["status"] == "rejected" and rejected["decided_by"] == "local_operator"
    assert decide(app, pid, True).status_code == 409
    assert decide(app, "prop_missing", True).status_code == 404
    assert instance_id in app.get("/state").json()["instances"]


def test_the_kill_switch_fails_an_approval_closed(
    app: AppNode, instance_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKULK_FABRIC_CAPABILITIES_DISABLE", "1")
    pid = propose_stop(app)
    assert decide(app, pid, True).status_code == 200
    wait_for(lambda: proposal(app, pid)["status"] == "failed", "the failed approval", 30)
    assert "SKULK_FABRIC_CAPABILITIES_DISABLE" in proposal(app, pid)["outcome"]
    assert instance_id in app.get("/state").json()["instances"]


def test_an_undecided_proposal_expires_at_its_deadline(app: AppNode) -> None:
    now = datetime.now(UTC)
    record = StewardProposal(
        proposal_id=f"prop_{secrets.token_hex(4)}",
        created_at=now,
        expires_at=now + timedelta(seconds=1),
        action=ProposalAction.PLACE_MODEL,
        target_label=f"model {DEMO}",
        rationale="r",
        evidence="e",
        expected_effect="x",
    )
    command = CreateProposal(command_id=new_command_id(), proposal=record, observed_at=now)
    app._test_client.blocking_portal.call(app.node.submit, command)
    wait_for(lambda: proposal(app, record.proposal_id)["status"] == "expired", "expiry", 30)
    assert decide(app, record.proposal_id, True).status_code == 409


def test_a_promoted_master_reissues_a_missing_effect_once(
    app: AppNode, instance_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The master armed the dispatch, then died before its DeleteInstance: the next
    master finds the instance still placed and deletes it, exactly once."""
    portal = app._test_client.blocking_portal

    async def dies_after_arming(self: ProposalDispatcher, proposal_id: str) -> None:
        await self._change(
            proposal_id, ProposalStatus.DISPATCHED, "armed", dispatch=new_command_id()
        )

    monkeypatch.setattr(ProposalDispatcher, "_dispatch", dies_after_arming)
    pid = propose_stop(app)
    assert decide(app, pid, True).status_code == 200
    wait_for(lambda: proposal(app, pid)["status"] == "dispatched", "the armed dispatch", 30)
    assert instance_id in app.get("/state").json()["instances"]
    monkeypatch.undo()
    promoted = ProposalDispatcher(app.node)
    portal.call(promoted.tick)
    portal.call(promoted.close)
    assert proposal(app, pid)["outcome"] == "reissued by the promoted master"
    wait_for(
        lambda: instance_id not in app.get("/state").json()["instances"], "the reissued stop", 30
    )
    record = next(p for p in app.node.state.steward_proposals if p.proposal_id == pid)
    assert record.reissued
    # Another promotion finds the effect present and the reissue spent: nothing more.
    again = ProposalDispatcher(app.node)
    portal.call(again.tick)
    portal.call(again.close)
    assert proposal(app, pid)["status"] == "dispatched"


@pytest.fixture(scope="module")
def second_instance(app: AppNode) -> str:
    placed = app.post(
        "/place_instance", json={"model_id": DEMO, "min_nodes": 1, "context_tokens": CONTEXT}
    )
    assert placed.status_code == 200, placed.text
    value: str = placed.json()["instance_id"]
    return value


def test_an_approved_stop_is_dispatched_and_stops_the_instance(
    app: AppNode, second_instance: str
) -> None:
    instance_id = second_instance
    pid = propose_stop(app)
    accepted = decide(app, pid, True)
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["proposal_id"] == pid and accepted.json()["command_id"]
    wait_for(lambda: proposal(app, pid)["status"] == "dispatched", "the dispatch", 30)
    wait_for(
        lambda: instance_id not in app.get("/state").json()["instances"], "the instance stop", 30
    )


def test_a_public_caller_cannot_read_or_decide_proposals(app: AppNode) -> None:
    public = {"X-Forwarded-For": "203.0.113.9"}
    assert app.get("/v1/steward/proposals", headers=public).status_code == 403
    refused = app.post(
        "/v1/steward/proposals/prop_x/decision", json={"approved": True}, headers=public
    )
    assert refused.status_code == 403


def _propose(app: AppNode, tool: str) -> str:
    book = ProposalBook(app.node)
    arguments = {"model_id": DEMO, "rationale": "test"}
    text = app._test_client.blocking_portal.call(book.propose, tool, arguments, "[tool] trace")
    assert text.startswith("proposal prop_"), text
    return text.split()[1]


def _demo_instances(app: AppNode) -> set[str]:
    instances = app.get("/state").json()["instances"]
    return {
        iid
        for iid, body in instances.items()
        if next(iter(body.values()))["shardAssignments"]["modelId"] == DEMO
    }


def test_approved_place_and_restart_are_dispatched_through_the_planner(app: AppNode) -> None:
    """Last in the module (the earlier tests stopped their instances): an approved
    place_model runs the normal planner; an approved restart_model tears the exact
    instance down and places the model again once its capacity is released."""
    assert _demo_instances(app) == set()
    placing = _propose(app, "place_model")
    assert decide(app, placing, True).status_code == 200
    wait_for(lambda: proposal(app, placing)["status"] == "dispatched", "the placement", 30)
    assert proposal(app, placing)["outcome"] == "placement by the normal planner dispatched"
    (placed,) = wait_for(lambda: _demo_instances(app), "the placed instance", 30)

    restarting = _propose(app, "restart_model")
    assert proposal(app, restarting)["target"].startswith(f"model {DEMO} on ")
    assert decide(app, restarting, True).status_code == 200
    wait_for(lambda: proposal(app, restarting)["status"] == "dispatched", "the re-placement", 60)
    assert proposal(app, restarting)["outcome"] == "re-placement after teardown dispatched"
    (replaced,) = wait_for(lambda: _demo_instances(app), "the re-placed instance", 30)
    assert replaced != placed
    assert placed not in app.get("/state").json()["instances"]


def test_a_promoted_master_dispatches_an_approval_never_armed(
    app: AppNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The master died between the replicated approval and arming it: the next master
    carries the approval out (after the restart test, one ordinary instance is left)."""
    (instance,) = _demo_instances(app)

    async def dies_before_arming(self: ProposalDispatcher, proposal_id: str) -> None:
        return None

    monkeypatch.setattr(ProposalDispatcher, "_dispatch", dies_before_arming)
    pid = _propose(app, "stop_model")
    assert decide(app, pid, True).status_code == 200
    wait_for(lambda: proposal(app, pid)["status"] == "approved", "the approval", 30)
    monkeypatch.undo()
    promoted = ProposalDispatcher(app.node)
    portal = app._test_client.blocking_portal
    portal.call(promoted.tick)
    wait_for(lambda: proposal(app, pid)["status"] == "dispatched", "the dispatch", 30)
    portal.call(promoted.close)
    wait_for(lambda: instance not in _demo_instances(app), "the stop", 30)
    # The promotion reissued nothing else: the place proposal's instance, torn down by
    # the restart since, was an effect already applied, not a missing one.
    time.sleep(1.0)
    assert _demo_instances(app) == set()


def test_the_kill_switch_fails_a_promoted_masters_recovery_closed(
    app: AppNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    placed = app.post(
        "/place_instance", json={"model_id": DEMO, "min_nodes": 1, "context_tokens": CONTEXT}
    )
    assert placed.status_code == 200, placed.text
    instance = placed.json()["instance_id"]

    async def dies_after_arming(self: ProposalDispatcher, proposal_id: str) -> None:
        await self._change(
            proposal_id, ProposalStatus.DISPATCHED, "armed", dispatch=new_command_id()
        )

    monkeypatch.setattr(ProposalDispatcher, "_dispatch", dies_after_arming)
    pid = _propose(app, "stop_model")
    assert decide(app, pid, True).status_code == 200
    wait_for(lambda: proposal(app, pid)["status"] == "dispatched", "the armed dispatch", 30)
    monkeypatch.undo()
    monkeypatch.setenv("SKULK_FABRIC_CAPABILITIES_DISABLE", "1")
    promoted = ProposalDispatcher(app.node)
    portal = app._test_client.blocking_portal
    portal.call(promoted.tick)
    portal.call(promoted.close)
    failed = proposal(app, pid)
    assert failed["status"] == "failed" and "recovery failed closed" in failed["outcome"]
    assert instance in _demo_instances(app)


def test_a_restart_that_gets_no_capacity_fails_with_the_outcome(
    app: AppNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Last in the module (the kill-switch test left one ordinary instance): the exact
    instance is torn down, the planner never finds room for the replacement (every
    plan refused, as on a full cluster), and once the wait (the spec's five minutes,
    made one second here) runs out the proposal fails with why; nothing is re-placed."""
    (instance,) = _demo_instances(app)
    steward = app.services.steward
    assert steward is not None
    assert steward.dispatcher.restart_capacity_wait == timedelta(minutes=5)
    monkeypatch.setattr(steward.dispatcher, "restart_capacity_wait", timedelta(seconds=1))
    full = PlacementRefusal(code="insufficient_memory", message="no node has room")
    monkeypatch.setattr(dispatch, "place", lambda *args, **kwargs: full)
    pid = _propose(app, "restart_model")
    assert decide(app, pid, True).status_code == 200
    failed = wait_for(
        lambda: (p := proposal(app, pid))["status"] == "failed" and p, "the failed restart", 30
    )
    assert failed["outcome"] == (
        "replacement capacity did not become available within 1 s (no placement: no node has room)"
    )
    assert instance not in app.get("/state").json()["instances"]
    assert _demo_instances(app) == set()
