"""The store's pure rules: byte ranges, and the State the store's commands leave."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from skulk_core.ids import CommandId, ModelId, NodeId
from skulk_core.state.apply import apply
from skulk_core.state.commands import AnnounceStoreHost, EvictStoreModel, RegisterNode
from skulk_core.state.decide import decide
from skulk_core.state.events import IndexedEvent, NodeLeft
from skulk_core.state.state import DownloadProgress, State, StoreHost
from skulk_core.store.ranges import ByteRange, RangeRefused, parse_range


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("bytes=0-9", ByteRange(start=0, end=9)),
        ("bytes=5-", ByteRange(start=5, end=99)),
        ("bytes=90-500", ByteRange(start=90, end=99)),
        ("bytes=-10", ByteRange(start=90, end=99)),
        ("bytes=-500", ByteRange(start=0, end=99)),
        ("bytes=100-", RangeRefused(status=416, message="")),
        ("bytes=-0", RangeRefused(status=416, message="")),
        ("bytes=9-3", RangeRefused(status=400, message="")),
        ("bytes=0-1,3-4", RangeRefused(status=400, message="")),
        ("items=0-1", RangeRefused(status=400, message="")),
        ("bytes=-", RangeRefused(status=400, message="")),
        ("bytes=" + "9" * 80 + "-", RangeRefused(status=400, message="")),
    ],
)
def test_parse_range(header: str | None, expected: object) -> None:
    got = parse_range(header, 100)
    if isinstance(expected, RangeRefused):
        assert isinstance(got, RangeRefused) and got.status == expected.status and got.message
    else:
        assert got == expected


def _run(state: State, *commands: object) -> State:
    for command in commands:
        events = decide(state, command)  # type: ignore[arg-type]
        assert isinstance(events, list), events
        for event in events:
            indexed = IndexedEvent(
                idx=state.last_event_applied_idx + 1,
                event=event,
                origin=NodeId("a"),
                recorded_at=datetime.now(UTC),
            )
            state = apply(state, indexed)
    return state


def test_the_store_role_and_evictions_in_state() -> None:
    node, model = NodeId("a"), ModelId("org/model")
    state = _run(
        State(),
        RegisterNode(command_id=CommandId("c1"), node_id=node),
        AnnounceStoreHost(command_id=CommandId("c2"), node_id=node, store=StoreHost(port=12415)),
    )
    assert state.store_hosts == {node: StoreHost(port=12415)}
    # Announcing the same role again changes nothing.
    again = AnnounceStoreHost(command_id=CommandId("c3"), node_id=node, store=StoreHost(port=12415))
    assert decide(state, again) == []
    done = DownloadProgress(model_id=model, status="completed", total_bytes=5)
    other = DownloadProgress(model_id=ModelId("org/other"), status="completed")
    state = msgspec.structs.replace(state, downloads={node: (done, other)})
    at = datetime(2026, 1, 1, tzinfo=UTC)
    state = _run(state, EvictStoreModel(command_id=CommandId("c4"), model_id=model, evicted_at=at))
    assert state.store_evictions == {model: at}
    assert state.downloads == {node: (other,)}
    left = apply(
        state,
        IndexedEvent(
            idx=state.last_event_applied_idx + 1,
            event=NodeLeft(node_id=node),
            origin=node,
            recorded_at=datetime.now(UTC),
        ),
    )
    assert left.store_hosts == {}
