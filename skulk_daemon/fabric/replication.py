"""Replication: the master's retained tail, and a follower's catch-up buffer.

Only the master indexes events. It broadcasts each durable batch and keeps the
last ``RETAINED_EVENTS`` in memory to answer :class:`SyncRequest`\\ s: a follower
that names an index and term the tail still holds gets the events after it; one
that is too far behind, ahead, or on a diverged history (its event at that index
has another term: a master that lost an election while partitioned) gets a
:class:`Snapshot` of the whole State instead.

A follower applies strictly in order. Events past a gap wait in a bounded buffer
while it asks the master for the missing range, backing off between asks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from skulk_core.cluster.fabric import MAX_EVENTS_PER_FRAME, EventBatch, Snapshot, SyncRequest
from skulk_core.ids import NodeId
from skulk_core.state.events import IndexedEvent
from skulk_core.state.state import State
from skulk_daemon.node.snapshot import positive_env

RETAINED_EVENTS: Final = positive_env("SKULK_RETAINED_EVENTS", 4096)
"""Events the master keeps for catch-up (``SKULK_RETAINED_EVENTS`` overrides it)."""
MAX_BUFFERED_EVENTS: Final = 8192
SYNC_BACKOFF_INITIAL: Final = 0.2
SYNC_BACKOFF_MAX: Final = 2.0


@dataclass(slots=True)
class RetainedTail:
    """The master's most recent events, for followers catching up."""

    events: deque[IndexedEvent] = field(default_factory=lambda: deque(maxlen=RETAINED_EVENTS))

    def extend(self, events: Iterable[IndexedEvent]) -> None:
        for event in events:
            if self.events and event.idx != self.events[-1].idx + 1:
                self.events.clear()  # a hole (a snapshot was installed): start over
            self.events.append(event)

    def answer(
        self, request: SyncRequest, state: State, last_term: int, last_master: NodeId | None
    ) -> list[EventBatch] | Snapshot | None:
        """What a follower at ``request`` needs: batches, a snapshot, or nothing."""
        last = state.last_event_applied_idx
        if (
            request.last_idx == last
            and request.last_term == last_term
            and request.last_master == last_master
        ):
            return None
        if request.last_idx < last and self._holds(request):
            missing = [e for e in self.events if e.idx > request.last_idx]
            batches = []
            prev_term, prev_master = request.last_term, request.last_master
            for i in range(0, len(missing), MAX_EVENTS_PER_FRAME):
                chunk = tuple(missing[i : i + MAX_EVENTS_PER_FRAME])
                batches.append(
                    EventBatch(events=chunk, prev_term=prev_term, prev_master=prev_master)
                )
                prev_term, prev_master = chunk[-1].term, chunk[-1].indexed_by
            return batches
        return Snapshot(state=state, last_term=last_term, last_master=last_master)

    def _holds(self, request: SyncRequest) -> bool:
        if not self.events:
            return False
        first = self.events[0].idx
        if request.last_idx == -1:
            return first == 0
        if not first <= request.last_idx <= self.events[-1].idx:
            return False
        # The follower's last event must be the very one we hold (same term, same
        # master), or its history diverged there and only a snapshot can repair it.
        held = self.events[request.last_idx - first]
        return held.term == request.last_term and held.indexed_by == request.last_master


def continues(batch: EventBatch, last_idx: int, last_term: int, last_master: NodeId | None) -> bool:
    """Whether ``batch`` continues the history that ends at ``last_idx`` (indexed in
    ``last_term`` by ``last_master``). ``False`` means the histories diverged there
    (a master that lost its seat while partitioned): only a snapshot repairs it.
    A batch that starts past a gap cannot be judged yet and counts as continuing."""
    events = batch.events
    if not events or last_idx < 0 or events[0].idx > last_idx + 1:
        return True
    if events[0].idx == last_idx + 1:
        return (batch.prev_term, batch.prev_master) == (last_term, last_master)
    if events[-1].idx < last_idx:
        return True  # all old news; nothing of ours to compare with
    # NOTE: by index, not position: a batch from anyone may skip indices.
    held = next((event for event in events if event.idx == last_idx), None)
    if held is None:
        return True  # the batch skips it: nothing of ours to compare with
    return (held.term, held.indexed_by) == (last_term, last_master)


@dataclass(slots=True)
class CatchUp:
    """A follower's ordering buffer and sync pacing."""

    buffered: dict[int, IndexedEvent] = field(default_factory=dict)
    next_sync_at: float = 0.0
    backoff: float = SYNC_BACKOFF_INITIAL

    def accept(self, events: Iterable[IndexedEvent], last_applied: int) -> list[IndexedEvent]:
        """Take a batch; return the events that continue ``last_applied`` in order
        (buffered ones included). Anything after a gap stays buffered."""
        for event in events:
            if event.idx <= last_applied:
                continue
            if len(self.buffered) >= MAX_BUFFERED_EVENTS and event.idx not in self.buffered:
                # Full: keep the events nearest the gap (the sync refills the rest),
                # so the missing one can always get in.
                highest = max(self.buffered)
                if highest < event.idx:
                    continue
                del self.buffered[highest]
            self.buffered[event.idx] = event
        ready: list[IndexedEvent] = []
        nxt = last_applied + 1
        while nxt in self.buffered:
            ready.append(self.buffered.pop(nxt))
            nxt += 1
        for idx in [i for i in self.buffered if i < nxt]:
            del self.buffered[idx]
        if ready:
            self.backoff = SYNC_BACKOFF_INITIAL
        return ready

    @property
    def has_gap(self) -> bool:
        return bool(self.buffered)

    def should_sync(self, now: float) -> bool:
        """Whether to ask the master now; each ask doubles the wait for the next."""
        if now < self.next_sync_at:
            return False
        self.next_sync_at = now + self.backoff
        self.backoff = min(self.backoff * 2, SYNC_BACKOFF_MAX)
        return True

    def reset(self) -> None:
        self.buffered.clear()
        self.next_sync_at = 0.0
        self.backoff = SYNC_BACKOFF_INITIAL
