"""The State a node restarts with: its snapshot, then the log's events past it."""

from __future__ import annotations

from datetime import UTC, datetime

from skulk_core.ids import NodeId
from skulk_core.state.apply import apply
from skulk_core.state.events import IndexedEvent, NodeJoined
from skulk_core.state.state import State
from skulk_daemon.node.snapshot import StoredSnapshot, resume

MASTER = NodeId("12D3KooWmaster")


def _event(idx: int, term: int) -> IndexedEvent:
    return IndexedEvent(
        idx=idx,
        event=NodeJoined(node_id=NodeId(f"12D3KooW{idx}")),
        origin=MASTER,
        recorded_at=datetime(2026, 11, 30, tzinfo=UTC),
        term=term,
        indexed_by=MASTER,
    )


def test_a_fresh_node_starts_empty() -> None:
    assert resume(None, []) == (State(), 0, None)


def test_the_log_is_replayed_and_its_last_event_sets_term_and_master() -> None:
    events = [_event(0, 1), _event(1, 2)]
    state, term, master = resume(None, events)
    assert state.last_event_applied_idx == 1
    assert set(state.topology.nodes) >= {NodeId("12D3KooW0"), NodeId("12D3KooW1")}
    assert (term, master) == (2, MASTER)


def test_events_the_snapshot_holds_are_not_applied_again() -> None:
    first = _event(0, 1)
    folded = apply(State(), first)
    snapshot = StoredSnapshot(state=folded, last_term=1, last_master=MASTER)
    assert resume(snapshot, [first]) == (folded, 1, MASTER)
    state, term, _ = resume(snapshot, [first, _event(1, 3)])
    assert state.last_event_applied_idx == 1
    assert term == 3
