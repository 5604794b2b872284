"""The steward's pure half: its placement plan and status, the deterministic inventory
answers, the step grammar's schema, and the proposal rules with their bounds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from skulk_core.cluster.routing import select_instance
from skulk_core.extensions.capability_nodes import (
    CapabilityNodeAction,
    CapabilityNodeSummary,
    CapabilityNodeSurface,
)
from skulk_core.ids import CommandId, InstanceId, ModelId, NodeId, RunnerId
from skulk_core.state.apply import apply
from skulk_core.state.commands import ChangeProposal, CreateProposal
from skulk_core.state.decide import Refused, decide
from skulk_core.state.events import IndexedEvent
from skulk_core.state.proposals import (
    MAX_PENDING,
    MAX_RECORDS,
    ProposalAction,
    ProposalStatus,
    StewardProposal,
)
from skulk_core.state.shards import (
    MlxRingInstance,
    PipelineShardMetadata,
    RunnerLoading,
    RunnerReady,
    ShardAssignments,
)
from skulk_core.state.state import DownloadProgress, PlacementIntent, State, Topology
from skulk_core.steward.evidence import (
    Unresolved,
    capability_nodes,
    node_names,
    resolve_node,
    version_status,
)
from skulk_core.steward.inventory import deterministic_answer
from skulk_core.steward.lifecycle import (
    LifecycleState,
    PlaceSteward,
    RemoveSteward,
    plan_steward,
    steward_status,
)
from skulk_core.steward.tools import READ_TOOLS, bounded, step_schema
from tests.core.test_health import NOW as READ_AT
from tests.core.test_health import reading

BRAIN = "local/gemma-3-270m-q4_k_m"
NODE = NodeId("node-a")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _instance(iid: str, model: str = BRAIN) -> MlxRingInstance:
    runner = RunnerId(f"r-{iid}")
    shard = PipelineShardMetadata(
        model_id=ModelId(model), device_rank=0, world_size=1, start_layer=0, end_layer=1, n_layers=1
    )
    return MlxRingInstance(
        instance_id=InstanceId(iid),
        shard_assignments=ShardAssignments(
            model_id=ModelId(model),
            runner_to_shard={runner: shard},
            node_to_runner={NODE: runner},
        ),
    )


def _with_steward(state: State, iid: str, model: str = BRAIN, *, ready: bool) -> State:
    inst = _instance(iid, model)
    runner = next(iter(inst.shard_assignments.runner_to_shard))
    return msgspec.structs.replace(
        state,
        instances={**state.instances, inst.instance_id: inst},
        placement_intents={
            **state.placement_intents,
            inst.instance_id: PlacementIntent(system_role="steward"),
        },
        runners={**state.runners, runner: RunnerReady() if ready else RunnerLoading()},
    )


def test_the_plan_places_one_steward_keeps_it_and_removes_it_when_off() -> None:
    empty = State()
    assert plan_steward(empty, enabled=True, brain_model=BRAIN) == [
        PlaceSteward(model_id=ModelId(BRAIN))
    ]
    assert plan_steward(empty, enabled=False, brain_model=BRAIN) == []
    placed = _with_steward(empty, "s1", ready=True)
    assert plan_steward(placed, enabled=True, brain_model=BRAIN) == []
    assert plan_steward(placed, enabled=False, brain_model=BRAIN) == [
        RemoveSteward(instance_id=InstanceId("s1"), reason="intelligent fabric disabled")
    ]
    # Three failed liveness probes replace the placement.
    replaced = plan_steward(placed, enabled=True, brain_model=BRAIN, canary_failures=3)
    assert [type(a) for a in replaced] == [RemoveSteward, PlaceSteward]
    # A duplicate is removed; another brain is replaced.
    twice = _with_steward(placed, "s2", ready=True)
    assert plan_steward(twice, enabled=True, brain_model=BRAIN) == [
        RemoveSteward(instance_id=InstanceId("s2"), reason="duplicate steward")
    ]
    other = plan_steward(placed, enabled=True, brain_model="other/brain")
    assert [type(a) for a in other] == [RemoveSteward, PlaceSteward]


def test_the_status_follows_the_spec_precedence() -> None:
    off = steward_status(State(), enabled=False, brain_model=BRAIN)
    assert off.state == LifecycleState.DISABLED and not off.present
    assert steward_status(State(), enabled=True, brain_model=BRAIN).state == "starting"
    loading = _with_steward(State(), "s1", ready=False)
    status = steward_status(loading, enabled=True, brain_model=BRAIN)
    assert (status.present, status.ready, status.state) == (True, False, "starting")
    staging = msgspec.structs.replace(
        loading,
        downloads={
            NODE: (
                DownloadProgress(
                    model_id=ModelId(BRAIN),
                    status="in_progress",
                    downloaded_bytes=25,
                    total_bytes=100,
                ),
            )
        },
    )
    status = steward_status(staging, enabled=True, brain_model=BRAIN)
    assert (status.state, status.transition, status.progress) == ("downloading", "prestaging", 0.25)
    ready = _with_steward(State(), "s1", ready=True)
    status = steward_status(ready, enabled=True, brain_model=BRAIN)
    assert (status.state, status.instance_id, status.steward_model) == ("ready", "s1", BRAIN)
    assert steward_status(ready, enabled=True, brain_model=BRAIN, canary_failures=1).state == (
        "degraded"
    )


def test_standalone_inventory_questions_get_exact_answers_and_compound_ones_none() -> None:
    state = State(topology=Topology(nodes=(NODE, NodeId("node-b"))))
    names = {NODE: "alpha", NodeId("node-b"): "beta"}
    answer = deterministic_answer("How many nodes do you currently have?", state, names, NOW)
    assert answer is not None and answer.startswith("I currently have 2 nodes: alpha, beta.")
    downloads = deterministic_answer("Are there any downloads in flight?", state, names, NOW)
    assert downloads is not None and downloads.startswith("No downloads are in flight.")
    assert deterministic_answer("How many nodes and which models?", state, names, NOW) is None
    assert deterministic_answer("Why is alpha slow?", state, names, NOW) is None


def test_a_step_can_only_name_live_nodes_and_the_first_must_call_a_tool() -> None:
    schema = step_schema(READ_TOOLS, ("alpha",), (BRAIN,), allow_answer=False)
    tools = [c["properties"]["tool"]["const"] for c in schema["anyOf"]]
    assert "answer" not in tools and "get_node_diagnostics" in tools
    doctor = next(c for c in schema["anyOf"] if c["properties"]["tool"]["const"] == "run_doctor")
    assert doctor["properties"]["arguments"]["properties"]["node_name"]["enum"] == ["alpha"]
    again = step_schema(READ_TOOLS, ("alpha",), (BRAIN,), called=frozenset({"get_cluster_state"}))
    names = [c["properties"]["tool"]["const"] for c in again["anyOf"]]
    assert "get_cluster_state" not in names and names[0] == "answer"
    assert len(bounded("x" * 5000)) == 2000


def _proposal(pid: str, *, lifetime: timedelta = timedelta(minutes=10)) -> StewardProposal:
    return StewardProposal(
        proposal_id=pid,
        created_at=NOW,
        expires_at=NOW + lifetime,
        action=ProposalAction.STOP_MODEL,
        target_label="model x",
        rationale="r",
        evidence="e",
        expected_effect="x",
    )


def _run(state: State, command: CreateProposal | ChangeProposal) -> State | Refused:
    decided = decide(state, command)
    if isinstance(decided, Refused):
        return decided
    for event in decided:
        state = apply(
            state,
            IndexedEvent(
                idx=state.last_event_applied_idx + 1, event=event, origin=NODE, recorded_at=NOW
            ),
        )
    return state


def _create(state: State, pid: str, **kw: timedelta) -> State | Refused:
    return _run(
        state,
        CreateProposal(command_id=CommandId(pid), proposal=_proposal(pid, **kw), observed_at=NOW),
    )


def _change(state: State, pid: str, status: ProposalStatus, at: datetime = NOW) -> State | Refused:
    return _run(
        state,
        ChangeProposal(command_id=CommandId("c"), proposal_id=pid, status=status, observed_at=at),
    )


def test_proposal_lifetimes_and_the_pending_bound_are_enforced_by_the_master() -> None:
    assert isinstance(_create(State(), "p", lifetime=timedelta(minutes=16)), Refused)
    assert isinstance(_create(State(), "p", lifetime=timedelta(0)), Refused)
    state: State | Refused = State()
    for n in range(MAX_PENDING):
        assert isinstance(state, State)
        state = _create(state, f"p{n}")
    assert isinstance(state, State)
    refused = _create(state, "one-too-many")
    assert isinstance(refused, Refused) and refused.code == "too_many_proposals"


def test_a_decision_is_single_use_and_expiry_only_after_the_deadline() -> None:
    state = _create(State(), "p")
    assert isinstance(state, State)
    assert isinstance(_change(state, "p", ProposalStatus.EXPIRED), Refused)
    approved = _change(state, "p", ProposalStatus.APPROVED)
    assert isinstance(approved, State)
    assert approved.steward_proposals[0].decided_at == NOW
    again = _change(approved, "p", ProposalStatus.REJECTED)
    assert isinstance(again, Refused) and again.code == "proposal_conflict"
    missing = _change(state, "nope", ProposalStatus.APPROVED)
    assert isinstance(missing, Refused) and missing.code == "not_found"
    late = NOW + timedelta(minutes=11)
    assert isinstance(_change(state, "p", ProposalStatus.APPROVED, late), Refused)
    expired = _change(state, "p", ProposalStatus.EXPIRED, late)
    assert isinstance(expired, State)
    assert expired.steward_proposals[0].status == ProposalStatus.EXPIRED


def test_the_audit_window_prunes_terminal_records_never_pending_ones() -> None:
    state: State | Refused = State()
    for n in range(MAX_RECORDS):
        assert isinstance(state, State)
        state = _create(state, f"p{n}")
        assert isinstance(state, State)
        if n >= MAX_PENDING - 1:  # keep the pending count under its bound
            state = _change(state, f"p{n}", ProposalStatus.REJECTED)
    assert isinstance(state, State)
    grown = _create(state, "newest")
    assert isinstance(grown, State)
    ids = [p.proposal_id for p in grown.steward_proposals]
    assert len(ids) == MAX_RECORDS
    # The oldest rejected record went; every pending one stayed.
    assert f"p{MAX_PENDING - 1}" not in ids and "p0" in ids and ids[-1] == "newest"


def test_a_dispatch_is_recorded_once_and_reissued_at_most_once() -> None:
    state = _create(State(), "p")
    assert isinstance(state, State)
    state = _change(state, "p", ProposalStatus.APPROVED)
    assert isinstance(state, State)
    state = _change(state, "p", ProposalStatus.DISPATCHED)
    assert isinstance(state, State)
    # A second ordinary dispatch of the same approval is refused.
    assert isinstance(_change(state, "p", ProposalStatus.DISPATCHED), Refused)
    reissue = ChangeProposal(
        command_id=CommandId("r"),
        proposal_id="p",
        status=ProposalStatus.DISPATCHED,
        observed_at=NOW,
        reissued=True,
    )
    once = _run(state, reissue)
    assert isinstance(once, State) and once.steward_proposals[0].reissued
    assert isinstance(_run(once, reissue), Refused)


def test_ordinary_requests_prefer_an_ordinary_instance_over_the_steward() -> None:
    steward = _with_steward(State(), "a-steward", ready=True)
    assert select_instance(steward, ModelId(BRAIN)) is not None  # the fallback
    ordinary = _instance("z-ordinary")
    runner = next(iter(ordinary.shard_assignments.runner_to_shard))
    both = msgspec.structs.replace(
        steward,
        instances={**steward.instances, ordinary.instance_id: ordinary},
        runners={**steward.runners, runner: RunnerReady()},
    )
    chosen = select_instance(both, ModelId(BRAIN))
    assert chosen is not None and chosen.instance_id == "z-ordinary"


def test_node_targets_resolve_by_unique_friendly_name_and_builds_are_reported_as_seen() -> None:
    a, b, c = NodeId("id-a"), NodeId("id-b"), NodeId("id-c")
    state = State(topology=Topology(nodes=(a, b, c)))
    telemetry = {
        a: reading(a, version="1.2.0", commit="abc1234"),
        b: reading(b, version="1.2.0", commit="unknown"),
    }
    names = node_names(state, telemetry)
    # The node without identity telemetry gets a safe fallback name, never its id.
    assert names == {a: "id-a", b: "id-b", c: "node-1"}
    assert resolve_node("id-a", names) == a
    ghost = resolve_node("ghost", names)
    assert isinstance(ghost, Unresolved) and "no live node is named" in ghost.reason
    twins = {a: "same", b: "same"}
    twin = resolve_node("same", twins)
    assert isinstance(twin, Unresolved) and "ambiguous" in twin.reason
    versions = msgspec.to_builtins(version_status(state, telemetry))
    assert versions["nodes"][0] == {"name": "id-a", "version": "1.2.0", "commit": "abc1234"}
    assert versions["nodes"][1]["commit"] is None  # "unknown" is a missing observation
    assert versions["coverage"] == "partial" and versions["nodes_with_unknown_build"] == 1


def _capability(plugin: str, status: str = "ready") -> CapabilityNodeSummary:
    return CapabilityNodeSummary(
        plugin_id=plugin,
        node_id=f"{plugin}-main",
        bundle_id=f"{plugin}-bundle",
        version="2.1.0",
        status=status,  # type: ignore[arg-type]
        owner_available=True,
        surfaces=(
            CapabilityNodeSurface(
                surface_id="ui", title="UI", url="https://host.example/ui?token=s3cr3t"
            ),
        ),
        actions=(
            CapabilityNodeAction(
                action_id="go",
                title="Go",
                kind="descriptor",
                capability_id="demo.run",
                payload={"api_key": "s3cr3t"},
            ),
        ),
    )


def test_the_capability_nodes_tool_projects_current_advertisements_credential_free() -> None:
    a, b = NodeId("id-a"), NodeId("id-b")
    only, stale = NodeId("id-only"), NodeId("id-stale")
    state = State(topology=Topology(nodes=(a, b)))
    with_caps = msgspec.structs.replace
    telemetry = {
        a: with_caps(reading(a), capability_nodes=(_capability("notes"),)),
        b: reading(b),  # no capability nodes: absent, as from /state.capabilityNodes
        # A capability-only host outside the topology, without a usable friendly name.
        only: with_caps(
            reading(only),
            identity=with_caps(reading(only).identity, friendly_name=" "),
            capability_nodes=(_capability("memory", "degraded"),),
        ),
        # Its last reading is older than 90 s: dropped from /state, so from the tool too.
        stale: with_caps(reading(stale, age=120.0), capability_nodes=(_capability("old"),)),
    }
    view = msgspec.to_builtins(capability_nodes(state, telemetry, READ_AT))
    assert [h["host"] for h in view["hosts"]] == ["id-a", "capability-host-1"]
    assert view["hosts"][0]["capability_nodes"] == [
        {
            "plugin": "notes",
            "node": "notes-main",
            "bundle": "notes-bundle",
            "version": "2.1.0",
            "status": "ready",
            "owner_available": True,
        }
    ]
    assert view["hosts"][1]["capability_nodes"][0]["status"] == "degraded"
    assert "no execution authority" in view["note"]
    # Credential-free: no surface URL, action payload or node id reaches the tool result.
    text = msgspec.json.encode(view).decode()
    for secret in ("s3cr3t", "https://", "id-only", "id-stale", "old"):
        assert secret not in text
    # The capability-only host is no topology node and no node-diagnostic target.
    names = node_names(state, telemetry)
    assert list(names) == [a, b]
    assert isinstance(resolve_node("capability-host-1", names), Unresolved)
