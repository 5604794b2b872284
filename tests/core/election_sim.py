"""A simulated LAN for the election machine, closer to the daemon than a lock-step
loop: every message (election messages, beats, replication) crosses a directed
link with its own delay (so messages reorder), links come up one direction at a
time (asymmetric), can drop a share of frames or go down, and each node runs the
daemon's loop: a tick every 0.1 s that first refreshes the machine's rank from the
node's history (so the rank lags the history by up to one tick), and a beat that
carries the master's claim. A new master writes its first event (``MasterElected``)
a few milliseconds after winning, and followers take the master's history when its
beats and batches reach them. Seeded: every run of a seed is the same.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from skulk_core.cluster.election import (
    Action,
    Broadcast,
    Coordinator,
    ElectionMessage,
    Rank,
    SendTo,
    Session,
    SessionChanged,
)
from skulk_core.ids import NodeId

TICK = 0.1
"""The cluster agent's tick (skulk_daemon.fabric.cluster.TICK_SECONDS)."""


class Machine(Protocol):
    rank: Rank
    role: str
    term: int
    session: Session | None

    def update_rank(self, rank: Rank) -> None: ...
    def heard_from(self, peer: NodeId, now: float) -> None: ...
    def handle(self, sender: NodeId, message: ElectionMessage, now: float) -> list[Action]: ...
    def tick(self, now: float) -> list[Action]: ...


Factory = Callable[[Rank, float, random.Random], Machine]


@dataclass
class Link:
    up_at: float = 0.0
    down: bool = False
    loss: float = 0.0
    delay: tuple[float, float] = (0.0005, 0.02)


@dataclass(frozen=True)
class BeatMsg:
    history: tuple[int, int]
    session: Session | None
    forced: bool


@dataclass(frozen=True)
class Batch:
    """The master's history, as its replication (batches, a snapshot) carries it."""

    history: tuple[int, int]
    session: Session


@dataclass(frozen=True)
class Report:
    """A follower's RegisterNode, which the master of ``session`` indexes."""

    session: Session


@dataclass
class SimNode:
    machine: Machine
    history: tuple[int, int]
    forced: bool
    alive: bool = True


Payload = ElectionMessage | BeatMsg | Batch | Report


@dataclass
class LanSim:
    factory: Factory
    beat_seconds: float
    seed: int
    write_delay: tuple[float, float] = (0.003, 0.05)
    rng: random.Random = field(init=False)
    now: float = 0.0
    nodes: dict[NodeId, SimNode] = field(default_factory=dict)
    links: dict[tuple[NodeId, NodeId], Link] = field(default_factory=dict)
    changes: list[tuple[float, NodeId, Session]] = field(default_factory=list)
    _queue: list[tuple[float, int, str, object]] = field(default_factory=list)
    _seq: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    # -- building ------------------------------------------------------------------

    def add(self, name: str, history: tuple[int, int] = (0, -1), forced: bool = False) -> NodeId:
        node = NodeId(name)
        rank = Rank(node_id=node, forced=forced, last_term=history[0], last_index=history[1])
        machine = self.factory(rank, self.now, random.Random(self.rng.random()))
        self.nodes[node] = SimNode(machine=machine, history=history, forced=forced)
        for other in self.nodes:
            if other != node:
                self.links.setdefault((node, other), Link())
                self.links.setdefault((other, node), Link())
        self._at(self.now + self.rng.uniform(0, TICK), "tick", node)
        self._at(self.now + self.rng.uniform(0, self.beat_seconds), "beat", node)
        return node

    def link(self, src: str, dst: str) -> Link:
        return self.links[(NodeId(src), NodeId(dst))]

    def kill(self, name: str) -> None:
        self.nodes[NodeId(name)].alive = False

    # -- the loop ------------------------------------------------------------------

    def _at(self, when: float, kind: str, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (when, self._seq, kind, payload))

    def run(self, seconds: float) -> None:
        end = self.now + seconds
        while self._queue and self._queue[0][0] <= end:
            when, _, kind, payload = heapq.heappop(self._queue)
            self.now = when
            match kind:
                case "tick":
                    assert isinstance(payload, str)
                    self._tick(NodeId(payload))
                case "beat":
                    assert isinstance(payload, str)
                    self._beat(NodeId(payload))
                case "write":
                    assert isinstance(payload, tuple)
                    self._write(*payload)
                case "deliver":
                    assert isinstance(payload, tuple)
                    self._deliver(*payload)
        self.now = end

    def _send(self, src: NodeId, dst: NodeId, message: Payload) -> None:
        link = self.links[(src, dst)]
        if link.down or self.now < link.up_at or self.rng.random() < link.loss:
            return
        self._at(self.now + self.rng.uniform(*link.delay), "deliver", (src, dst, message))

    def _broadcast(self, src: NodeId, message: Payload) -> None:
        for dst in self.nodes:
            if dst != src:
                self._send(src, dst, message)

    def _act(self, node: NodeId, actions: list[Action]) -> None:
        for action in actions:
            match action:
                case Broadcast(message=message):
                    self._broadcast(node, message)
                case SendTo(peer=peer, message=message):
                    self._send(node, peer, message)
                case SessionChanged(session=session):
                    self.changes.append((self.now, node, session))
                    if session.master == node:
                        # The new master indexes MasterElected in its term, soon.
                        delay = self.rng.uniform(*self.write_delay)
                        self._at(self.now + delay, "write", (node, session, True))
                    else:
                        # A new follower registers itself with its master.
                        self._send(node, session.master, Report(session=session))

    def _rank(self, node: NodeId) -> Rank:
        sim = self.nodes[node]
        term, index = sim.history
        return Rank(node_id=node, forced=sim.forced, last_term=term, last_index=index)

    def _tick(self, node: NodeId) -> None:
        sim = self.nodes[node]
        if not sim.alive:
            return
        sim.machine.update_rank(self._rank(node))
        self._act(node, sim.machine.tick(self.now))
        self._at(self.now + TICK, "tick", node)

    def _beat(self, node: NodeId) -> None:
        sim = self.nodes[node]
        if not sim.alive:
            return
        machine = sim.machine
        self._broadcast(
            node, BeatMsg(history=sim.history, session=machine.session, forced=sim.forced)
        )
        self._at(self.now + self.beat_seconds, "beat", node)

    def _write(self, node: NodeId, session: Session, elected: bool) -> None:
        # NOTE: MasterElected is written even if the node lost the session meanwhile:
        # the daemon demotes its Master only at its next tick, after the write.
        sim = self.nodes[node]
        if not sim.alive or (not elected and sim.machine.session != session):
            return
        sim.history = (session.term, sim.history[1] + 1)
        self._broadcast(node, Batch(history=sim.history, session=session))

    def _deliver(self, src: NodeId, dst: NodeId, message: Payload) -> None:
        sim = self.nodes[dst]
        if not sim.alive or not self.nodes[src].alive:
            return
        machine = sim.machine
        machine.heard_from(src, self.now)
        match message:
            case BeatMsg(history=history, session=session, forced=forced):
                if session is not None and session.master == src:
                    rank = Rank(
                        node_id=src, forced=forced, last_term=history[0], last_index=history[1]
                    )
                    claim = Coordinator(term=session.term, rank=rank)
                    self._act(dst, machine.handle(src, claim, self.now))
                    self._replicate(dst, src, history, session)
            case Batch(history=history, session=session):
                self._replicate(dst, src, history, session)
            case Report(session=session):
                if machine.session == session and session.master == dst:
                    delay = self.rng.uniform(*self.write_delay)
                    self._at(self.now + delay, "write", (dst, session, False))
            case _:
                self._act(dst, machine.handle(src, message, self.now))

    def _replicate(
        self, dst: NodeId, src: NodeId, history: tuple[int, int], session: Session
    ) -> None:
        # A follower of this session takes the master's history (batches or a snapshot).
        sim = self.nodes[dst]
        if sim.machine.session == session and session.master == src:
            sim.history = history

    # -- reading -------------------------------------------------------------------

    def live(self) -> list[NodeId]:
        return [n for n, s in self.nodes.items() if s.alive]

    def masters(self) -> set[NodeId]:
        return {n for n in self.live() if self.nodes[n].machine.role == "master"}

    def agreed(self) -> NodeId | None:
        """The one master every live node follows, or None."""
        masters = self.masters()
        if len(masters) != 1:
            return None
        (master,) = masters
        for node in self.live():
            session = self.nodes[node].machine.session
            if session is None or session.master != master:
                return None
        return master

    def changes_since(self, since: float) -> int:
        return sum(1 for at, _, _ in self.changes if at >= since)

    def first_master_since(self, since: float, among: set[NodeId]) -> float | None:
        for at, node, session in self.changes:
            if at >= since and node == session.master and node in among:
                return at
        return None
