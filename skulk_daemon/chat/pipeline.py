"""Open one chat turn: extension transforms, admission, generation, observation.

Every chat wire format calls :func:`open_turn` with its normalized
:class:`~skulk_daemon.chat.task.ChatTask` and shapes ``turn.events`` into its own
bytes, passing the body through ``turn.respond`` so that extension observers run once
the response has been sent. With no chat middleware loaded both are the plain
pipeline: ``admit`` then ``turn_events(generation_events(...))``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from skulk_daemon.api.errors import ApiError
from skulk_daemon.chat.admission import Admitted, admit
from skulk_daemon.chat.commands import ActiveCommands
from skulk_daemon.chat.generation import generation_events
from skulk_daemon.chat.task import ChatTask
from skulk_daemon.chat.turn import TurnEvent, turn_events
from skulk_daemon.extensions.middleware import ChatMiddlewareRunner, ObservedTurn
from skulk_daemon.node import Node
from skulk_daemon.worker.supervisor import Supervisor

log = logging.getLogger("skulk.extensions")


@dataclass(frozen=True, slots=True)
class OpenedTurn:
    admitted: Admitted
    events: AsyncIterator[TurnEvent]
    """The turn's events, for the wire format to shape."""
    _observed: ObservedTurn

    def respond(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """The shaped body, unchanged; observers are scheduled after its last byte."""
        return self._observed.respond(body)


def _admit_transformed(
    node: Node, original: ChatTask, transformed: ChatTask
) -> tuple[Admitted, ChatTask]:
    """Admit the transformed request; if admission refuses it, the client's own."""
    try:
        return admit(node, transformed), transformed
    except ApiError as exc:
        if transformed is original:
            raise
        # The client's own request decides: refused as sent, or served as sent.
        admitted = admit(node, original)
        log.error(
            "the chat middleware's transformed request was refused (%s: %s); "
            "the request runs as the client sent it",
            exc.code,
            exc.message,
        )
        return admitted, original


async def open_turn(
    node: Node,
    worker: Supervisor,
    commands: ActiveCommands,
    middleware: ChatMiddlewareRunner,
    task: ChatTask,
    *,
    adjust: Callable[[Admitted], Admitted] | None = None,
) -> OpenedTurn:
    """Transform ``task`` (extensions), admit it, and start its generation lazily.

    Raises :class:`ApiError` for a request admission refuses. ``adjust`` rewrites the
    admitted request before dispatch (Ollama's ``raw`` prompt).
    """
    transformed = await middleware.transform(task)
    admitted, dispatched = _admit_transformed(node, task, transformed)
    if adjust is not None:
        admitted = adjust(admitted)
    events = turn_events(admitted, generation_events(worker, commands, admitted))
    observed = middleware.observe_turn(dispatched, admitted.command_id, events)
    return OpenedTurn(admitted=admitted, events=observed.events, _observed=observed)
