"""The node: identity, configuration, State, telemetry and the master, wired together.

Controllers talk to the node, never to the parts behind it. ``submit`` is the one
way to change State: the command goes to the master (in-process on a single node),
and the call returns once the resulting events are applied here, so a handler can
read its own write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from skulk_core.apply import apply
from skulk_core.catalog import Catalog, InstalledModel, build_catalog
from skulk_core.commands import Command, RegisterNode
from skulk_core.config import SkulkConfig
from skulk_core.decide import Refused
from skulk_core.events import IndexedEvent
from skulk_core.health import derive_node_health
from skulk_core.ids import NodeId, new_command_id
from skulk_core.state import State
from skulk_core.telemetry import NodeHealth, NodeTelemetry
from skulk_daemon.config_store import ConfigStore
from skulk_daemon.eventlog import EventLog
from skulk_daemon.identity import NodeIdentity
from skulk_daemon.master import Master
from skulk_daemon.settings import Settings

log = logging.getLogger(__name__)


class CommandRefused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class ClusterView:
    """A consistent read of State plus the telemetry beside it, for ``/state``."""

    state: State
    telemetry: dict[NodeId, NodeTelemetry]
    health: dict[NodeId, NodeHealth]


class Node:
    def __init__(
        self,
        *,
        settings: Settings,
        identity: NodeIdentity,
        config_store: ConfigStore,
        event_log: EventLog,
        replayed: list[IndexedEvent],
        installed_models: list[InstalledModel],
        models_dir: Path,
    ) -> None:
        self.settings = settings
        self.identity = identity
        self.config_store = config_store
        self.event_log = event_log
        self.installed_models = installed_models
        self.models_dir = models_dir
        state = State()
        for event in replayed:
            state = apply(state, event)
        self._state = state
        self._telemetry: dict[NodeId, NodeTelemetry] = {}
        self._applied = asyncio.Condition()
        self._listeners: list[Callable[[], None]] = []
        # Reports (runner phases, task bookkeeping) are submitted in the order they
        # were made, off the caller's path: a runner's token stream never waits on fsync.
        self._reports: asyncio.Queue[Command] = asyncio.Queue()
        self._reporter: asyncio.Task[None] | None = None
        self.master = Master(identity.node_id, state, event_log, self._on_events)

    @property
    def node_id(self) -> NodeId:
        return self.identity.node_id

    @property
    def state(self) -> State:
        return self._state

    @property
    def config(self) -> SkulkConfig:
        return self.config_store.config

    def catalog(self) -> Catalog:
        return build_catalog(self.installed_models, self._state.custom_model_cards)

    def view(self) -> ClusterView:
        state = self._state
        telemetry = dict(self._telemetry)
        health = derive_node_health(state, telemetry, datetime.now(UTC))
        return ClusterView(state=state, telemetry=telemetry, health=health)

    def record_telemetry(self, reading: NodeTelemetry) -> None:
        """Last write wins, per node."""
        self._telemetry[reading.node_id] = reading

    def on_applied(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (synchronously, cheaply) after every applied batch of events."""
        self._listeners.append(listener)

    async def start(self) -> None:
        self._reporter = asyncio.create_task(self._drain_reports())
        await self.submit(RegisterNode(command_id=new_command_id(), node_id=self.node_id))

    def report(self, command: Command) -> None:
        """Submit ``command`` in the background, after every earlier report."""
        self._reports.put_nowait(command)

    async def _drain_reports(self) -> None:
        while True:
            command = await self._reports.get()
            try:
                await self.submit(command)
            except CommandRefused as exc:
                log.debug("report %s refused: %s", type(command).__name__, exc.message)
            except Exception:
                log.exception("could not submit %s", type(command).__name__)
            finally:
                self._reports.task_done()

    async def flush_reports(self) -> None:
        """Wait until every report made so far is applied (used at shutdown)."""
        if self._reporter is not None and not self._reporter.done():
            await self._reports.join()

    async def submit(self, command: Command) -> list[IndexedEvent]:
        """Send a command to the master; return once its events are applied here."""
        outcome = await self.master.order(command, self.node_id)
        if isinstance(outcome, Refused):
            raise CommandRefused(outcome.code, outcome.message)
        if outcome:
            target = outcome[-1].idx
            async with self._applied:
                await self._applied.wait_for(lambda: self._state.last_event_applied_idx >= target)
        return outcome

    def _on_events(self, events: Iterable[IndexedEvent]) -> None:
        state = self._state
        for event in events:
            state = apply(state, event)
        self._state = state
        for listener in self._listeners:
            listener()
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._applied:
            self._applied.notify_all()

    def close(self) -> None:
        if self._reporter is not None:
            self._reporter.cancel()
        self.event_log.close()
