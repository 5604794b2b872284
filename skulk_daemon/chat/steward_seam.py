"""What the chat service asks of the steward (``skulk_daemon/steward``), which imports
the chat pipeline and is therefore not imported here: a seam like :mod:`.hooks`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from skulk_core.ids import CommandId
from skulk_core.steward.lifecycle import StewardStatus
from skulk_daemon.chat.admission import Admitted
from skulk_daemon.chat.task import ChatTask, TaskMessage
from skulk_daemon.chat.turn import TurnEvent


class StewardTurns(Protocol):
    @property
    def system_prompt(self) -> str: ...

    def owns(self, command_id: CommandId) -> bool:
        """Whether ``command_id`` is a steward turn in flight here."""
        ...

    def check(self, task: ChatTask) -> StewardStatus:
        """Admission of a steward turn (raises ``ApiError`` 404/400/503)."""
        ...

    def wire_admitted(
        self, command_id: CommandId, status: StewardStatus, include_usage: bool
    ) -> Admitted: ...

    def turn(
        self,
        command_id: CommandId,
        status: StewardStatus,
        system_prompt: str,
        history: tuple[TaskMessage, ...],
        *,
        operator: bool,
        max_tokens: int | None = None,
    ) -> AsyncIterator[TurnEvent]: ...
