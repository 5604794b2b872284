"""Master election: a pure, bully-style state machine with terms, built to settle.

Every node ranks itself by :class:`Rank`: a forced master first (``--force-master``),
then the freshest replicated history (the term and index of the last event it
holds, Raft's up-to-date rule), then the node id as the tiebreak. A campaign is
bounded in time: the candidate proposes a new term; any live node that outranks it
answers ``Alive`` and campaigns itself; a candidate that hears no such answer before
its deadline declares itself with ``Coordinator``. There is no quorum: a node alone
(a two-machine cluster whose peer died) elects itself and keeps serving.

What keeps a settled cluster settled:

* **A master's standing counts its term.** A master's first act is to write an event
  in its new term, so from then on its history is fresher than any history from an
  older term, whatever rank it announced when it won. A master is therefore compared
  as ``(forced, term, ∞, node id)``: only a forced node, or one holding events from a
  *newer* term, can outrank it. (Comparing announced histories instead let two
  masters whose heads diverged depose each other forever: each new winner's first
  event made its history fresher than the rank the other had just announced.)
* **Claims are ordered by (forced, term, node id)**, never by announced history, so
  the order does not change when the winner writes. A follower never deposes a
  sitting master on history; a master that sees a better claim steps down, one that
  sees a worse claim answers with its own.
* **Leader stickiness.** A follower that heard its master within
  ``sticky_seconds`` answers a campaign the master outranks with ``Incumbent``, and
  the master itself answers with ``Alive`` and its ``Coordinator``; the candidate
  stands down. Proposed terms are not adopted until someone wins them, so a failed
  campaign (a node on a lossy link) leaves every other node's term alone.
* **Randomized timeouts.** The silence after which a follower gives up on its master,
  the first campaign after discovery and every retry are jittered, so simultaneous
  candidates are the exception, not the rule.

The machine performs no I/O: :meth:`Election.handle` and :meth:`Election.tick` take
the time and return :data:`Action` values for the fabric to carry out.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from skulk_core.ids import NodeId

DEFAULT_CAMPAIGN_SECONDS = 0.4
"""How long a candidate waits for a better-ranked node to answer."""
DEFAULT_COORDINATOR_WAIT_SECONDS = 1.0
"""How long a node that deferred to a better-ranked candidate waits for it to win."""
DEFAULT_MASTER_TIMEOUT_SECONDS = 1.25
"""Silence from the master after which a follower campaigns (plus jitter); the master
beats every 0.5 s, so this is two missed beats and a margin."""
DEFAULT_JITTER_SECONDS = 0.5
"""The most a timeout is randomly lengthened by, drawn afresh each time."""
DEFAULT_STICKY_SECONDS = 1.0
"""A follower that heard its master this recently vetoes campaigns against it. Below
the master timeout, so when the master dies nobody vetoes the first candidate."""
DEFAULT_PEER_TIMEOUT_SECONDS = 4.0
"""Silence after which a peer no longer counts as live (a candidate with no live peer
wins at once)."""
DEFAULT_ISOLATION_GRACE_SECONDS = 10.0
"""How long a follower that lost its master and hears no peer at all waits before
ruling alone: a cable blip must not make it master of a newer term (which would win
on the heal and replace the rest of the cluster's history), while a two-node cluster
whose peer died still gets its survivor as master. The master's own membership
timeout (10 s) is the same bound: by then the rest has dropped this node anyway."""

_Key = tuple[bool, int, float, str]


class Rank(msgspec.Struct, frozen=True, kw_only=True):
    """How strong a node's claim to mastership is (higher wins)."""

    forced: bool = False
    last_term: int = 0
    last_index: int = -1
    node_id: NodeId

    def key(self) -> tuple[bool, int, int, str]:
        return (self.forced, self.last_term, self.last_index, self.node_id)

    def history(self) -> tuple[bool, int, int]:
        return (self.forced, self.last_term, self.last_index)


def standing(forced: bool, term: int, master: NodeId) -> _Key:
    """A sitting master's rank: its first event in ``term`` makes its history newer
    than any history from an older term, and no other node writes in ``term``."""
    return (forced, term, math.inf, master)


class Session(msgspec.Struct, frozen=True, kw_only=True):
    """Who is master, and since which term."""

    master: NodeId
    term: int


class Campaign(msgspec.Struct, frozen=True, kw_only=True, tag="campaign"):
    term: int
    rank: Rank


class Alive(msgspec.Struct, frozen=True, kw_only=True, tag="alive"):
    """ "I outrank you" (the bully's answer): a better candidate, or the master."""

    term: int
    rank: Rank


class Coordinator(msgspec.Struct, frozen=True, kw_only=True, tag="coordinator"):
    term: int
    rank: Rank


class Incumbent(msgspec.Struct, frozen=True, kw_only=True, tag="incumbent"):
    """ "The master of ``term`` is alive and outranks you": a follower's veto."""

    term: int
    rank: Rank
    """The vetoing follower's own rank (for term bookkeeping)."""
    master: NodeId
    forced: bool = False


ElectionMessage = Campaign | Alive | Coordinator | Incumbent


@dataclass(frozen=True, slots=True)
class Broadcast:
    message: ElectionMessage


@dataclass(frozen=True, slots=True)
class SendTo:
    peer: NodeId
    message: ElectionMessage


@dataclass(frozen=True, slots=True)
class SessionChanged:
    """A new master (possibly this node) for a new term."""

    session: Session


Action = Broadcast | SendTo | SessionChanged

Role = Literal["follower", "candidate", "master"]


@dataclass(slots=True)
class Election:
    """One node's view of the election. Mutable on purpose: it is an agent's state,
    driven only through :meth:`handle` and :meth:`tick`."""

    rank: Rank
    started_at: float
    discovery_grace: float = 1.5
    lonely_grace: float = 0.0
    """With peers configured but none heard yet, how long to wait before running as
    a cluster of one: a node whose connections are still coming up must not elect
    itself beside a sitting master."""
    campaign_seconds: float = DEFAULT_CAMPAIGN_SECONDS
    coordinator_wait_seconds: float = DEFAULT_COORDINATOR_WAIT_SECONDS
    master_timeout_seconds: float = DEFAULT_MASTER_TIMEOUT_SECONDS
    jitter_seconds: float = DEFAULT_JITTER_SECONDS
    sticky_seconds: float = DEFAULT_STICKY_SECONDS
    peer_timeout: float = DEFAULT_PEER_TIMEOUT_SECONDS
    isolation_grace: float = DEFAULT_ISOLATION_GRACE_SECONDS
    rng: random.Random = field(default_factory=random.Random)
    term: int = 0
    """The current session's term (or, while campaigning, the proposed one)."""
    role: Role = "follower"
    session: Session | None = None
    master_forced: bool = False
    """Whether the current session's master is forced (its claim's first key)."""
    deadline: float | None = None
    """When the current campaign (or the wait for a coordinator) ends."""
    master_heard_at: float = 0.0
    peers: dict[NodeId, float] = field(default_factory=dict)
    """Live peers and when each was last heard from."""
    seen_term: int = 0
    """The highest term seen anywhere: a new proposal goes above it."""
    patience: float = 0.0
    """This session's master timeout, jitter included."""

    def __post_init__(self) -> None:
        # A new term must be newer than any term in the node's own history, or a
        # master elected now would write events that look older than ones it holds.
        self.term = max(self.term, self.rank.last_term)
        self.seen_term = max(self.seen_term, self.term)
        self.patience = self._jittered(self.master_timeout_seconds)
        # The first campaign after discovery is jittered too: nodes started together
        # must not all propose at the same instant.
        self.discovery_grace = self._jittered(self.discovery_grace) if self.discovery_grace else 0.0

    # -- inputs ---------------------------------------------------------------

    def update_rank(self, rank: Rank) -> None:
        """The node's history grew (or it was forced); ranks only ever compare live."""
        self.rank = rank
        self.seen_term = max(self.seen_term, rank.last_term)

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
        self.seen_term = max(self.seen_term, message.term, message.rank.last_term)
        match message:
            case Campaign(rank=rank):
                return self._on_campaign(sender, rank, now)
            case Alive(rank=rank):
                return self._on_alive(rank, now)
            case Coordinator(term=term, rank=rank):
                return self._on_coordinator(sender, term, rank, now)
            case Incumbent(term=term, master=master, forced=forced):
                return self._on_incumbent(term, master, forced, now)

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
                if self.session is not None:
                    silent = now - self.master_heard_at
                    if silent <= self.patience:
                        return []
                    # Peers beat every 0.5 s: one heard within half the patience is
                    # alive now; if none is, this node is cut off, maybe by a blip.
                    window = self.patience / 2
                    heard = any(now - seen <= window for seen in self.peers.values())
                    if not heard and silent < self.isolation_grace:
                        return []
                    return self._campaign(now)
                waited = now - self.started_at
                if waited < self.discovery_grace or (not self.peers and waited < self.lonely_grace):
                    return []
                if self.deadline is None or now >= self.deadline:
                    return self._campaign(now)
                return []

    # -- transitions ----------------------------------------------------------

    def _jittered(self, seconds: float) -> float:
        return seconds + self.rng.uniform(0.0, self.jitter_seconds)

    def _own_key(self) -> _Key:
        if self.role == "master":
            return standing(self.rank.forced, self.term, self.rank.node_id)
        return self.rank.key()

    def _campaign(self, now: float) -> list[Action]:
        self.term = max(self.term, self.seen_term, self.rank.last_term) + 1
        self.seen_term = self.term
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
        self.master_forced = self.rank.forced
        self.master_heard_at = now
        return [
            Broadcast(Coordinator(term=self.term, rank=self.rank)),
            SessionChanged(self.session),
        ]

    def _defer(self, now: float) -> None:
        """Someone better is campaigning: wait for their Coordinator, then retry."""
        self.role = "follower"
        self.session = None
        self.deadline = now + self._jittered(self.coordinator_wait_seconds)

    def _follow(self, master: NodeId, term: int, forced: bool, now: float) -> list[Action]:
        self.term = term
        self.role = "follower"
        self.deadline = None
        self.master_heard_at = now
        self.master_forced = forced
        self.patience = self._jittered(self.master_timeout_seconds)
        session = Session(master=master, term=term)
        if session == self.session:
            return []
        self.session = session
        return [SessionChanged(session)]

    def _on_campaign(self, sender: NodeId, rank: Rank, now: float) -> list[Action]:
        if self.role == "master":
            if self._own_key() > rank.key():
                # NOTE: the candidate has not adopted its proposed term (nobody does
                # until a Coordinator), so our standing Coordinator still rules it.
                return [
                    SendTo(sender, Alive(term=self.term, rank=self.rank)),
                    SendTo(sender, Coordinator(term=self.term, rank=self.rank)),
                ]
            self._defer(now)  # forced, or holding events from a newer term
            return []
        session = self.session
        if (
            session is not None
            and now - self.master_heard_at <= self.sticky_seconds
            and standing(self.master_forced, session.term, session.master) > rank.key()
        ):
            # Leader stickiness: the master we hear is alive and outranks the candidate.
            veto = Incumbent(
                term=session.term, rank=self.rank, master=session.master, forced=self.master_forced
            )
            return [SendTo(sender, veto)]
        if self.rank.key() > rank.key():
            answer: list[Action] = [SendTo(sender, Alive(term=self.term, rank=self.rank))]
            if self.role != "candidate":
                answer += self._campaign(now)
            return answer
        self._defer(now)
        return []

    def _on_alive(self, rank: Rank, now: float) -> list[Action]:
        if self.role == "candidate" and rank.key() > self.rank.key():
            self._defer(now)
        return []

    def _on_incumbent(self, term: int, master: NodeId, forced: bool, now: float) -> list[Action]:
        if (
            self.role == "candidate"
            and master != self.rank.node_id
            and standing(forced, term, master) > self.rank.key()
        ):
            self._defer(now)
        return []

    def _on_coordinator(self, sender: NodeId, term: int, rank: Rank, now: float) -> list[Action]:
        session = self.session
        if session is not None and session == Session(master=sender, term=term):
            self.master_heard_at = now
            return []
        claim = (rank.forced, term, sender)
        if self.role == "master":
            if claim < (self.rank.forced, self.term, self.rank.node_id):
                # A stale or lesser master announcing itself: tell it who rules now.
                return [SendTo(sender, Coordinator(term=self.term, rank=self.rank))]
            return self._follow(sender, term, rank.forced, now)
        if self.rank.forced and not rank.forced:
            return self._campaign(now)  # a forced node never follows an unforced one
        if session is not None:
            if claim < (self.master_forced, self.term, session.master):
                return []  # stale, or the lesser of two claims for one term
            return self._follow(sender, term, rank.forced, now)
        # No session (starting, campaigning or deferring): follow a master whose
        # standing is at least our history; a node holding events from a newer term
        # than the claim's must not throw them away for it, so it campaigns instead.
        if standing(rank.forced, term, sender) > self.rank.key():
            return self._follow(sender, term, rank.forced, now)
        if self.role == "candidate":
            return []
        return self._campaign(now)

    def _live_peers(self, now: float) -> list[NodeId]:
        return [p for p, seen in self.peers.items() if now - seen <= self.peer_timeout]
