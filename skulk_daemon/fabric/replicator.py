"""Replication on the fabric: the effectful half of :mod:`.replication`.

The master broadcasts each durable batch as it is indexed (and keeps it in its
retained tail) and answers a follower's :class:`SyncRequest` from that tail or with a
snapshot; a follower applies batches from the sitting master strictly in order,
asks for what a gap or a diverged history leaves out, and installs a snapshot.
Messages from anyone but the sitting master's session are dropped and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from skulk_core.cluster.election import Session
from skulk_core.cluster.fabric import (
    MAX_EVENTS_PER_FRAME,
    Body,
    EventBatch,
    Header,
    Snapshot,
    SyncRequest,
)
from skulk_core.ids import NodeId
from skulk_core.state.events import IndexedEvent
from skulk_daemon.fabric.link import LinkCounters
from skulk_daemon.fabric.replication import CatchUp, RetainedTail, continues
from skulk_daemon.node.eventlog import read_events
from skulk_daemon.node.node import Node

log = logging.getLogger("skulk_daemon.fabric.cluster")


class Replicator:
    def __init__(
        self,
        node: Node,
        *,
        session: Callable[[], Session | None],
        send: Callable[[NodeId, Body], bool],
        broadcast: Callable[[Body], None],
        counters: LinkCounters,
        clock: Callable[[], float],
    ) -> None:
        self._node = node
        self._session = session
        self._send = send
        self._broadcast = broadcast
        self._counters = counters
        self._clock = clock
        self.catch_up = CatchUp()
        self.tail = RetainedTail()

    @property
    def has_gap(self) -> bool:
        return self.catch_up.has_gap

    # -- as master -------------------------------------------------------------------

    def seed_tail(self) -> None:
        """A new master serves catch-up from the events in its own log."""
        self.tail = RetainedTail()
        try:
            self.tail.extend(read_events(self._node.event_log.path))
        except Exception:  # a torn or unreadable log only costs followers a snapshot
            log.warning("could not read the event log to seed the retained tail", exc_info=True)

    def on_indexed(
        self, events: list[IndexedEvent], prev_term: int, prev_master: NodeId | None
    ) -> None:
        self.tail.extend(events)
        for start in range(0, len(events), MAX_EVENTS_PER_FRAME):
            chunk = tuple(events[start : start + MAX_EVENTS_PER_FRAME])
            self._broadcast(EventBatch(events=chunk, prev_term=prev_term, prev_master=prev_master))
            prev_term, prev_master = chunk[-1].term, chunk[-1].indexed_by

    # -- as follower -----------------------------------------------------------------

    def follow(self, now: float) -> None:
        """A new master rules: start catching up on it."""
        self.catch_up.reset()
        self.request_sync(now, force=True)

    def request_sync(self, now: float, *, force: bool = False) -> None:
        session = self._session()
        if session is None or session.master == self._node.node_id:
            return
        if not force and not self.catch_up.should_sync(now):
            return
        self._send(
            session.master,
            SyncRequest(
                last_idx=self._node.state.last_event_applied_idx,
                last_term=self._node.last_term,
                last_master=self._node.last_master,
            ),
        )

    def _from_master(self, origin: NodeId, header: Header) -> bool:
        current = self._session()
        ok = (
            current is not None
            and current.master == origin
            and current.master != self._node.node_id
            and header.session == current
        )
        if not ok:
            self._counters.dropped["stale_session"] += 1
        return ok

    # -- receiving -------------------------------------------------------------------

    async def receive(
        self, origin: NodeId, header: Header, body: EventBatch | SyncRequest | Snapshot
    ) -> None:
        node = self._node
        match body:
            case EventBatch(events=events):
                if not self._from_master(origin, header):
                    return
                last = node.state.last_event_applied_idx
                if not continues(body, last, node.last_term, node.last_master):
                    self._counters.dropped["diverged"] += 1
                    self.follow(self._clock())
                    return
                ready = self.catch_up.accept(events, last)
                if ready:
                    await node.apply_replicated(ready)
                if self.catch_up.has_gap:
                    self.request_sync(self._clock())
            case SyncRequest():
                if not node.is_master:
                    return
                answer = self.tail.answer(body, node.state, node.last_term, node.last_master)
                if isinstance(answer, list):
                    for batch in answer:
                        self._send(origin, batch)
                elif answer is not None:
                    self._send(origin, answer)
            case Snapshot(state=state, last_term=last_term, last_master=last_master):
                if not self._from_master(origin, header):
                    return
                # The master's history wins: it was elected on having the freshest.
                await node.install_snapshot(state, last_term, last_master)
                self.catch_up.reset()
