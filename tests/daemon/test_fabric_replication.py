"""Replication's pure parts and the data plane, without sockets.

The master's retained tail decides what a follower that asks for a sync gets
(nothing, batches, or a snapshot); a follower's catch-up buffer applies strictly in
order and paces its asks; the data plane delivers a command's frames to its owner
in order or breaks the stream loudly."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Coroutine
from typing import Any

import msgspec
import pytest

from skulk_core.cluster.fabric import (
    MAX_DATA_PAYLOAD_BYTES,
    MAX_EVENTS_PER_FRAME,
    DataFrame,
    EventBatch,
    Snapshot,
    SyncRequest,
)
from skulk_core.ids import CommandId, NodeId
from skulk_core.state.events import IndexedEvent
from skulk_core.state.state import State
from skulk_daemon.fabric.data_plane import DataPlane, StreamBroken
from skulk_daemon.fabric.replication import (
    MAX_BUFFERED_EVENTS,
    RETAINED_EVENTS,
    SYNC_BACKOFF_INITIAL,
    SYNC_BACKOFF_MAX,
    CatchUp,
    RetainedTail,
    continues,
)
from tests.core.fabric_samples import ALPHA, BETA, events

TERM = 2


def master_at(last: int) -> State:
    return msgspec.structs.replace(State(), last_event_applied_idx=last)


def tail_of(start: int, stop: int, term: int = TERM) -> RetainedTail:
    tail = RetainedTail()
    tail.extend(events(start, stop, term=term))
    return tail


def flat(batches: list[EventBatch]) -> list[int]:
    return [e.idx for batch in batches for e in batch.events]


# -- RetainedTail.answer ---------------------------------------------------------
#
# A history is identified by the (term, master) of its events: the tail's events were
# all indexed by ALPHA in TERM, and the master's own last event is (TERM, ALPHA).


def ask(last_idx: int, term: int = TERM, master: NodeId | None = ALPHA) -> SyncRequest:
    return SyncRequest(last_idx=last_idx, last_term=term, last_master=master)


def answer(
    tail: RetainedTail, request: SyncRequest, last: int
) -> list[EventBatch] | Snapshot | None:
    return tail.answer(request, master_at(last), TERM, ALPHA)


def snapshot_at(last: int) -> Snapshot:
    return Snapshot(state=master_at(last), last_term=TERM, last_master=ALPHA)


def test_a_follower_that_is_up_to_date_gets_nothing() -> None:
    assert answer(tail_of(0, 10), ask(9), 9) is None
    assert answer(RetainedTail(), ask(9), 9) is None  # even with nothing retained


def test_a_follower_behind_within_the_tail_gets_the_rest_in_bounded_batches() -> None:
    last = 3 * MAX_EVENTS_PER_FRAME + 7
    got = answer(tail_of(0, last + 1), ask(5), last)
    assert isinstance(got, list)
    assert all(0 < len(b.events) <= MAX_EVENTS_PER_FRAME for b in got)
    assert len(got) == -(-(last - 5) // MAX_EVENTS_PER_FRAME)
    assert flat(got) == list(range(6, last + 1))


def test_an_empty_follower_gets_batches_when_the_tail_starts_at_zero() -> None:
    got = answer(tail_of(0, 4), ask(-1, 0, None), 3)
    assert isinstance(got, list) and flat(got) == [0, 1, 2, 3]


def test_an_empty_follower_gets_a_snapshot_when_the_tail_starts_later() -> None:
    assert answer(tail_of(5, 9), ask(-1, 0, None), 8) == snapshot_at(8)
    assert answer(RetainedTail(), ask(-1, 0, None), 8) == snapshot_at(8)


def test_a_follower_behind_the_tail_gets_a_snapshot() -> None:
    tail = tail_of(100, 110)
    for last_idx in (3, 98, 99):  # 99: the tail cannot vouch for the history of idx 99
        assert answer(tail, ask(last_idx), 109) == snapshot_at(109), last_idx
    within = answer(tail, ask(100), 109)
    assert isinstance(within, list) and flat(within) == list(range(101, 110))


def test_a_follower_ahead_of_the_master_gets_a_snapshot() -> None:
    assert answer(tail_of(0, 10), ask(12), 9) == snapshot_at(9)


def test_a_diverged_follower_gets_a_snapshot() -> None:
    tail = tail_of(0, 10)
    # Its idx 6 was indexed in another term (a master that lost an election while
    # partitioned), or in this term by another master (two claims across a partition).
    assert answer(tail, ask(6, term=TERM - 1), 9) == snapshot_at(9)
    assert answer(tail, ask(6, master=BETA), 9) == snapshot_at(9)
    # Level with the master, but on another history: diverged as well.
    assert answer(tail, ask(9, term=TERM + 1), 9) == snapshot_at(9)
    assert answer(tail, ask(9, master=BETA), 9) == snapshot_at(9)


def test_the_tail_is_bounded_and_restarts_at_a_hole() -> None:
    tail = tail_of(0, RETAINED_EVENTS + 5)
    assert len(tail.events) == RETAINED_EVENTS
    assert tail.events[0].idx == 5 and tail.events[-1].idx == RETAINED_EVENTS + 4
    tail.extend(events(RETAINED_EVENTS + 50, RETAINED_EVENTS + 52))
    assert [e.idx for e in tail.events] == [RETAINED_EVENTS + 50, RETAINED_EVENTS + 51]


# -- CatchUp ---------------------------------------------------------------------


def idxs(ready: list[IndexedEvent]) -> list[int]:
    return [e.idx for e in ready]


def test_in_order_events_are_released_at_once() -> None:
    catch_up = CatchUp()
    assert idxs(catch_up.accept(events(0, 3), -1)) == [0, 1, 2]
    assert idxs(catch_up.accept(events(3, 5), 2)) == [3, 4]
    assert not catch_up.has_gap


def test_duplicates_and_old_events_are_ignored() -> None:
    catch_up = CatchUp()
    assert catch_up.accept(events(0, 5), 4) == []
    assert idxs(catch_up.accept([*events(3, 7), *events(5, 7)], 4)) == [5, 6]
    assert not catch_up.has_gap


def test_a_gap_buffers_until_it_is_filled_then_releases_everything() -> None:
    catch_up = CatchUp()
    assert catch_up.accept(events(3, 6), 0) == []
    assert catch_up.has_gap
    assert catch_up.accept(events(8, 9), 0) == []
    ready = catch_up.accept(events(1, 3), 0)
    assert idxs(ready) == [1, 2, 3, 4, 5]
    assert catch_up.has_gap  # 8 still waits for 6 and 7
    assert idxs(catch_up.accept(events(6, 8), 5)) == [6, 7, 8]
    assert not catch_up.has_gap


def test_a_snapshot_overtaking_the_buffer_releases_only_what_follows_it() -> None:
    catch_up = CatchUp()
    catch_up.accept(events(5, 8), 0)
    # The follower installed a snapshot at 6: 5 and 6 are obsolete, 7 follows.
    assert idxs(catch_up.accept([], 6)) == [7]
    assert not catch_up.has_gap


def test_the_buffer_is_bounded() -> None:
    catch_up = CatchUp()
    catch_up.accept(events(2, MAX_BUFFERED_EVENTS + 100), 0)
    assert len(catch_up.buffered) == MAX_BUFFERED_EVENTS


def test_a_full_buffer_still_takes_the_event_that_fills_its_gap() -> None:
    catch_up = CatchUp()
    catch_up.accept(events(2, MAX_BUFFERED_EVENTS + 2), 0)
    assert len(catch_up.buffered) == MAX_BUFFERED_EVENTS
    # The sync answer brings the missing idx 1 (and what follows it).
    ready = catch_up.accept(events(1, 10), 0)
    assert idxs(ready)[:1] == [1]


def test_sync_asks_back_off_doubling_to_the_max() -> None:
    catch_up = CatchUp()
    now = 100.0
    waits = []
    for _ in range(8):
        assert catch_up.should_sync(now)
        wait = catch_up.next_sync_at - now
        assert not catch_up.should_sync(now + wait - 1e-6)
        waits.append(round(wait, 6))
        now += wait
    expected = [SYNC_BACKOFF_INITIAL]
    while len(expected) < 8:
        expected.append(min(expected[-1] * 2, SYNC_BACKOFF_MAX))
    assert waits == expected
    assert waits[-1] == SYNC_BACKOFF_MAX and waits[0] < SYNC_BACKOFF_MAX


def test_progress_resets_the_backoff() -> None:
    catch_up = CatchUp()
    now = 0.0
    for _ in range(5):
        catch_up.should_sync(now)
        now = catch_up.next_sync_at
    assert catch_up.backoff == SYNC_BACKOFF_MAX
    catch_up.accept(events(0, 1), -1)
    assert catch_up.backoff == SYNC_BACKOFF_INITIAL
    assert catch_up.should_sync(now)
    assert catch_up.next_sync_at == pytest.approx(now + SYNC_BACKOFF_INITIAL)
    # A batch that releases nothing is no progress.
    catch_up.accept(events(5, 6), 0)
    assert catch_up.backoff == SYNC_BACKOFF_INITIAL * 2


def test_reset_forgets_the_buffer_and_the_pacing() -> None:
    catch_up = CatchUp()
    catch_up.accept(events(4, 6), 0)
    catch_up.should_sync(50.0)
    catch_up.reset()
    assert not catch_up.has_gap
    assert catch_up.should_sync(0.0)
    assert catch_up.backoff == SYNC_BACKOFF_INITIAL * 2


# -- DataPlane -------------------------------------------------------------------

OWN = NodeId("12D3KooWown")
OTHER = NodeId("12D3KooWother")
CMD = CommandId("cmd-1")


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


class Outbox:
    def __init__(self, accept: bool = True) -> None:
        self.sent: list[tuple[NodeId, DataFrame]] = []
        self.accept = accept

    def __call__(self, owner: NodeId, frame: DataFrame) -> bool:
        self.sent.append((owner, frame))
        return self.accept


def frame(seq: int, payload: bytes = b"", *, final: bool = False) -> DataFrame:
    return DataFrame(command_id=CMD, seq=seq, payload=payload or f"p{seq}".encode(), final=final)


async def collect(plane: DataPlane, limit: int, frames: list[DataFrame]) -> list[bytes]:
    stream = plane.open(CMD, limit)
    for f in frames:
        plane.deliver(f)
    return [payload async for payload in stream.frames()]


def test_frames_arrive_in_order_and_the_final_one_ends_the_stream() -> None:
    async def main() -> None:
        plane = DataPlane(OWN, Outbox())
        got = await collect(plane, 16, [frame(0), frame(1), frame(2, final=True)])
        assert got == [b"p0", b"p1", b"p2"]
        assert plane.stats.delivered == 3
        # The stream is closed: a straggler has nowhere to go.
        plane.deliver(frame(3))
        assert plane.stats.unknown_stream == 1

    run(main())


def test_a_consumer_reads_frames_that_arrive_while_it_waits() -> None:
    async def main() -> None:
        plane = DataPlane(OWN, Outbox())
        stream = plane.open(CMD, 4)

        async def produce() -> None:
            for seq in range(10):
                await asyncio.sleep(0)
                plane.deliver(frame(seq, final=seq == 9))

        producer = asyncio.create_task(produce())
        got = [payload async for payload in stream.frames()]
        await producer
        assert got == [f"p{i}".encode() for i in range(10)]

    run(main())


@pytest.mark.parametrize("bad", [3, 0, 1, 7])
def test_a_sequence_gap_or_repeat_breaks_the_stream(bad: int) -> None:
    async def main() -> None:
        plane = DataPlane(OWN, Outbox())
        got: list[bytes] = []
        stream = plane.open(CMD, 16)
        for f in (frame(0), frame(1), frame(bad), frame(3, final=True)):
            plane.deliver(f)
        with pytest.raises(StreamBroken, match=f"frame {bad} arrived when 2 was expected"):
            async for payload in stream.frames():
                got.append(payload)
        # Nothing after the break is handed out, whatever was queued before it.
        assert got == []
        assert plane.stats.gaps == 1

    run(main())


def test_a_consumer_that_falls_behind_breaks_the_stream() -> None:
    async def main() -> None:
        plane = DataPlane(OWN, Outbox())
        stream = plane.open(CMD, 3)
        for seq in range(5):
            plane.deliver(frame(seq))
        assert plane.stats.overflows == 1
        with pytest.raises(StreamBroken, match="fell too far behind"):
            async for _ in stream.frames():
                pass
        assert plane.stats.overflows == 1  # later frames do not count again

    run(main())


def test_a_final_frame_needs_room_for_its_end_marker() -> None:
    async def main() -> None:
        plane = DataPlane(OWN, Outbox())
        stream = plane.open(CMD, 2)
        plane.deliver(frame(0))
        plane.deliver(frame(1, final=True))  # the payload fits, the end does not
        with pytest.raises(StreamBroken):
            async for _ in stream.frames():
                pass

    run(main())


def test_frames_for_an_unknown_stream_are_counted_and_dropped() -> None:
    plane = DataPlane(OWN, Outbox())
    plane.deliver(frame(0))
    plane.deliver(DataFrame(command_id=CommandId("other"), seq=0, payload=b"x"))
    assert plane.stats.unknown_stream == 2 and plane.stats.delivered == 0


def test_a_stream_opened_for_one_sender_takes_no_other_node_s_frames() -> None:
    async def main() -> None:
        plane = DataPlane(OWN, Outbox())
        serving, stranger = NodeId("serving"), NodeId("stranger")
        stream = plane.open(CMD, 16, sender=serving)
        # A stranger that knows (or guesses) the command id: dropped and counted,
        # and it does not consume the sequence number the real sender uses next.
        plane.deliver(frame(0, b"forged", final=True), stranger)
        plane.deliver(frame(0), serving)
        plane.deliver(frame(1, final=True), serving)
        assert [payload async for payload in stream.frames()] == [b"p0", b"p1"]
        assert plane.stats.foreign == 1 and plane.stats.delivered == 2

    run(main())


def test_frames_for_this_node_never_touch_the_network() -> None:
    async def main() -> None:
        outbox = Outbox()
        plane = DataPlane(OWN, outbox)
        stream = plane.open(CMD)
        assert plane.send(OWN, CMD, 0, b"local", final=True)
        assert [p async for p in stream.frames()] == [b"local"]
        assert outbox.sent == []

    run(main())


def test_frames_for_another_node_go_to_it() -> None:
    outbox = Outbox(accept=False)
    plane = DataPlane(OWN, outbox)
    assert plane.send(OTHER, CMD, 4, b"tok", final=True) is False  # the transport's verdict
    assert outbox.sent == [(OTHER, DataFrame(command_id=CMD, seq=4, payload=b"tok", final=True))]


def test_the_payload_is_bounded() -> None:
    outbox = Outbox()
    plane = DataPlane(OWN, outbox)
    assert plane.send(OTHER, CMD, 0, b"\0" * MAX_DATA_PAYLOAD_BYTES)
    with pytest.raises(ValueError, match=str(MAX_DATA_PAYLOAD_BYTES)):
        plane.send(OTHER, CMD, 1, b"\0" * (MAX_DATA_PAYLOAD_BYTES + 1))
    with pytest.raises(ValueError):
        plane.send(OWN, CMD, 1, b"\0" * (MAX_DATA_PAYLOAD_BYTES + 1))
    assert len(outbox.sent) == 1


def test_a_batch_continues_only_the_history_it_was_indexed_after() -> None:
    # The follower holds 0..4, its last event indexed in term 1 by ALPHA.
    follows = EventBatch(events=tuple(events(5, 8)), prev_term=1, prev_master=ALPHA)
    assert continues(follows, 4, 1, ALPHA)
    # The same indices after another master's event 4: histories diverged at 4.
    assert not continues(follows, 4, 1, BETA)
    assert not continues(follows, 4, 2, ALPHA)
    # A batch overlapping the follower's last event is judged by that event.
    overlap = EventBatch(events=tuple(events(3, 8)))
    assert continues(overlap, 4, 1, ALPHA)
    assert not continues(overlap, 4, 1, BETA)
    # Past a gap, or into an empty history, nothing can be judged yet.
    assert continues(EventBatch(events=tuple(events(9, 10))), 4, 7, BETA)
    assert continues(EventBatch(events=tuple(events(0, 3))), -1, 0, None)
    # Old news entirely before the follower's last event carries nothing to compare.
    assert continues(
        EventBatch(
            events=tuple(
                events(0, 2),
            )
        ),
        4,
        9,
        BETA,
    )


def test_a_batch_that_skips_indices_is_judged_by_the_event_of_that_index() -> None:
    # Found by the fabric fuzz: positions are not indices when a batch has holes.
    holed = EventBatch(events=(*events(3, 4), *events(5, 6)))
    assert continues(holed, 5, 1, ALPHA)
    assert not continues(holed, 5, 1, BETA)
    assert continues(holed, 4, 9, BETA)  # 4 is not in it: nothing to compare


def test_catch_up_batches_carry_the_event_before_each() -> None:
    tail = RetainedTail()
    tail.extend(events(0, 1200))
    answer = tail.answer(
        SyncRequest(last_idx=99, last_term=1, last_master=ALPHA),
        State(last_event_applied_idx=1199),
        1,
        ALPHA,
    )
    assert isinstance(answer, list) and len(answer) > 1
    assert (answer[0].prev_term, answer[0].prev_master) == (1, ALPHA)
    for before, batch in itertools.pairwise(answer):
        assert (batch.prev_term, batch.prev_master) == (
            before.events[-1].term,
            before.events[-1].indexed_by,
        )
