"""A real node and its cluster agent, fed hostile and broken frames.

The node is the one ``skulk serve`` builds (its own data dir, event log and
identity); only the transport is replaced, by a fake that records what the agent
asks it to send and lets the test play every peer. Whatever arrives, no exception
may escape the frame handler or be logged by the agent, every dropped frame is
counted under its reason, and the replicated State either stays as it was or is
still exactly what a restart would rebuild from the node's snapshot and log.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skulk_core.cluster.election import Rank, Session
from skulk_core.cluster.fabric import (
    PLANE_OF,
    PROTOCOL_VERSION,
    Beat,
    Body,
    CommandOutcome,
    EventBatch,
    FrameError,
    Header,
    Plane,
    Snapshot,
    SubmitCommand,
    SyncRequest,
    decode_body,
    decode_header,
    encode,
)
from skulk_core.ids import CommandId, NodeId
from skulk_core.state.apply import apply
from skulk_core.state.commands import RegisterNode
from skulk_core.state.state import State
from skulk_daemon.fabric.cluster import ClusterAgent
from skulk_daemon.fabric.settings import FabricSettings
from skulk_daemon.fabric.transport import FabricTransport, FrameHandler, TransportStats
from skulk_daemon.node.eventlog import read_events
from skulk_daemon.node.node import Node
from skulk_daemon.node.snapshot import SNAPSHOT_FILE, load_snapshot
from skulk_daemon.serve import build_node
from skulk_daemon.system.settings import resolve_settings
from tests.core.fabric_samples import (
    busy_state,
    events,
    indexed,
    msgpack_values,
    near_miss_bodies,
    sample_bodies,
    telemetry,
)

MASTER = NodeId("12D3KooWmasterpeer")
STRANGER = NodeId("12D3KooWstranger")
MASTER_IP = "10.0.0.2"
STRANGER_IP = "10.0.0.3"
PEER_PORT = 52416
MASTER_ADDRESS = f"{MASTER_IP}:{PEER_PORT}"
STRANGER_ADDRESS = f"{STRANGER_IP}:{PEER_PORT}"
SESSION = Session(master=MASTER, term=1)
SETTLE_DEADLINE_S = 10.0
"""How long queued control messages may take to be handled (never a timing claim)."""


class FakeTransport(FabricTransport):
    """The FabricTransport surface the agent uses, recording instead of sending."""

    def __init__(self, on_frames: FrameHandler) -> None:  # no sockets: no super().__init__
        self.on_frames = on_frames
        self.sent: list[tuple[str, list[bytes]]] = []
        self.connected: set[str] = set()
        self.started = False
        self.closed = False

    def __repr__(self) -> str:
        return "<FakeTransport>"

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True

    @property
    def port(self) -> int:
        return 40000

    def connect(self, address: str) -> None:
        self.connected.add(address)

    def disconnect(self, address: str) -> None:
        self.connected.discard(address)

    def send(self, address: str, frames: list[bytes]) -> bool:
        if address not in self.connected:
            return False
        self.sent.append((address, frames))
        return True

    def broadcast(self, frames: list[bytes]) -> int:
        return sum(self.send(address, frames) for address in sorted(self.connected))

    def stats(self) -> TransportStats:
        return TransportStats(
            frames_in=0,
            frames_out=len(self.sent),
            dropped_out=0,
            refused=(),
            connected=tuple(sorted(self.connected)),
        )


class Clock:
    """Time stands still unless a test moves it: no election deadline passes by itself."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ProbedAgent(ClusterAgent):
    """The real agent, counting control messages in flight so a test can wait them out."""

    in_flight = 0

    async def _control_one(self, origin: NodeId, header: Header, body: Body) -> None:
        self.in_flight += 1
        try:
            await super()._control_one(origin, header, body)
        finally:
            self.in_flight -= 1


class AgentErrors(logging.Handler):
    """Errors the agent logged (a control message or a tick that raised)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self) -> list[str]:
        return [
            f"{r.getMessage()}: {r.exc_info[1]!r}" if r.exc_info else r.getMessage()
            for r in self.records
        ]


@dataclass
class Harness:
    node: Node
    agent: ProbedAgent
    transport: FakeTransport
    clock: Clock
    errors: AgentErrors
    seq: int = 0

    def feed(self, frames: list[bytes], peer_ip: str = MASTER_IP) -> None:
        """Hand ``frames`` to the agent as the transport would; nothing may escape."""
        self.transport.on_frames(peer_ip, frames)

    def send_as(
        self,
        origin: NodeId,
        body: Body,
        *,
        session: Session | None = None,
        plane: Plane | None = None,
        version: int = PROTOCOL_VERSION,
        peer_ip: str = MASTER_IP,
    ) -> None:
        self.seq += 1
        header = Header(
            version=version,
            plane=plane or PLANE_OF[type(body)],
            origin=origin,
            seq=self.seq,
            session=session,
        )
        self.feed(encode(header, body), peer_ip)

    def hello(self, origin: NodeId, peer_ip: str, session: Session | None = None) -> None:
        """``origin``'s beat: the agent learns its address (and, with a session of its
        own, that it is the master)."""
        rank = Rank(node_id=origin, last_term=0, last_index=-1)
        beat = Beat(fabric_port=PEER_PORT, skulk_version="0.0.0", transport="zmq", rank=rank)
        self.send_as(origin, beat, session=session, peer_ip=peer_ip)

    def follow_master(self) -> None:
        self.hello(MASTER, MASTER_IP, SESSION)
        assert self.agent.election.session == SESSION

    async def settle(self) -> None:
        """Wait until every queued control message has been handled."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_DEADLINE_S
        quiet = 0
        while quiet < 3:
            await asyncio.sleep(0.002)
            idle = self.agent._control.empty() and self.agent.in_flight == 0
            quiet = quiet + 1 if idle else 0
            if loop.time() > deadline:
                pytest.fail("the agent did not handle its control messages in time")

    async def eventually(self, check: Callable[[], bool]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_DEADLINE_S
        while not check():
            if loop.time() > deadline:
                pytest.fail("the agent did not get there in time")
            await asyncio.sleep(0.01)

    def sent_bodies(self, address: str) -> list[Body]:
        return [decode_body(frames) for to, frames in self.transport.sent if to == address]

    def dropped(self) -> Counter[str]:
        return Counter(self.agent.diagnostics()["frames"]["dropped"])


@asynccontextmanager
async def harness(models_dir: Path) -> AsyncIterator[Harness]:
    with tempfile.TemporaryDirectory(prefix="skulk-fuzz-") as root:
        settings_ = resolve_settings(
            host="127.0.0.1",
            api_port=1,
            config_home=f"{root}/config",
            data_dir=f"{root}/data",
            models_dir=str(models_dir),
        )
        node = build_node(settings_)
        clock = Clock()
        transports: list[FakeTransport] = []

        def factory(on_frames: FrameHandler) -> FakeTransport:
            transports.append(FakeTransport(on_frames))
            return transports[-1]

        fabric = FabricSettings(port=0, discovery_grace_seconds=3600.0)
        agent = ProbedAgent(node, fabric, factory, clock=clock)
        errors = AgentErrors()
        agent_log = logging.getLogger("skulk_daemon.fabric.cluster")
        agent_log.addHandler(errors)
        await agent.start()
        try:
            yield Harness(node, agent, transports[0], clock, errors)
        finally:
            await agent.close()
            agent_log.removeHandler(errors)
            node.close()


def run(test: Coroutine[Any, Any, None]) -> None:
    asyncio.run(test)


def rebuilt(node: Node) -> State:
    """The State a restart would load: the snapshot, then the log after it."""
    stored = load_snapshot(node.settings.data_dir / SNAPSHOT_FILE)
    state = stored.state if stored is not None else State()
    for event in read_events(node.event_log.path):
        if event.idx > state.last_event_applied_idx:
            state = apply(state, event)
    return state


def assert_sound(h: Harness) -> None:
    """Nothing went wrong that the node would only notice later."""
    assert h.errors.messages() == []
    assert rebuilt(h.node) == h.node.state
    buffered = h.agent.replication.catch_up.buffered
    assert all(idx > h.node.state.last_event_applied_idx + 1 for idx in buffered)


def expected_drop(frames: list[bytes], own: NodeId) -> str | None:
    """The reason the agent must count ``frames`` under, by the rules it documents."""
    try:
        header = decode_header(frames)
    except FrameError as exc:
        return exc.reason
    if header.origin == own:
        return "own_origin"
    try:
        body = decode_body(frames)
    except FrameError as exc:
        return exc.reason
    if PLANE_OF[type(body)] != header.plane:
        return "wrong_plane"
    return None


# -- deliberately hostile, well-formed frames -------------------------------------


def test_frames_from_a_stale_session_change_nothing(shared_models_dir: Path) -> None:
    async def main() -> None:
        async with harness(shared_models_dir) as h:
            h.follow_master()
            before = h.node.state
            batch = EventBatch(events=tuple(events(0, 3)))
            snapshot = Snapshot(state=busy_state(), last_term=9)
            for session in (None, Session(master=MASTER, term=0), Session(master=MASTER, term=2)):
                h.send_as(MASTER, batch, session=session)
                h.send_as(MASTER, snapshot, session=session)
            # The right session, the wrong sender: a node that is not the master.
            h.hello(STRANGER, STRANGER_IP)
            h.send_as(STRANGER, batch, session=SESSION, peer_ip=STRANGER_IP)
            h.send_as(STRANGER, snapshot, session=SESSION, peer_ip=STRANGER_IP)
            await h.settle()
            assert h.node.state is before
            assert h.dropped()["stale_session"] == 8
            assert_sound(h)

    run(main())


def test_frames_of_a_foreign_version_or_claiming_this_nodes_id_are_dropped(
    shared_models_dir: Path,
) -> None:
    async def main() -> None:
        async with harness(shared_models_dir) as h:
            h.follow_master()
            before = h.node.state
            own = h.node.node_id
            batch = EventBatch(events=tuple(events(0, 2)))
            for version in (0, PROTOCOL_VERSION + 1):
                h.send_as(MASTER, batch, session=SESSION, version=version)
            h.send_as(own, batch, session=Session(master=own, term=7))
            h.send_as(own, Snapshot(state=busy_state(), last_term=1))
            h.hello(own, MASTER_IP, Session(master=own, term=9))
            h.send_as(MASTER, batch, session=SESSION, plane="telemetry")
            h.send_as(MASTER, batch, session=SESSION, plane="data")
            await h.settle()
            assert h.node.state is before
            assert h.agent.election.session == SESSION  # nobody usurped the master
            dropped = h.dropped()
            assert (dropped["version"], dropped["own_origin"], dropped["wrong_plane"]) == (2, 3, 2)
            assert_sound(h)

    run(main())


def test_a_beat_that_lies_about_its_sender_is_dropped(shared_models_dir: Path) -> None:
    async def main() -> None:
        async with harness(shared_models_dir) as h:
            liar = Beat(
                fabric_port=PEER_PORT,
                skulk_version="0.0.0",
                transport="zmq",
                rank=Rank(node_id=STRANGER, forced=True),
            )
            h.send_as(MASTER, liar, session=Session(master=MASTER, term=5))
            bad_port = msgspec.structs.replace(liar, rank=Rank(node_id=MASTER), fabric_port=0)
            h.send_as(MASTER, bad_port, session=Session(master=MASTER, term=5))
            await h.settle()
            assert h.dropped()["bad_beat"] == 2
            assert h.agent.election.session is None
            assert h.agent.peers.by_node == {}

    run(main())


def test_batches_with_absurd_indices_from_a_non_master_change_nothing(
    shared_models_dir: Path,
) -> None:
    async def main() -> None:
        async with harness(shared_models_dir) as h:
            h.follow_master()
            h.hello(STRANGER, STRANGER_IP)
            before = h.node.state
            for batch in (
                [indexed(2), indexed(0), indexed(1)],  # out of order
                [indexed(0), indexed(0), indexed(0)],  # duplicates
                [indexed(-5), indexed(2**62), indexed(-(2**63))],  # absurd
            ):
                h.send_as(STRANGER, EventBatch(events=tuple(batch)), session=SESSION)
                h.send_as(STRANGER, EventBatch(events=tuple(batch)), session=None)
            await h.settle()
            assert h.node.state is before
            assert not h.agent.replication.catch_up.has_gap
            assert h.dropped()["stale_session"] == 6
            assert_sound(h)

    run(main())


def test_the_masters_disordered_batches_apply_exactly_once_in_order(
    shared_models_dir: Path,
) -> None:
    async def main() -> None:
        async with harness(shared_models_dir) as h:
            h.follow_master()
            for batch in (
                [indexed(2), indexed(0), indexed(1)],
                [indexed(0), indexed(1), indexed(1)],
                [indexed(-5), indexed(-(2**63))],
            ):
                h.send_as(MASTER, EventBatch(events=tuple(batch)), session=SESSION)
            await h.settle()
            assert h.node.state.last_event_applied_idx == 2
            assert len(h.node.state.topology.nodes) == 3
            assert [e.idx for e in read_events(h.node.event_log.path)] == [0, 1, 2]
            assert_sound(h)

    run(main())


# -- commands and sync --------------------------------------------------------------


def test_a_command_sent_to_a_follower_is_refused_as_not_master(shared_models_dir: Path) -> None:
    async def main() -> None:
        async with harness(shared_models_dir) as h:
            h.hello(STRANGER, STRANGER_IP)
            command = RegisterNode(command_id=CommandId("c-1"), node_id=STRANGER)
            h.send_as(STRANGER, SubmitCommand(request_id="q1", command=command))
            h.follow_master()  # a follower of someone else is no better
            h.send_as(STRANGER, SubmitCommand(request_id="q2", command=command), session=SESSION)
            await h.settle()
            answers = [b for b in h.sent_bodies(STRANGER_ADDRESS) if isinstance(b, CommandOutcome)]
            assert [(a.request_id, a.refused_code) for a in answers] == [
                ("q1", "not_master"),
                ("q2", "not_master"),
            ]
            assert all(a.last_idx == -1 for a in answers)
            assert h.node.state.topology.nodes == ()

    run(main())


def test_as_master_it_orders_a_command_once_and_serves_the_sync(
    shared_models_dir: Path,
) -> None:
    async def main() -> None:
        async with harness(shared_models_dir) as h:
            # Alone past the discovery grace, the node elects itself.
            h.clock.now += 3601
            await h.eventually(lambda: h.node.is_master)
            own = Session(master=h.node.node_id, term=h.agent.election.term)
            h.hello(STRANGER, STRANGER_IP)
            command = RegisterNode(command_id=CommandId("c-1"), node_id=STRANGER)
            stale = Session(master=h.node.node_id, term=own.term + 1)
            h.send_as(STRANGER, SubmitCommand(request_id="q0", command=command), session=stale)
            h.send_as(STRANGER, SubmitCommand(request_id="q1", command=command), session=own)
            # The answer was lost; the retry carries the same command id.
            h.send_as(STRANGER, SubmitCommand(request_id="q2", command=command), session=own)
            await h.settle()
            answers = [b for b in h.sent_bodies(STRANGER_ADDRESS) if isinstance(b, CommandOutcome)]
            assert [(a.request_id, a.refused_code, a.last_idx) for a in answers] == [
                ("q0", "not_master", -1),
                ("q1", None, 0),
                ("q2", None, 0),
            ]
            assert h.node.state.topology.nodes == (STRANGER,)  # ordered once
            h.transport.sent.clear()
            h.send_as(STRANGER, SyncRequest(last_idx=-1, last_term=0), session=own)
            await h.settle()
            (batch,) = h.sent_bodies(STRANGER_ADDRESS)
            assert isinstance(batch, EventBatch) and [e.idx for e in batch.events] == [0]
            assert_sound(h)

    run(main())


def test_a_gap_in_the_masters_batches_asks_the_master_for_the_rest(
    shared_models_dir: Path,
) -> None:
    def syncs(h: Harness) -> list[SyncRequest]:
        return [b for b in h.sent_bodies(MASTER_ADDRESS) if isinstance(b, SyncRequest)]

    async def main() -> None:
        async with harness(shared_models_dir) as h:
            h.follow_master()
            await h.settle()
            # A new session asks at once, from what this node holds.
            assert [s.last_idx for s in syncs(h)] == [-1]
            h.transport.sent.clear()
            h.send_as(MASTER, EventBatch(events=tuple(events(0, 3))), session=SESSION)
            await h.settle()
            assert h.node.state.last_event_applied_idx == 2
            assert syncs(h) == []  # in order: nothing to ask
            h.send_as(MASTER, EventBatch(events=tuple(events(5, 7))), session=SESSION)
            await h.settle()
            assert h.node.state.last_event_applied_idx == 2
            asked = syncs(h)
            assert asked and {(s.last_idx, s.last_term) for s in asked} == {(2, 1)}
            assert asked[0].last_master == h.node.last_master
            # The master's answer fills the gap and releases what waited behind it.
            before = events(0, 3)[-1]
            fill = EventBatch(
                events=tuple(events(3, 5)), prev_term=before.term, prev_master=before.indexed_by
            )
            h.send_as(MASTER, fill, session=SESSION)
            await h.settle()
            assert h.node.state.last_event_applied_idx == 6
            assert not h.agent.replication.catch_up.has_gap
            assert_sound(h)

    run(main())


def test_a_naive_timestamp_in_a_reading_does_not_break_the_handler(
    shared_models_dir: Path,
) -> None:
    async def main() -> None:
        async with harness(shared_models_dir) as h:
            reading = telemetry(MASTER)
            rank = Rank(node_id=MASTER)
            for observed_at in (reading.observed_at, reading.observed_at.replace(tzinfo=None)):
                beat = Beat(
                    fabric_port=PEER_PORT,
                    skulk_version="0.0.0",
                    transport="zmq",
                    rank=rank,
                    reading=msgspec.structs.replace(reading, observed_at=observed_at),
                )
                h.send_as(MASTER, beat)
            h.node.view()
            await h.settle()
            assert_sound(h)

    run(main())


# -- hypothesis -----------------------------------------------------------------------

FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
origins = st.sampled_from([MASTER, STRANGER])
sessions = st.none() | st.just(SESSION) | st.builds(Session, master=origins, term=st.integers(0, 3))
planes: st.SearchStrategy[Plane] = st.sampled_from(["control", "telemetry", "data"])


@st.composite
def valid_header_frames(draw: st.DrawFn) -> list[bytes]:
    """A header that decodes, with a body that mostly does not (or is a real one)."""
    header = Header(
        version=PROTOCOL_VERSION,
        plane=draw(planes),
        origin=draw(origins),
        seq=draw(st.integers(0, 2**63)),
        session=draw(sessions),
    )
    body = draw(
        near_miss_bodies()
        | st.binary(max_size=64)
        | msgpack_values.map(msgspec.msgpack.encode)
        | st.sampled_from(sample_bodies()).map(msgspec.msgpack.encode)
    )
    return [msgspec.msgpack.encode(header), body]


@st.composite
def batches(draw: st.DrawFn) -> EventBatch:
    """Indices out of order, repeated, negative, far ahead."""
    idxs = draw(st.lists(st.integers(-3, 8) | st.sampled_from([2**62, -(2**63)]), max_size=12))
    return EventBatch(events=tuple(indexed(i) for i in idxs))


@FUZZ
@given(st.lists(st.lists(st.binary(max_size=48), max_size=4), min_size=1, max_size=12))
def test_random_bytes_change_nothing_and_are_counted(
    shared_models_dir: Path, messages: list[list[bytes]]
) -> None:
    async def main() -> None:
        async with harness(shared_models_dir) as h:
            h.follow_master()
            before = h.node.state
            expected = Counter(
                reason
                for frames in messages
                if (reason := expected_drop(frames, h.node.node_id)) is not None
            )
            for frames in messages:
                h.feed(frames)
            await h.settle()
            assert h.node.state is before
            assert h.dropped() == expected
            assert_sound(h)

    run(main())


@FUZZ
@given(st.lists(valid_header_frames(), min_size=1, max_size=12))
def test_valid_headers_with_random_bodies_break_nothing(
    shared_models_dir: Path, messages: list[list[bytes]]
) -> None:
    async def main() -> None:
        async with harness(shared_models_dir) as h:
            h.follow_master()
            h.hello(STRANGER, STRANGER_IP)
            expected: Counter[str] = Counter()
            for frames in messages:
                reason = expected_drop(frames, h.node.node_id)
                if reason is not None:
                    expected[reason] += 1
                h.feed(frames)
            await h.settle()
            dropped = h.dropped()
            for reason in ("malformed", "version", "own_origin", "wrong_plane"):
                assert dropped[reason] == expected[reason], reason
            # Some of these are real messages from the master: State may move, soundly.
            assert_sound(h)

    run(main())


@FUZZ
@given(
    st.lists(
        st.tuples(origins, sessions, batches() | st.just(Snapshot(state=State(), last_term=0))),
        min_size=1,
        max_size=10,
    )
)
def test_batches_and_snapshots_from_anyone_in_any_session_keep_state_sound(
    shared_models_dir: Path, messages: list[tuple[NodeId, Session | None, Body]]
) -> None:
    async def main() -> None:
        async with harness(shared_models_dir) as h:
            h.follow_master()
            h.hello(STRANGER, STRANGER_IP)
            before = h.node.state
            trusted = 0
            for origin, session, body in messages:
                trusted += origin == MASTER and session == SESSION
                h.send_as(origin, body, session=session)
            await h.settle()
            assert h.dropped()["stale_session"] == len(messages) - trusted
            if not trusted:
                assert h.node.state is before
            assert_sound(h)

    run(main())
