"""The cluster's own commands, decided and applied: who is master, which edges the
topology has, and what losing a node does to the instances it hosted."""

from __future__ import annotations

from datetime import timedelta

from skulk_core.ids import CommandId, InstanceId, ModelId, NodeId, TaskId
from skulk_core.state.apply import apply
from skulk_core.state.commands import (
    Command,
    CreateInstance,
    RecordMasterElected,
    RegisterNode,
    RemoveNode,
    ReportConnections,
    StartTask,
)
from skulk_core.state.decide import Refused, decide, lost_node_error_code
from skulk_core.state.events import (
    ConnectionsReported,
    Event,
    IndexedEvent,
    InstanceFailed,
    MasterElected,
    NodeLeft,
)
from skulk_core.state.state import MAX_FAILURE_AFFECTED_NODES, Connection, State, Task, TaskStatus
from tests.core.fabric_samples import ALPHA, BETA, GAMMA, NOW, edge, instance

LATER = NOW + timedelta(minutes=5)


def _cid() -> CommandId:
    return CommandId("c")


def decided(state: State, command: Command) -> list[Event]:
    events = decide(state, command)
    assert not isinstance(events, Refused), events
    return events


def run(state: State, *commands: Command) -> State:
    """Decide and apply each command in turn, as the master does."""
    for command in commands:
        for event in decided(state, command):
            idx = state.last_event_applied_idx + 1
            state = apply(state, IndexedEvent(idx=idx, event=event, origin=ALPHA, recorded_at=NOW))
    return state


def members(*nodes: NodeId) -> State:
    return run(State(), *(RegisterNode(command_id=_cid(), node_id=n) for n in nodes))


def report(node: NodeId, *connections: Connection) -> ReportConnections:
    return ReportConnections(command_id=_cid(), node_id=node, connections=connections)


def remove(node: NodeId, reason: str = "unseen for 10 s") -> RemoveNode:
    return RemoveNode(command_id=_cid(), node_id=node, reason=reason, observed_at=LATER)


# -- RecordMasterElected ---------------------------------------------------------


def test_a_recorded_election_names_the_master_and_its_term_in_state() -> None:
    state = members(ALPHA, BETA)
    assert state.master_node_id is None and state.election_term == 0
    command = RecordMasterElected(command_id=_cid(), master_node_id=BETA, term=4)
    assert decided(state, command) == [MasterElected(master_node_id=BETA, term=4)]
    state = run(state, command)
    assert (state.master_node_id, state.election_term) == (BETA, 4)
    state = run(state, RecordMasterElected(command_id=_cid(), master_node_id=ALPHA, term=5))
    assert (state.master_node_id, state.election_term) == (ALPHA, 5)
    assert state.topology.nodes == (ALPHA, BETA)  # an election changes nothing else


# -- ReportConnections -----------------------------------------------------------


def test_connections_of_a_node_outside_the_topology_are_ignored() -> None:
    state = members(ALPHA)
    assert decided(state, report(BETA, edge(BETA, ALPHA))) == []


def test_reporting_the_same_connections_again_records_nothing() -> None:
    state = run(members(ALPHA, BETA, GAMMA), report(ALPHA, edge(ALPHA, BETA), edge(ALPHA, GAMMA)))
    assert decided(state, report(ALPHA, edge(ALPHA, GAMMA), edge(ALPHA, BETA))) == []
    # An empty report from a node that never reported is no change either.
    assert decided(state, report(BETA)) == []


def test_a_changed_set_is_recorded_whole() -> None:
    state = run(members(ALPHA, BETA, GAMMA), report(ALPHA, edge(ALPHA, BETA)))
    command = report(ALPHA, edge(ALPHA, BETA), edge(ALPHA, GAMMA))
    assert decided(state, command) == [
        ConnectionsReported(node_id=ALPHA, connections=(edge(ALPHA, BETA), edge(ALPHA, GAMMA)))
    ]
    # The same peer at a new address is a change too.
    moved = report(ALPHA, edge(ALPHA, BETA, port=6000))
    assert len(decided(state, moved)) == 1


def test_edges_to_nodes_outside_the_topology_are_dropped_on_apply() -> None:
    state = run(members(ALPHA, BETA), report(ALPHA, edge(ALPHA, BETA), edge(ALPHA, GAMMA)))
    assert state.topology.connections == (edge(ALPHA, BETA),)


def test_a_report_replaces_only_the_reporting_nodes_edges() -> None:
    state = run(
        members(ALPHA, BETA, GAMMA),
        report(ALPHA, edge(ALPHA, BETA), edge(ALPHA, GAMMA)),
        report(BETA, edge(BETA, ALPHA)),
    )
    state = run(state, report(ALPHA, edge(ALPHA, GAMMA, port=7000)))
    assert set(state.topology.connections) == {edge(BETA, ALPHA), edge(ALPHA, GAMMA, port=7000)}
    # Reporting nothing withdraws every edge of that node.
    state = run(state, report(ALPHA))
    assert state.topology.connections == (edge(BETA, ALPHA),)


# -- RemoveNode ------------------------------------------------------------------


def _hosting() -> State:
    """ALPHA, BETA, GAMMA; i-shared on ALPHA+BETA (with a task), i-beta on BETA,
    i-alpha on ALPHA; BETA's edges reported both ways."""
    task = Task(
        task_id=TaskId("t1"),
        command_id=CommandId("c-task"),
        instance_id=InstanceId("i-shared"),
        kind="chat",
        task_status=TaskStatus.RUNNING,
    )
    return run(
        members(ALPHA, BETA, GAMMA),
        CreateInstance(command_id=_cid(), instance=instance("i-shared", (ALPHA, BETA))),
        CreateInstance(command_id=_cid(), instance=instance("i-beta", (BETA,), "local/b")),
        CreateInstance(command_id=_cid(), instance=instance("i-alpha", (ALPHA,))),
        StartTask(command_id=_cid(), task=task),
        report(BETA, edge(BETA, ALPHA), edge(BETA, GAMMA)),
        report(ALPHA, edge(ALPHA, BETA), edge(ALPHA, GAMMA)),
    )


def test_the_error_code_of_a_lost_node_names_it() -> None:
    assert lost_node_error_code(BETA) == f"node_lost:{BETA}"


def test_removing_a_node_fails_each_instance_it_hosted_then_drops_it() -> None:
    state = _hosting()
    events = decided(state, remove(BETA, "unseen for 10 s"))
    *failed, left = events
    assert left == NodeLeft(node_id=BETA)
    assert all(isinstance(e, InstanceFailed) for e in failed)
    failures = {e.failure.instance_id: e.failure for e in failed if isinstance(e, InstanceFailed)}
    assert set(failures) == {InstanceId("i-shared"), InstanceId("i-beta")}
    shared = failures[InstanceId("i-shared")]
    assert shared.error_code == f"node_lost:{BETA}"
    assert set(shared.affected_node_ids) == {ALPHA, BETA}
    assert shared.model_id == ModelId("local/m")
    assert shared.recorded_at == LATER
    assert BETA in shared.error_message and "unseen for 10 s" in shared.error_message
    only_beta = failures[InstanceId("i-beta")]
    assert only_beta.affected_node_ids == (BETA,)
    assert only_beta.model_id == ModelId("local/b")


def test_after_removal_the_failed_instances_runners_and_tasks_are_gone() -> None:
    before = _hosting()
    state = run(before, remove(BETA))
    assert set(state.instances) == {InstanceId("i-alpha")}
    kept_runners = set(before.instances[InstanceId("i-alpha")].shard_assignments.runner_to_shard)
    assert set(state.runners) == kept_runners
    assert state.tasks == {}
    assert {f.instance_id for f in state.instance_failures} == {"i-shared", "i-beta"}
    assert all(f.error_code == f"node_lost:{BETA}" for f in state.instance_failures)
    assert state.topology.nodes == (ALPHA, GAMMA)
    # Edges from and to the lost node go with it.
    assert state.topology.connections == (edge(ALPHA, GAMMA),)
    assert BETA not in state.last_seen


def test_removing_a_node_that_hosts_nothing_only_drops_it() -> None:
    state = _hosting()
    assert decided(state, remove(GAMMA)) == [NodeLeft(node_id=GAMMA)]
    after = run(state, remove(GAMMA))
    assert after.instances == state.instances and not after.instance_failures


def test_removing_a_node_outside_the_topology_records_nothing() -> None:
    state = _hosting()
    assert decided(state, remove(NodeId("12D3KooWstranger"))) == []
    gone = run(state, remove(BETA))
    assert decided(gone, remove(BETA)) == []  # a second removal (a retry) is a no-op


def test_affected_nodes_are_bounded() -> None:
    many = tuple(NodeId(f"12D3KooWn{i:03}") for i in range(MAX_FAILURE_AFFECTED_NODES + 6))
    state = run(members(*many), CreateInstance(command_id=_cid(), instance=instance("wide", many)))
    (failed, left) = decided(state, remove(many[-1]))
    assert isinstance(failed, InstanceFailed) and left == NodeLeft(node_id=many[-1])
    assert len(failed.failure.affected_node_ids) == MAX_FAILURE_AFFECTED_NODES
    assert failed.failure.error_code == f"node_lost:{many[-1]}"
