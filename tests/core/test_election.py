"""The election converges to one master, the best-ranked live node, in every scenario
the fabric can produce: a cold start, a lost master, a joining node, a healed
partition, a forced master. A small simulated network delivers messages with
random delays (seeded, so every run is the same)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from skulk_core.cluster.election import (
    Broadcast,
    Coordinator,
    Election,
    ElectionMessage,
    Rank,
    SendTo,
    Session,
    SessionChanged,
)
from skulk_core.ids import NodeId

TICK = 0.05
HEARTBEAT = 0.5


@dataclass
class Net:
    rng: random.Random
    nodes: dict[NodeId, Election] = field(default_factory=dict)
    up: set[NodeId] = field(default_factory=set)
    cut: set[frozenset[NodeId]] = field(default_factory=set)
    now: float = 0.0
    queue: list[tuple[float, NodeId, NodeId, ElectionMessage]] = field(default_factory=list)
    changes: list[tuple[NodeId, Session]] = field(default_factory=list)
    frozen: set[NodeId] = field(default_factory=set)
    """Nodes that neither run nor read (SIGSTOP): their inbound frames wait."""
    _last_beat: float = 0.0

    def add(
        self, name: str, last_term: int = 0, last_index: int = -1, forced: bool = False
    ) -> None:
        node = NodeId(name)
        rank = Rank(node_id=node, last_term=last_term, last_index=last_index, forced=forced)
        self.nodes[node] = Election(
            rank=rank, started_at=self.now, rng=random.Random(self.rng.random())
        )
        self.up.add(node)

    def linked(self, a: NodeId, b: NodeId) -> bool:
        return a in self.up and b in self.up and frozenset((a, b)) not in self.cut

    def _send(self, src: NodeId, dst: NodeId, message: ElectionMessage) -> None:
        if self.linked(src, dst):
            self.queue.append((self.now + self.rng.uniform(0.001, 0.2), src, dst, message))

    def _act(self, node: NodeId, actions: list[object]) -> None:
        for action in actions:
            match action:
                case Broadcast(message=message):
                    for other in self.nodes:
                        if other != node:
                            self._send(node, other, message)
                case SendTo(peer=peer, message=message):
                    self._send(node, peer, message)
                case SessionChanged(session=session):
                    self.changes.append((node, session))
                    if session.master == node:
                        # A new master's first act is to index MasterElected.
                        election = self.nodes[node]
                        rank = election.rank
                        election.update_rank(
                            Rank(
                                node_id=rank.node_id,
                                forced=rank.forced,
                                last_term=session.term,
                                last_index=rank.last_index + 1,
                            )
                        )

    def run(self, seconds: float) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now += TICK
            if self.now - self._last_beat >= HEARTBEAT:
                self._last_beat = self.now
                self._heartbeats()
            due = [m for m in self.queue if m[0] <= self.now and m[2] not in self.frozen]
            self.queue = [m for m in self.queue if m not in due]
            for _, src, dst, message in sorted(due, key=lambda m: m[0]):
                if self.linked(src, dst):
                    self._act(dst, self.nodes[dst].handle(src, message, self.now))
            for name in sorted(self.up - self.frozen):
                self._act(name, self.nodes[name].tick(self.now))

    def _heartbeats(self) -> None:
        # Telemetry carries liveness; a master's also carries its session, which is
        # how a joining node learns the master without campaigning.
        for src in self.up - self.frozen:
            for dst in self.up - self.frozen:
                if src != dst and self.linked(src, dst):
                    self.nodes[dst].heard_from(src, self.now)
                    election = self.nodes[src]
                    if election.role == "master" and election.session is not None:
                        beat = Coordinator(term=election.session.term, rank=election.rank)
                        self._act(dst, self.nodes[dst].handle(src, beat, self.now))

    def masters(self, among: set[NodeId] | None = None) -> set[NodeId]:
        names = among if among is not None else self.up
        return {n for n in names if self.nodes[n].role == "master"}

    def agreed(self, among: set[NodeId] | None = None) -> NodeId:
        names = among if among is not None else self.up
        (master,) = self.masters(names)
        for name in names:
            session = self.nodes[name].session
            assert session is not None and session.master == master, (name, session)
        return master


def test_a_cluster_of_one_is_master_at_once_after_discovery() -> None:
    net = Net(random.Random(1))
    net.add("a")
    net.run(2.1)  # the discovery grace (1.5 s) plus at most its jitter
    assert net.agreed() == "a"


def test_cold_start_elects_the_best_ranked_node() -> None:
    net = Net(random.Random(2))
    for name in ("a", "b", "c"):
        net.add(name)
    net.run(6)
    assert net.agreed() == "c"  # equal history: the node id breaks the tie


def test_fresher_history_beats_a_higher_node_id() -> None:
    net = Net(random.Random(3))
    net.add("a", last_term=2, last_index=10)
    net.add("b", last_term=1, last_index=50)  # more events, but from an older term
    net.add("c", last_term=2, last_index=9)
    net.run(6)
    assert net.agreed() == "a"


def test_losing_the_master_elects_the_next_best_and_terms_grow() -> None:
    net = Net(random.Random(4))
    for name in ("a", "b", "c"):
        net.add(name)
    net.run(6)
    first = net.nodes[NodeId("a")].term
    net.up.discard(NodeId("c"))
    net.run(10)
    assert net.agreed() == "b"
    assert net.nodes[NodeId("a")].term > first


def test_a_joining_node_adopts_the_sitting_master_even_with_a_higher_id() -> None:
    net = Net(random.Random(5))
    net.add("b")
    net.add("c", last_term=1, last_index=5)
    net.run(6)
    assert net.agreed() == "c"
    net.add("z")  # a fresh node: no history, the best node id
    net.run(6)
    assert net.agreed() == "c"


def test_a_forced_master_wins_and_keeps_it() -> None:
    net = Net(random.Random(6))
    net.add("a", forced=True)
    net.add("b", last_term=3, last_index=99)
    net.run(6)
    assert net.agreed() == "a"


def test_a_healed_partition_ends_with_one_master() -> None:
    net = Net(random.Random(7))
    for name in ("a", "b", "c", "d"):
        net.add(name)
    net.run(6)
    left, right = {NodeId("a"), NodeId("b")}, {NodeId("c"), NodeId("d")}
    net.cut = {frozenset((x, y)) for x in left for y in right}
    net.run(10)
    assert len(net.masters(left)) == 1 and len(net.masters(right)) == 1
    net.cut = set()
    net.run(10)
    net.agreed()


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=2, max_value=5))
def test_any_delivery_order_converges_to_the_best_ranked_live_node(seed: int, n: int) -> None:
    rng = random.Random(seed)
    net = Net(rng)
    names = [f"n{i}" for i in range(n)]
    for name in names:
        net.add(name, last_term=rng.randint(0, 2), last_index=rng.randint(-1, 5))
    net.run(8)
    best = max(net.nodes.values(), key=lambda e: e.rank.key()).rank.node_id
    assert net.agreed() == best
    # Kill the master: the best of the rest takes over.
    net.up.discard(best)
    net.run(12)
    rest = max((net.nodes[x] for x in net.up), key=lambda e: e.rank.key()).rank.node_id
    assert net.agreed() == rest


def test_a_frozen_master_that_wakes_to_stale_campaigns_does_not_take_over() -> None:
    """SIGSTOP on the master: the others elect and index newer history. On waking it
    reads the campaigns queued while it slept; it must not re-assert itself over the
    newer master (it lacks that master's events)."""
    net = Net(random.Random(8))
    for name in ("a", "b", "c"):
        net.add(name)
    net.run(6)
    old = net.agreed()
    net.frozen.add(old)
    net.run(10)
    rest = net.up - {old}
    new = net.agreed(rest)
    assert new != old
    net.frozen.clear()
    net.run(10)
    assert net.agreed() == new
    history = {n: net.nodes[n].rank.history() for n in net.up}
    assert history[new] == max(history.values())
