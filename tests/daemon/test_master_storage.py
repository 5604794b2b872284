"""The master when its event log cannot be written (a full disk, a failing drive).

A command whose events cannot be made durable must not happen at all: the master's
State stays as it was, nothing is published, the index is not used up, and the
client is told why with a status it can act on (503 ``event_log_unwritable``, not
a bare 500), so it can retry once the operator frees space.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any, cast

import pytest

from skulk_core.ids import CommandId, NodeId
from skulk_core.state.apply import apply
from skulk_core.state.commands import RegisterNode
from skulk_core.state.decide import Refused
from skulk_core.state.events import IndexedEvent
from skulk_core.state.state import State
from skulk_daemon.api.errors import handle_refused
from skulk_daemon.node.eventlog import EventLog, read_events
from skulk_daemon.node.master import Master
from skulk_daemon.node.node import CommandRefused
from skulk_daemon.serve import build_node
from skulk_daemon.system.settings import resolve_settings

MASTER = NodeId("12D3KooWmaster")


def run(test: Coroutine[Any, Any, None]) -> None:
    asyncio.run(test)


def register(name: str) -> RegisterNode:
    return RegisterNode(command_id=CommandId(f"c-{name}"), node_id=NodeId(f"12D3KooW{name}"))


class FlakyDisk(EventLog):
    """An event log in memory whose disk can fill up."""

    def __init__(self) -> None:  # no file: no super().__init__
        self.full = False
        self.records: list[IndexedEvent] = []

    @property
    def path(self) -> Path:
        return Path("/nonexistent/events.log")

    def append(self, events: Iterable[IndexedEvent]) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.records.extend(events)

    def close(self) -> None:
        pass


class Published:
    def __init__(self) -> None:
        self.batches: list[list[IndexedEvent]] = []

    def __call__(self, events: list[IndexedEvent]) -> None:
        self.batches.append(events)


def test_a_full_disk_refuses_the_command_and_changes_nothing() -> None:
    async def main() -> None:
        disk, published = FlakyDisk(), Published()
        master = Master(MASTER, State(), disk, published, term=1)
        await master.order(register("a"), MASTER)
        before = master.state
        disk.full = True
        outcome = await master.order(register("b"), MASTER)
        assert isinstance(outcome, Refused)
        assert outcome.code == "event_log_unwritable"
        assert "No space left on device" in outcome.message
        assert master.state is before
        assert len(published.batches) == 1
        # Space is freed: the next command takes the index the refused one did not use.
        disk.full = False
        ordered = await master.order(register("c"), MASTER)
        assert isinstance(ordered, list) and [e.idx for e in ordered] == [1]
        assert [e.idx for e in disk.records] == [0, 1]
        assert master.state.topology.nodes == (NodeId("12D3KooWa"), NodeId("12D3KooWc"))

    run(main())


def test_a_node_whose_log_is_full_answers_503_event_log_unwritable(
    tmp_path: Path, shared_models_dir: Path
) -> None:
    async def main() -> None:
        settings = resolve_settings(
            config_home=str(tmp_path / "config"),
            data_dir=str(tmp_path / "data"),
            models_dir=str(shared_models_dir),
        )
        node = build_node(settings)
        node.event_log.close()
        disk = FlakyDisk()
        node.event_log = disk
        try:
            node.become_master(1)
            await node.submit(register("a"))
            before = node.state
            disk.full = True
            with pytest.raises(CommandRefused) as refused:
                await node.submit(register("b"))
            assert refused.value.code == "event_log_unwritable"
            assert node.state is before
            response = handle_refused(cast(Any, None), refused.value)
            assert response.status_code == 503
            body = response.content["error"]
            assert body["code"] == "event_log_unwritable"
            assert body["type"] == "service_unavailable"
            assert "disk" in body["message"]
        finally:
            node.close()

    run(main())


def test_a_write_cut_short_by_a_full_disk_leaves_a_log_that_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real log: ENOSPC halfway through a record must not leave a torn record
    that the next append lands after (a corrupt middle the node could not start on)."""
    path = tmp_path / "events.log"

    async def main() -> None:
        event_log, _, _ = EventLog.open(path)
        master = Master(MASTER, State(), event_log, Published(), term=1)
        await master.order(register("a"), MASTER)
        fd = event_log._fd
        real_write = os.write
        full = True

        def write(target: int, data: Any) -> int:
            if target == fd and full:
                real_write(target, bytes(data)[: max(1, len(data) // 2)])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_write(target, data)

        monkeypatch.setattr(os, "write", write)
        outcome = await master.order(register("b"), MASTER)
        assert isinstance(outcome, Refused) and outcome.code == "event_log_unwritable"
        full = False
        ordered = await master.order(register("c"), MASTER)
        assert isinstance(ordered, list) and [e.idx for e in ordered] == [1]
        monkeypatch.undo()
        event_log.close()
        reopened, replayed, torn = EventLog.open(path)
        reopened.close()
        assert torn is None
        assert [e.idx for e in replayed] == [0, 1]
        state = State()
        for event in replayed:
            state = apply(state, event)
        assert state == master.state

    run(main())


class SlowDisk(FlakyDisk):
    """Appends wait for the test's go-ahead (a slow fsync)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.go = threading.Event()

    def append(self, events: Iterable[IndexedEvent]) -> None:
        batch = list(events)
        self.entered.set()
        self.go.wait(10)
        super().append(batch)


def test_a_cancelled_order_does_not_reuse_an_index_already_written() -> None:
    async def main() -> None:
        disk = SlowDisk()
        master = Master(MASTER, State(), disk, Published(), term=1)
        first = asyncio.create_task(master.order(register("a"), MASTER))
        await asyncio.to_thread(disk.entered.wait, 10)
        first.cancel()
        disk.go.set()
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.sleep(0.05)  # the write thread has finished by now
        await master.order(register("b"), MASTER)
        indices = [e.idx for e in disk.records]
        assert indices == sorted(set(indices)), indices
        replayed = State()
        for event in disk.records:
            if event.idx > replayed.last_event_applied_idx:
                replayed = apply(replayed, event)
        assert replayed == master.state

    run(main())


def test_the_real_log_records_what_the_master_holds(tmp_path: Path) -> None:
    """The baseline the tests above depart from: every ordered event is in the log."""
    path = tmp_path / "events.log"

    async def main() -> None:
        event_log, _, _ = EventLog.open(path)
        master = Master(MASTER, State(), event_log, Published(), term=2)
        for name in ("a", "b", "c"):
            await master.order(register(name), MASTER)
        event_log.close()
        logged = list(read_events(path))
        assert [(e.idx, e.term, e.indexed_by) for e in logged] == [
            (0, 2, MASTER),
            (1, 2, MASTER),
            (2, 2, MASTER),
        ]
        state = State()
        for event in logged:
            state = apply(state, event)
        assert state == master.state

    run(main())
