"""The cluster agent: the node's life on the fabric.

It carries out what the pure parts decide. Every 0.5 s it sends a :class:`Beat`
(identity, rank, latest telemetry, last applied index) to every peer; beats are
the liveness signal and how a joining node learns the sitting master. It drives
the :class:`~skulk_core.cluster.election.Election`, turns its sessions into the node's
role (master or follower), forwards a follower's commands to the master, keeps
followers replicated (batches as they are indexed, sync on a gap or a new
session, snapshots when a tail cannot serve), removes nodes unseen past the
membership timeout (their instances recorded as failed, naming the node), and
reports the node's live connections as topology edges.

Frames are checked before use: a foreign protocol version, a malformed body, a
frame claiming to come from this node, or a control message from a stale session
is dropped and counted in :meth:`ClusterAgent.diagnostics`.

The agent composes what it owns besides the clock, the election and the beats: the
frames it sends and accepts (:mod:`.framing`), whom it dials (:mod:`.dialing`),
replication's effects (:mod:`.replicator`) and its diagnostics view
(:mod:`.cluster_view`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Final

from skulk_core.cluster.election import (
    DEFAULT_PEER_TIMEOUT_SECONDS,
    Action,
    Broadcast,
    Coordinator,
    Election,
    Rank,
    SendTo,
    Session,
    SessionChanged,
)
from skulk_core.cluster.fabric import (
    Beat,
    Body,
    CancelTask,
    CapabilityCancel,
    CapabilityData,
    CapabilityDescribe,
    CapabilityDescribed,
    CapabilityOpen,
    CapabilityOutcome,
    CommandOutcome,
    DataFrame,
    Elect,
    EventBatch,
    Header,
    PeerAddress,
    RunImages,
    RunSpeech,
    RunTask,
    ShareHfToken,
    Snapshot,
    SubmitCommand,
    SyncRequest,
)
from skulk_core.diagnostics.fabric_document import FabricView
from skulk_core.ids import NodeId, new_command_id
from skulk_core.state.commands import RegisterNode
from skulk_core.version import SKULK_VERSION
from skulk_daemon.fabric.cluster_view import FabricFacts, fabric_view
from skulk_daemon.fabric.data_plane import DataPlane
from skulk_daemon.fabric.dialing import Dialer
from skulk_daemon.fabric.forwarding import CommandForwarding
from skulk_daemon.fabric.framing import Outbox, checked
from skulk_daemon.fabric.link import CapabilityMessage, LinkCounters
from skulk_daemon.fabric.membership import Membership
from skulk_daemon.fabric.peers import (
    Peer,
    PeerBook,
    fabric_address,
    parse_peer,
)
from skulk_daemon.fabric.remote_capabilities import RemoteCapabilities
from skulk_daemon.fabric.remote_images import RemoteImages
from skulk_daemon.fabric.remote_speech import RemoteSpeech
from skulk_daemon.fabric.remote_tasks import RemoteTasks
from skulk_daemon.fabric.replicator import Replicator
from skulk_daemon.fabric.settings import FabricSettings
from skulk_daemon.fabric.telemetry_stats import TelemetryStats
from skulk_daemon.fabric.token_share import TokenShare
from skulk_daemon.fabric.transport import FabricTransport
from skulk_daemon.node.node import Node

log = logging.getLogger(__name__)

DATA_TRANSPORT: Final = "zmq"
TICK_SECONDS: Final = 0.1
LONELY_GRACE_SECONDS: Final = 10.0
"""With explicit or discovered peers none of which answers, how long before serving
alone."""


class ClusterAgent:
    def __init__(
        self,
        node: Node,
        settings: FabricSettings,
        transport: Callable[[Callable[[str, list[bytes]], None]], FabricTransport],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self.settings = settings
        self._clock = clock
        self.transport = transport(self._on_frames)
        self.peers = PeerBook(own_id=node.node_id)
        self.outbox = Outbox(node.node_id, self.peers, self.transport, self._session_now)
        now = clock()
        self.election = Election(
            rank=self._rank(),
            started_at=now,
            discovery_grace=settings.discovery_grace_seconds,
            lonely_grace=LONELY_GRACE_SECONDS if settings.peers else 0.0,
            peer_timeout=max(DEFAULT_PEER_TIMEOUT_SECONDS, settings.beat_seconds * 3),
        )
        self.data = DataPlane(node.node_id, self._send_data)
        self.remote = RemoteTasks(self)
        self.speech = RemoteSpeech(self)
        self.images = RemoteImages(self)
        self.capabilities = RemoteCapabilities(self)
        self.token_share = TokenShare(node, self.outbox)
        self.counters = LinkCounters()
        self.dialer = Dialer(
            self.peers,
            self.transport,
            explicit=frozenset(settings.peers),
            counters=self.counters,
            clock=clock,
            discovered=self._discovered,
        )
        self.replication = Replicator(
            node,
            session=self._session_now,
            send=self.outbox.send,
            broadcast=self.outbox.broadcast,
            counters=self.counters,
            clock=clock,
        )
        self.telemetry_stats = TelemetryStats(beat_seconds=settings.beat_seconds)
        self._carried_reading_at: datetime | None = None
        self.commands = CommandForwarding(node, self.outbox.send, self._session_now)
        self._control: asyncio.Queue[tuple[NodeId, Header, Body]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._next_beat = 0.0
        self.membership = Membership(node, self.peers, settings)
        """When each node was last heard from, by any frame (membership's clock)."""
        self._session: Session | None = None
        self._last_role: tuple[str, int] = ("follower", 0)
        node.on_indexed(self.replication.on_indexed)

    def _session_now(self) -> Session | None:
        return self.election.session

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        await self.transport.start()
        for address in self.settings.peers:
            self.dial(address)
        self._tasks = [
            asyncio.create_task(self._tick_loop(), name="fabric-tick"),
            asyncio.create_task(self._control_loop(), name="fabric-control"),
        ]
        log.info(
            "fabric listening on port %d (%d explicit peer(s))",
            self.transport.port,
            len(self.settings.peers),
        )

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.commands.close()
        await self.remote.close()
        await self.speech.close()
        await self.images.close()
        await self.capabilities.close()
        await self.transport.close()

    def dial(self, address: str) -> None:
        """Connect to ``address`` (explicit, or learned from a member's beat)."""
        self.dialer.dial(address)

    def dial_discovered(self, address: str) -> None:
        """Connect to an address mDNS announced: bounded, and hung up on unless it
        answers as a member within the grace (anyone on the LAN can announce)."""
        self.dialer.dial_discovered(address)

    def departed(self, address: str) -> None:
        """mDNS says the service at ``address`` left: hang up unless a member is there."""
        self.dialer.departed(address)

    def _discovered(self) -> None:
        # A node that knows of peers must not elect itself before they answer: one
        # restarted beside a sitting master would otherwise claim the master's term
        # alone and, on the tiebreak, depose it (as explicit peers do, see lonely_grace).
        self.election.lonely_grace = max(self.election.lonely_grace, LONELY_GRACE_SECONDS)

    # -- sending ---------------------------------------------------------------------

    def _send_data(self, owner: NodeId, frame: DataFrame) -> bool:
        return self.outbox.send(owner, frame)

    def send_control(
        self, node_id: NodeId, body: RunTask | RunSpeech | RunImages | CancelTask
    ) -> bool:
        return self.outbox.send(node_id, body)

    def send_capability(self, node_id: NodeId, body: CapabilityMessage) -> bool:
        """A capability message (control or data plane, by its type) to ``node_id``."""
        return self.outbox.send(node_id, body)

    def is_live(self, node_id: NodeId) -> bool:
        """Whether ``node_id`` was heard from within the liveness timeout."""
        peer = self.peers.by_node.get(node_id)
        return peer is not None and self._clock() - peer.heard_at <= self.election.peer_timeout

    # -- the clock -------------------------------------------------------------------

    def _rank(self) -> Rank:
        return Rank(
            forced=self.settings.force_master,
            last_term=self.node.last_term,
            last_index=self.node.state.last_event_applied_idx,
            node_id=self.node.node_id,
        )

    async def _tick_loop(self) -> None:
        while True:
            try:
                self._tick()
            except Exception:
                log.exception("fabric tick failed")
            await asyncio.sleep(TICK_SECONDS)

    def _tick(self) -> None:
        now = self._clock()
        self.election.update_rank(self._rank())
        self._act(self.election.tick(now), now)
        if self.election.session is None and self._session is not None:
            self._session = None
            self.node.lose_master()
        if now >= self._next_beat:
            self._next_beat = now + self.settings.beat_seconds
            self._beat(now)
        if self.node.is_master:
            self.membership.remove_unseen(now)
        elif self.replication.has_gap:
            self.replication.request_sync(now)
        self.dialer.hang_up_unanswered(now)

    def _beat(self, now: float) -> None:
        live = sorted(self.peers.live(now, self.election.peer_timeout), key=lambda p: p.node_id)
        reading = self.node.own_telemetry()
        if reading is not None and reading.observed_at != self._carried_reading_at:
            self._carried_reading_at = reading.observed_at
            self.telemetry_stats.reading_offered(now)
        frames = self.outbox.frames(
            Beat(
                fabric_port=self.transport.port,
                skulk_version=SKULK_VERSION,
                transport=DATA_TRANSPORT,
                rank=self.election.rank,
                reading=reading,
                last_idx=self.node.state.last_event_applied_idx,
                peers=tuple(PeerAddress(node_id=p.node_id, address=p.address) for p in live),
            )
        )
        sent = sum(1 for address in sorted(self.peers.dial) if self.transport.send(address, frames))
        failed = len(self.peers.dial) - sent
        size = sum(len(frame) for frame in frames)
        self.telemetry_stats.beat(now, sent, failed, size, reading is not None)
        if self.election.session is not None:
            self.membership.report_connections(live)
        self.membership.forget_departed(live)
        self.token_share.tick(p.node_id for p in live)

    # -- election --------------------------------------------------------------------

    def _act(self, actions: list[Action], now: float) -> None:
        role = (self.election.role, self.election.term)
        if role != self._last_role:
            self._last_role = role
            log.info("election: %s in term %d", *role)
        for action in actions:
            match action:
                case Broadcast(message=message):
                    self.outbox.broadcast(Elect(message=message))
                case SendTo(peer=peer, message=message):
                    self.outbox.send(peer, Elect(message=message))
                case SessionChanged(session=session):
                    self._on_session(session, now)

    def _on_session(self, session: Session, now: float) -> None:
        self._session = session
        log.info("session: master %s, term %d", session.master, session.term)
        if session.master == self.node.node_id:
            self.replication.seed_tail()
            self.membership.became_master(now)
            self.node.become_master(session.term)
            return
        self.node.become_follower(self.commands.forward)
        self.replication.follow(now)
        # A node the old master removed (or never saw) joins this master's topology.
        self.node.report(RegisterNode(command_id=new_command_id(), node_id=self.node.node_id))

    # -- receiving -------------------------------------------------------------------

    def _on_frames(self, peer_ip: str, frames: list[bytes]) -> None:
        found = checked(frames, self.node.node_id)
        if isinstance(found, str):
            self.counters.dropped[found] += 1
            return
        header, body = found
        now = self._clock()
        self.counters.received[header.plane] += 1
        self.membership.heard(header.origin, now)
        if header.origin in self.peers.by_node:
            self.peers.by_node[header.origin].heard_at = now
        elif 0 < header.reply_port < 65536 and header.origin not in self.peers.reply_to:
            # Not yet beaten: still answerable (a joiner's first command, its sync).
            address = fabric_address(peer_ip, header.reply_port)
            self.peers.reply_to[header.origin] = address
            self.transport.connect(address)
        self.election.heard_from(header.origin, now)
        match body:
            case Beat():
                self._on_beat(peer_ip, header, body, now)
            case DataFrame():
                self.data.deliver(body, header.origin)
            case Elect(message=message):
                self._act(self.election.handle(header.origin, message, now), now)
            case CommandOutcome():
                self.commands.answered(body)
            case RunTask():
                self.remote.serve(header.origin, body)
            case RunSpeech():
                self.speech.serve(header.origin, body)
            case RunImages():
                self.images.serve(header.origin, body)
            case CancelTask(command_id=command_id):
                self.remote.stop(command_id)
                self.speech.stop(command_id)
                self.images.stop(command_id)
            case (
                CapabilityDescribe()
                | CapabilityDescribed()
                | CapabilityOpen()
                | CapabilityOutcome()
                | CapabilityCancel()
                | CapabilityData()
            ):
                self.capabilities.receive(header.origin, body)
            case ShareHfToken():
                self.token_share.receive(header.origin, body)
            case SubmitCommand() | EventBatch() | SyncRequest() | Snapshot():
                self._control.put_nowait((header.origin, header, body))

    def _on_beat(self, peer_ip: str, header: Header, beat: Beat, now: float) -> None:
        if beat.rank.node_id != header.origin or not 0 < beat.fabric_port < 65536:
            self.counters.dropped["bad_beat"] += 1
            return
        address = fabric_address(peer_ip, beat.fabric_port)
        moved = self.peers.learned(
            Peer(
                node_id=header.origin,
                address=address,
                rank=beat.rank,
                skulk_version=beat.skulk_version,
                transport=beat.transport,
                last_idx=beat.last_idx,
                heard_at=now,
            )
        )
        if moved is not None:
            self.transport.disconnect(moved)
        self.dialer.answered(address)
        self.transport.connect(address)
        for known in beat.peers:
            if known.node_id != self.node.node_id and known.node_id not in self.peers.by_node:
                with contextlib.suppress(ValueError):
                    self.dial(parse_peer(known.address))
        if beat.reading is not None and beat.reading.node_id == header.origin:
            self.node.record_telemetry(beat.reading)
        session = header.session
        if session is not None and session.master == header.origin:
            # A master's beat is its standing claim: how joiners learn who rules.
            claim = Coordinator(term=session.term, rank=beat.rank)
            self._act(self.election.handle(header.origin, claim, now), now)
        current = self.election.session
        if (
            current is not None
            and current.master == header.origin
            and beat.last_idx > self.node.state.last_event_applied_idx
        ):
            self.replication.request_sync(now)
        if self.node.is_master and header.origin not in self.node.state.topology.nodes:
            self.membership.rejoined(header.origin)
            self.node.report(RegisterNode(command_id=new_command_id(), node_id=header.origin))

    async def _control_loop(self) -> None:
        while True:
            origin, header, body = await self._control.get()
            try:
                await self._control_one(origin, header, body)
            except Exception:
                log.exception("fabric control message %s failed", type(body).__name__)

    async def _control_one(self, origin: NodeId, header: Header, body: Body) -> None:
        match body:
            case SubmitCommand():
                await self.commands.serve(origin, header, body)
            case EventBatch() | SyncRequest() | Snapshot():
                await self.replication.receive(origin, header, body)
            case _:
                pass

    # -- diagnostics -----------------------------------------------------------------

    def diagnostics(self) -> FabricView:
        session = self.election.session
        return fabric_view(
            FabricFacts(
                now=self._clock(),
                node_id=self.node.node_id,
                role=self.election.role,
                master=None if session is None else session.master,
                term=self.election.term,
                port=self.transport.port,
                transport=DATA_TRANSPORT,
                peers=tuple(self.peers.by_node.values()),
                stats=self.transport.stats(),
                counters=self.counters,
                data=self.data.stats,
            )
        )
