"""The election's rules before issue 20, kept only so a test can show they flap.

A verbatim copy of the old ``Election`` (bully election, announced history compared
on every claim, "strictly fresher history deposes a sitting master"), speaking the
same messages as :mod:`skulk_core.cluster.election`. Not used by the daemon.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from skulk_core.cluster.election import (
    Action,
    Alive,
    Broadcast,
    Campaign,
    Coordinator,
    ElectionMessage,
    Rank,
    Role,
    SendTo,
    Session,
    SessionChanged,
)
from skulk_core.ids import NodeId

OLD_CAMPAIGN_SECONDS = 1.0
OLD_COORDINATOR_WAIT_SECONDS = 2.5
OLD_MASTER_TIMEOUT_SECONDS = 4.0


@dataclass(slots=True)
class OldElection:
    """The election as it was before issue 20, verbatim but for the name."""

    rank: Rank
    started_at: float
    discovery_grace: float = 1.5
    lonely_grace: float = 0.0
    """With peers configured but none heard yet, how long to wait before running as
    a cluster of one: a node whose connections are still coming up must not elect
    itself beside a sitting master."""
    campaign_seconds: float = OLD_CAMPAIGN_SECONDS
    coordinator_wait_seconds: float = OLD_COORDINATOR_WAIT_SECONDS
    master_timeout_seconds: float = OLD_MASTER_TIMEOUT_SECONDS
    term: int = 0
    role: Role = "follower"
    session: Session | None = None
    deadline: float | None = None
    """When the current campaign (or the wait for a coordinator) ends."""
    master_heard_at: float = 0.0
    peers: dict[NodeId, float] = field(default_factory=dict)
    """Live peers and when each was last heard from."""
    peer_timeout: float = OLD_MASTER_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        # A new term must be newer than any term in the node's own history, or a
        # master elected now would write events that look older than ones it holds.
        self.term = max(self.term, self.rank.last_term)

    # -- inputs ---------------------------------------------------------------

    def update_rank(self, rank: Rank) -> None:
        """The node's history grew (or it was forced); ranks only ever compare live."""
        self.rank = rank
        self.term = max(self.term, rank.last_term)

    def heard_from(self, peer: NodeId, now: float) -> None:
        """Any traffic from ``peer``: it is alive (and if it is the master, so is the session)."""
        if peer == self.rank.node_id:
            return
        self.peers[peer] = now
        if self.session is not None and self.session.master == peer:
            self.master_heard_at = now

    def peer_lost(self, peer: NodeId) -> None:
        self.peers.pop(peer, None)

    def handle(self, sender: NodeId, message: ElectionMessage, now: float) -> list[Action]:
        self.heard_from(sender, now)
        if self.role != "master":
            # Terms only move forward: never campaign below a term some history holds.
            self.term = max(self.term, message.rank.last_term)
        match message:
            case Campaign(term=term, rank=rank):
                return self._on_campaign(sender, term, rank, now)
            case Alive(term=term, rank=rank):
                return self._on_alive(term, rank, now)
            case Coordinator(term=term, rank=rank):
                return self._on_coordinator(sender, term, rank, now)
            case _:
                return []  # Incumbent did not exist then

    def tick(self, now: float) -> list[Action]:
        """Advance time: start, finish or restart campaigns as deadlines pass."""
        for peer, seen in list(self.peers.items()):
            if now - seen > self.peer_timeout:
                del self.peers[peer]
        match self.role:
            case "master":
                return []
            case "candidate":
                if self.deadline is not None and now >= self.deadline:
                    return self._win(now)
                return []
            case "follower":
                waited = now - self.started_at
                if self.session is None and (
                    waited < self.discovery_grace or (not self.peers and waited < self.lonely_grace)
                ):
                    return []
                if self.session is None:
                    if self.deadline is None or now >= self.deadline:
                        return self._campaign(self.term + 1, now)
                    return []
                if now - self.master_heard_at > self.master_timeout_seconds:
                    return self._campaign(self.term + 1, now)
                return []

    # -- transitions ----------------------------------------------------------

    def _campaign(self, term: int, now: float) -> list[Action]:
        self.term = max(self.term, term)
        self.role = "candidate"
        self.session = None
        if not self._live_peers(now):
            # A cluster of one: nobody can outrank us, and waiting only delays serving.
            return self._win(now)
        self.deadline = now + self.campaign_seconds
        return [Broadcast(Campaign(term=self.term, rank=self.rank))]

    def _win(self, now: float) -> list[Action]:
        self.role = "master"
        self.deadline = None
        self.session = Session(master=self.rank.node_id, term=self.term)
        self.master_heard_at = now
        return [
            Broadcast(Coordinator(term=self.term, rank=self.rank)),
            SessionChanged(self.session),
        ]

    def _defer(self, term: int, now: float) -> None:
        """Someone better is campaigning: wait for their Coordinator, then retry."""
        self.term = max(self.term, term)
        self.role = "follower"
        self.session = None
        self.deadline = now + self.coordinator_wait_seconds

    def _on_campaign(self, sender: NodeId, term: int, rank: Rank, now: float) -> list[Action]:
        if self.rank.key() > rank.key():
            if self.role == "master" and term <= self.term:
                # A candidate behind the times: our standing term settles it.
                return [
                    SendTo(sender, Alive(term=self.term, rank=self.rank)),
                    Broadcast(Coordinator(term=self.term, rank=self.rank)),
                ]
            # NOTE: a master asked in a newer term does not simply re-assert: others
            # moved on without it (it may have been cut off, and another master may
            # hold events it lacks), so it campaigns like everyone else and the
            # freshest history wins.
            term = max(term, self.term)
            answer: list[Action] = [SendTo(sender, Alive(term=term, rank=self.rank))]
            if self.role != "candidate" or self.term < term:
                answer += self._campaign(term, now)
            return answer
        self._defer(max(term, self.term), now)
        return []

    def _on_alive(self, term: int, rank: Rank, now: float) -> list[Action]:
        if rank.key() > self.rank.key() and self.role == "candidate":
            self._defer(term, now)
        return []

    def _on_coordinator(self, sender: NodeId, term: int, rank: Rank, now: float) -> list[Action]:
        if term < self.term:
            # A stale master announcing itself: tell it who rules now.
            if self.role == "master":
                return [SendTo(sender, Coordinator(term=self.term, rank=self.rank))]
            return []
        if term == self.term and self.role == "master" and self.rank.key() > rank.key():
            # Two claims for one term (a race, a healed partition): the better rank keeps it.
            return [SendTo(sender, Coordinator(term=self.term, rank=self.rank))]
        if self.rank.history() > rank.history():
            # Strictly fresher history (or forced): depose it with a newer term.
            return self._campaign(term + 1, now)
        self.term = term
        self.role = "follower"
        self.deadline = None
        self.master_heard_at = now
        session = Session(master=sender, term=term)
        if session == self.session:
            return []
        self.session = session
        return [SessionChanged(session)]

    def _live_peers(self, now: float) -> list[NodeId]:
        return [p for p, seen in self.peers.items() if now - seen <= self.peer_timeout]
