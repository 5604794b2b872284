"""The node-local registry of in-flight generation commands, for ``/v1/cancel``."""

from __future__ import annotations

from collections.abc import Callable

from skulk_core.ids import CommandId


class ActiveCommands:
    def __init__(self) -> None:
        self._cancel: dict[CommandId, Callable[[], None]] = {}

    def register(self, command_id: CommandId, cancel: Callable[[], None]) -> None:
        self._cancel[command_id] = cancel

    def finish(self, command_id: CommandId) -> None:
        self._cancel.pop(command_id, None)

    def cancel(self, command_id: CommandId) -> bool:
        """Cancel an in-flight command; False when it is unknown or already complete."""
        cancel = self._cancel.pop(command_id, None)
        if cancel is None:
            return False
        cancel()
        return True

    def __len__(self) -> int:
        return len(self._cancel)
