"""Commands between nodes: a follower forwards its commands to the master, the master
orders them and answers.

A forwarded command waits for one :class:`CommandOutcome` (or times out: the caller
retries with the same command id). The master keeps the outcomes of the last
:data:`RECENT_OUTCOMES` ordered commands, so a retry whose answer was lost gets the
same answer instead of being ordered twice.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

import msgspec

from skulk_core.cluster.election import Session
from skulk_core.cluster.fabric import Body, CommandOutcome, Header, SubmitCommand
from skulk_core.ids import CommandId, NodeId
from skulk_core.state.commands import Command
from skulk_core.state.decide import Refused
from skulk_daemon.node.master import NotMaster
from skulk_daemon.node.node import Node, NoMaster

FORWARD_TIMEOUT_SECONDS: Final = 5.0
RECENT_OUTCOMES: Final = 4096

Send = Callable[[NodeId, Body], bool]


class CommandForwarding:
    def __init__(self, node: Node, send: Send, session: Callable[[], Session | None]) -> None:
        self._node = node
        self._send = send
        self._session = session
        self._pending: dict[str, asyncio.Future[CommandOutcome]] = {}
        self._recent: OrderedDict[CommandId, CommandOutcome] = OrderedDict()

    async def forward(self, command: Command) -> int | Refused:
        """Send ``command`` to the elected master; the index of its last event, or a
        refusal. Raises :class:`NoMaster` when no master answers."""
        session = self._session()
        if session is None or session.master == self._node.node_id:
            raise NoMaster("no master is elected")
        request_id = secrets.token_hex(8)
        future: asyncio.Future[CommandOutcome] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            if not self._send(
                session.master, SubmitCommand(request_id=request_id, command=command)
            ):
                raise NoMaster("the master cannot be reached")
            try:
                outcome = await asyncio.wait_for(future, FORWARD_TIMEOUT_SECONDS)
            except TimeoutError:
                raise NoMaster("the master did not answer in time") from None
        finally:
            self._pending.pop(request_id, None)
        if outcome.refused_code == "not_master":
            raise NoMaster("the node asked is no longer the master")
        if outcome.refused_code is not None:
            return Refused(code=outcome.refused_code, message=outcome.refused_message or "")
        return outcome.last_idx

    def answered(self, outcome: CommandOutcome) -> None:
        """The master's answer to one of this node's forwarded commands."""
        pending = self._pending.get(outcome.request_id)
        if pending is not None and not pending.done():
            pending.set_result(outcome)

    async def serve(self, origin: NodeId, header: Header, request: SubmitCommand) -> None:
        """As the master: order a follower's command and answer it."""
        command_id = request.command.command_id
        cached = self._recent.get(command_id)
        if cached is not None:
            # A retry of a command already ordered (its answer was lost): same answer.
            self._send(origin, msgspec.structs.replace(cached, request_id=request.request_id))
            return
        master = self._node.master
        if master is None or header.session is None or header.session.term != master.term:
            self._send(
                origin,
                CommandOutcome(
                    request_id=request.request_id,
                    refused_code="not_master",
                    refused_message="this node is not the master of that session",
                ),
            )
            return
        try:
            outcome = await master.order(request.command, origin)
        except NotMaster:
            answer = CommandOutcome(request_id=request.request_id, refused_code="not_master")
        else:
            if isinstance(outcome, Refused):
                answer = CommandOutcome(
                    request_id=request.request_id,
                    refused_code=outcome.code,
                    refused_message=outcome.message,
                )
            else:
                last = outcome[-1].idx if outcome else -1
                answer = CommandOutcome(request_id=request.request_id, last_idx=last)
                self._recent[command_id] = answer
                while len(self._recent) > RECENT_OUTCOMES:
                    self._recent.popitem(last=False)
        self._send(origin, answer)

    def close(self) -> None:
        for pending in self._pending.values():
            pending.cancel()
