"""The node: identity, configuration, State, telemetry and its role in the cluster.

Controllers talk to the node, never to the parts behind it. ``submit`` is the one
way to change State: the command goes to the master (in-process when this node is
the master, over the fabric otherwise), and the call returns once the resulting
events are applied here, so a handler can read its own write.

Every node keeps the whole State and its own durable copy of the event log. The
master indexes events; followers append the master's events to their own log
before applying them, so a node restarted from its data dir holds everything it
had applied. Every ``SNAPSHOT_EVERY`` events the log is folded into a snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from skulk_core.cluster.health import derive_node_health
from skulk_core.cluster.prefixes import RoutedPrompts, prefix_holders
from skulk_core.cluster.telemetry import NodeHealth, NodeTelemetry
from skulk_core.config import SkulkConfig
from skulk_core.ids import InstanceId, ModelId, NodeId, new_command_id
from skulk_core.models.cards import ModelCard
from skulk_core.models.catalog import Catalog, InstalledModel, build_catalog
from skulk_core.models.image_cards import visible_catalog
from skulk_core.placement import ClusterFacts, cluster_facts
from skulk_core.placement.ordering import admit_command
from skulk_core.registry.format import VerifiedCatalog
from skulk_core.state.apply import apply
from skulk_core.state.commands import Command, RecordMasterElected
from skulk_core.state.decide import Refused
from skulk_core.state.events import IndexedEvent
from skulk_core.state.state import State
from skulk_daemon.node.config_store import ConfigStore
from skulk_daemon.node.eventlog import EventLog
from skulk_daemon.node.identity import NodeIdentity
from skulk_daemon.node.master import Master, NotMaster
from skulk_daemon.node.recovery import PartitionRecovery
from skulk_daemon.node.registration import Registration
from skulk_daemon.node.reports import Reports
from skulk_daemon.node.snapshot import (
    SNAPSHOT_EVERY,
    SNAPSHOT_FILE,
    StoredSnapshot,
    resume,
    save_snapshot,
)
from skulk_daemon.node.telemetry_book import TelemetryBook
from skulk_daemon.system.settings import Settings

log = logging.getLogger(__name__)

NO_MASTER_WAIT_SECONDS: Final = 15.0
"""How long a command waits for a master to be elected (or re-elected) before it
is refused with 503."""


class CommandRefused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class NoMaster(CommandRefused):
    """No master could take the command in time (an election, a partition)."""

    def __init__(self, message: str) -> None:
        super().__init__("no_master", message)


IndexedListener = Callable[[list[IndexedEvent], int, NodeId | None], None]
"""Replication's hook: a batch the master indexed, and the term and master of the
event just before it."""

OrderedListener = Callable[[State, list[IndexedEvent]], None]
"""The repair loop's hook: a batch the master ordered, and the State before it."""

Forward = Callable[[Command], Awaitable[int | Refused]]
"""Send a command to the remote master; the index of its last event, or a refusal.
Raises :class:`NoMaster` when the master cannot be reached."""


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
        snapshot: StoredSnapshot | None = None,
    ) -> None:
        self.settings = settings
        self.recovery = PartitionRecovery(identity.node_id, replayed)
        self.identity = identity
        self.config_store = config_store
        self.event_log = event_log
        self.installed_models = installed_models
        self.models_dir = models_dir
        # The signed registry's verified catalog, when one is usable (the registry
        # client replaces this; skulk_daemon.registry).
        self.registry_catalog: Callable[[], VerifiedCatalog | None] = lambda: None
        state, last_term, last_master = resume(snapshot, replayed)
        self._state = state
        self._last_term = last_term
        self._last_master = last_master
        self._snapshot_idx = state.last_event_applied_idx if snapshot is not None else -1
        self._telemetry = TelemetryBook()
        # Prefix fingerprints of the prompts this node sent to each instance: published
        # in telemetry, and routing's freshest view of where its own prompts went.
        self.routed_prompts = RoutedPrompts()
        self._applied = asyncio.Condition()
        self._role_changed = asyncio.Event()
        self._listeners: list[Callable[[], None]] = []
        self._indexed_listeners: list[IndexedListener] = []
        self._ordered_listeners: list[OrderedListener] = []
        self._reports = Reports(self.submit, CommandRefused)
        self.registration = Registration(
            self.submit, identity.node_id, no_master=NoMaster, refused=CommandRefused
        )
        self.master: Master | None = None
        self._retired: Master | None = None
        """The master this node last stepped down from: its in-flight writes finish
        before any replicated event is applied (one order in the log)."""
        self._forward: Forward | None = None
        self._log_lock = asyncio.Lock()

    # -- reads ---------------------------------------------------------------------

    @property
    def node_id(self) -> NodeId:
        return self.identity.node_id

    @property
    def state(self) -> State:
        return self._state

    @property
    def last_term(self) -> int:
        """The term of the last event applied here (log freshness, for elections)."""
        return self._last_term

    @property
    def last_master(self) -> NodeId | None:
        """The master that indexed the last event applied here."""
        return self._last_master

    @property
    def is_master(self) -> bool:
        return self.master is not None

    @property
    def config(self) -> SkulkConfig:
        return self.config_store.config

    def catalog(self) -> Catalog:
        signed = self.registry_catalog()
        if signed is None:
            catalog = build_catalog(self.installed_models, self._state.custom_model_cards)
        else:
            catalog = build_catalog(
                self.installed_models,
                self._state.custom_model_cards,
                signed.cards,
                signed.advisories,
            )
        return visible_catalog(catalog, os.environ)

    def view(self) -> ClusterView:
        state = self._state
        telemetry = self._telemetry.readings()
        health = derive_node_health(state, telemetry, datetime.now(UTC))
        return ClusterView(state=state, telemetry=telemetry, health=health)

    def prefix_holders(self) -> dict[InstanceId, frozenset[int]]:
        """What every instance is known to hold of prompts, from all nodes' telemetry
        and this node's own routing (fresher than its last reading)."""
        readings = [r.prompt_prefixes for r in self._telemetry.readings().values()]
        readings.append(self.routed_prompts.published(self._state.instances))
        return prefix_holders(readings)

    def own_telemetry(self) -> NodeTelemetry | None:
        return self._telemetry.get(self.node_id)

    def record_telemetry(self, reading: NodeTelemetry) -> None:
        """Last write wins, per node."""
        self._telemetry.record(reading)

    def forget_telemetry(self, node_id: NodeId) -> None:
        self._telemetry.forget(node_id)

    def on_applied(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (synchronously, cheaply) after every applied batch of events."""
        self._listeners.append(listener)

    def on_ordered(self, listener: OrderedListener) -> None:
        """Call ``listener`` with every batch this node orders as master and the State
        just before it (what the batch changed: a failed instance's last shape)."""
        self._ordered_listeners.append(listener)

    def placement_facts(self) -> ClusterFacts:
        """What placement plans against here: State, telemetry and the catalog."""
        view = self.view()
        return cluster_facts(view.state, view.telemetry, self._cards())

    def _cards(self) -> dict[ModelId, ModelCard]:
        return {model_id: entry.card for model_id, entry in self.catalog().by_id.items()}

    def _admit(self, state: State, command: Command) -> Refused | None:
        return admit_command(state, command, self._telemetry.readings(), self._cards())

    def on_indexed(self, listener: IndexedListener) -> None:
        """Call ``listener`` with every batch this node indexes as master (for
        replication), and the term and master of the event before it."""
        self._indexed_listeners.append(listener)

    # -- roles ---------------------------------------------------------------------

    def become_master(self, term: int) -> None:
        """Take over ordering, seeded from the State replicated here."""
        if self.master is not None and self.master.term == term:
            return
        if self.master is not None:
            self.master.close()
            self._retired = self.master
        self.master = Master(
            self.node_id, self._state, self.event_log, self._on_indexed, term, admit=self._admit
        )
        self._forward = None
        self._role_changed.set()
        self._role_changed = asyncio.Event()
        log.info("this node is the master (term %d)", term)
        self.report(
            RecordMasterElected(command_id=new_command_id(), master_node_id=self.node_id, term=term)
        )

    def become_follower(self, forward: Forward) -> None:
        if self.master is not None:
            self.master.close()
            self._retired = self.master
            self.master = None
            log.info("this node stepped down; following the elected master")
        self._forward = forward
        self._role_changed.set()
        self._role_changed = asyncio.Event()

    def lose_master(self) -> None:
        """An election is under way: commands wait for its outcome."""
        if self.master is not None:
            self.master.close()
            self._retired = self.master
            self.master = None
        self._forward = None

    # -- commands ------------------------------------------------------------------

    async def start(self, *, wait: bool = True) -> None:
        """Start reporting and register with the master; ``wait=False`` registers in
        the background (see :mod:`.registration`)."""
        self._reports.start()
        await self.registration.start(wait=wait)

    def report(self, command: Command) -> None:
        """Submit ``command`` in the background, after every earlier report."""
        self._reports.put(command)

    async def flush_reports(self) -> None:
        """Wait until every report made so far is applied (at shutdown; tests wait on it)."""
        await self._reports.flush()

    async def submit(self, command: Command) -> list[IndexedEvent] | int:
        """Send a command to the master; return once its events are applied here.

        Returns the events when this node is the master, else the index of the
        command's last event. Raises :class:`CommandRefused` (:class:`NoMaster`
        when no master takes it in time).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + NO_MASTER_WAIT_SECONDS
        while True:
            outcome = await self._try_submit(command)
            if outcome is not None:
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise NoMaster("no master is elected; the cluster is electing one, retry")
            waiting = self._role_changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiting.wait(), min(remaining, 0.5))
        if isinstance(outcome, Refused):
            raise CommandRefused(outcome.code, outcome.message)
        target = outcome[-1].idx if isinstance(outcome, list) and outcome else outcome
        if isinstance(target, int) and target >= 0:
            await self.wait_applied(target)
        return outcome

    async def _try_submit(self, command: Command) -> list[IndexedEvent] | int | Refused | None:
        """One attempt; ``None`` when there is no master to take it right now."""
        master = self.master
        if master is not None:
            try:
                return await master.order(command, self.node_id)
            except NotMaster:
                return None
        forward = self._forward
        if forward is None:
            return None
        try:
            return await forward(command)
        except NoMaster:
            return None

    async def wait_applied(self, idx: int) -> None:
        async with self._applied:
            await self._applied.wait_for(lambda: self._state.last_event_applied_idx >= idx)

    # -- events --------------------------------------------------------------------

    def _on_indexed(self, events: list[IndexedEvent]) -> None:
        """The master made ``events`` durable in this node's log: apply, then replicate
        (unless it stepped down meanwhile: then they are only this node's, and the
        next sync with the new master replaces them)."""
        prev_term, prev_master = self._last_term, self._last_master
        before = self._state
        self._apply(events)
        master = self.master
        if master is None or master.closed or master.term != events[-1].term:
            return
        for listener in self._indexed_listeners:
            listener(events, prev_term, prev_master)
        for ordered in self._ordered_listeners:
            ordered(before, events)

    async def apply_replicated(self, events: Sequence[IndexedEvent]) -> None:
        """A follower's copy of the master's events: durable here first, then applied.

        The events must continue this node's State exactly (the replication layer
        orders and de-duplicates them).
        """
        retired = self._retired
        if retired is not None:
            async with retired.lock:
                pass  # its last write (if any) is in the log and applied now
        async with self._log_lock:
            fresh = [e for e in events if e.idx > self._state.last_event_applied_idx]
            if not fresh:
                return
            await asyncio.to_thread(self.event_log.append, fresh)
            self._apply(fresh)

    async def install_snapshot(
        self, state: State, last_term: int, last_master: NodeId | None
    ) -> None:
        """Replace State with the master's (this node was too far behind, or diverged).
        What this node asked for in a history the master's lacks is submitted again."""
        lost = self.recovery.lost(state)
        async with self._log_lock:
            path = self.settings.data_dir / SNAPSHOT_FILE
            await asyncio.to_thread(save_snapshot, path, state, last_term, last_master)
            await asyncio.to_thread(self.event_log.reset)
            self._state = state
            self._last_term = last_term
            self._last_master = last_master
            self._snapshot_idx = state.last_event_applied_idx
            log.info("installed the master's snapshot at index %d", state.last_event_applied_idx)
        self._after_apply()
        self.recovery.installed(state, lost, self.submit)

    def _apply(self, events: Iterable[IndexedEvent]) -> None:
        state = self._state
        events = list(events)
        self.recovery.applied(events)
        for event in events:
            state = apply(state, event)
            self._last_term, self._last_master = event.term, event.indexed_by
        self._state = state
        self._after_apply()
        if state.last_event_applied_idx - self._snapshot_idx >= SNAPSHOT_EVERY:
            self._snapshot_idx = state.last_event_applied_idx
            asyncio.get_running_loop().create_task(self._write_snapshot())

    def _after_apply(self) -> None:
        for listener in self._listeners:
            listener()
        asyncio.get_running_loop().create_task(self._notify())

    async def _write_snapshot(self) -> None:
        async with self._log_lock:
            # NOTE: the master appends under its own lock; taking it too means no
            # append can land between the snapshot and the reset and be lost.
            master = self.master
            if master is not None:
                async with master.lock:
                    await self._snapshot_now()
            else:
                await self._snapshot_now()

    async def _snapshot_now(self) -> None:
        state, term, master = self._state, self._last_term, self._last_master
        path = self.settings.data_dir / SNAPSHOT_FILE
        await asyncio.to_thread(save_snapshot, path, state, term, master)
        await asyncio.to_thread(self.event_log.reset)
        self._snapshot_idx = state.last_event_applied_idx
        log.info("snapshot at index %d; event log emptied", state.last_event_applied_idx)

    async def _notify(self) -> None:
        async with self._applied:
            self._applied.notify_all()

    def close(self) -> None:
        self.registration.close()
        self._reports.close()
        if self.master is not None:
            self.master.close()
        self.event_log.close()
