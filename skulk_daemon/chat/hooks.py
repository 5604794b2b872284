"""The seam where something outside the chat service joins every chat turn.

The chat service defines what it calls; the extension runtime
(:class:`~skulk_daemon.extensions.middleware.ChatMiddlewareRunner`) implements it. So
``chat`` never imports ``extensions``, and with nothing loaded the path is the plain
pipeline (:data:`NO_HOOKS`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final, Protocol

from skulk_daemon.chat.task import ChatTask
from skulk_daemon.chat.turn import TurnEvent


class ObservedEvents(Protocol):
    """One turn's events as the hooks see them go by."""

    @property
    def events(self) -> AsyncIterator[TurnEvent]:
        """The turn's events, unchanged, in order."""
        ...

    def respond(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """The shaped response body, unchanged; observers run after its last byte."""
        ...


class ChatHooks(Protocol):
    """What the chat service asks of whoever hooks into it."""

    async def transform(self, task: ChatTask) -> ChatTask:
        """The task to admit in place of ``task`` (``task`` itself when unchanged)."""
        ...

    def observe_turn(
        self, task: ChatTask, command_id: str, events: AsyncIterator[TurnEvent]
    ) -> ObservedEvents:
        """Wrap one admitted turn so its observers learn how it ended."""
        ...


class _Unobserved:
    def __init__(self, events: AsyncIterator[TurnEvent]) -> None:
        self._events = events

    @property
    def events(self) -> AsyncIterator[TurnEvent]:
        return self._events

    def respond(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        return body


class _NoHooks:
    async def transform(self, task: ChatTask) -> ChatTask:
        return task

    def observe_turn(
        self, task: ChatTask, command_id: str, events: AsyncIterator[TurnEvent]
    ) -> ObservedEvents:
        return _Unobserved(events)


NO_HOOKS: Final[ChatHooks] = _NoHooks()
"""Nothing hooked in: the request as sent, the events as made."""
