"""The master: the only writer of the event log.

It takes commands one at a time, asks the pure :func:`skulk_core.state.decide.decide`
what they mean against its State, gives each resulting event the next index,
makes the events durable, and only then publishes them. On a single node it lives
in-process; with the fabric, commands arrive over the control plane and the same
object orders them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from skulk_core.ids import NodeId
from skulk_core.state.apply import apply
from skulk_core.state.commands import Command
from skulk_core.state.decide import Refused, decide
from skulk_core.state.events import IndexedEvent
from skulk_core.state.state import State
from skulk_daemon.node.eventlog import EventLog

log = logging.getLogger(__name__)

Publish = Callable[[list[IndexedEvent]], None]
Admit = Callable[[State, Command], Refused | None]
"""A check a command must pass against the master's State before it is decided
(placements, against every placement ordered before them)."""


class NotMaster(RuntimeError):
    """This master stepped down (a newer term exists); send the command again."""


class Master:
    def __init__(
        self,
        node_id: NodeId,
        state: State,
        event_log: EventLog,
        publish: Publish,
        term: int = 0,
        *,
        admit: Admit | None = None,
    ) -> None:
        self._node_id = node_id
        self._admit = admit
        self._state = state
        self._log = event_log
        self._publish = publish
        self.term = term
        self._closed = False
        # NOTE: one lock orders every command. decide() must see the State produced by
        # every earlier command, and indices must reach the log in order.
        self.lock = asyncio.Lock()

    @property
    def state(self) -> State:
        return self._state

    def _commit(self, state: State, indexed: list[IndexedEvent]) -> None:
        self._state = state
        # NOTE: called under the lock, so subscribers see batches in index order. It
        # publishes even after stepping down: the record is in this node's log, so
        # this node's State must hold it too (the node does not replicate it, and a
        # sync with the new master repairs the divergence).
        if indexed:
            self._publish(indexed)

    def close(self) -> None:
        """Step down: commands not yet ordered raise :class:`NotMaster`."""
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    async def order(self, command: Command, origin: NodeId) -> list[IndexedEvent] | Refused:
        async with self.lock:
            if self._closed:
                raise NotMaster("this node is no longer the master")
            refused = self._admit(self._state, command) if self._admit is not None else None
            decided = refused or decide(self._state, command)
            if isinstance(decided, Refused):
                return decided
            now = datetime.now(UTC)
            indexed: list[IndexedEvent] = []
            state = self._state
            for event in decided:
                item = IndexedEvent(
                    idx=state.last_event_applied_idx + 1,
                    event=event,
                    origin=origin,
                    recorded_at=now,
                    command_id=command.command_id,
                    term=self.term,
                    indexed_by=self._node_id,
                )
                state = apply(state, item)
                indexed.append(item)
            # Durable before visible: a crash after this line replays the events, a
            # crash before it loses a command nobody was told had succeeded.
            write = asyncio.ensure_future(asyncio.to_thread(self._log.append, indexed))
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                # NOTE: the caller went away mid-write. The record will be on disk, so
                # State must advance with it, or the next command would reuse its
                # index. Finish, commit, then let the cancellation through.
                with contextlib.suppress(OSError):
                    await write
                    self._commit(state, indexed)
                raise
            except OSError as exc:
                log.error("the event log cannot be written: %s", exc)
                return Refused(
                    code="event_log_unwritable",
                    message=f"the master cannot record the change ({exc.strerror or exc}); "
                    "free disk space on the master node and retry",
                )
            self._commit(state, indexed)
        return indexed
