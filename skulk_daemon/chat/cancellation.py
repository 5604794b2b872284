"""The node-local registry of in-flight generation commands, for ``/v1/cancel``."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from skulk_core.ids import CommandId


class ActiveCommands:
    def __init__(self) -> None:
        self._cancel: dict[CommandId, Callable[[], None]] = {}

    def register(self, command_id: CommandId, cancel: Callable[[], None]) -> None:
        self._cancel[command_id] = cancel

    def finish(self, command_id: CommandId) -> None:
        self._cancel.pop(command_id, None)

    def running(self, command_id: CommandId, cancel: Callable[[], None]) -> Running:
        """``command_id`` cancellable with ``cancel`` for the ``with`` block's length."""
        return Running(self, command_id, cancel)

    def cancel(self, command_id: CommandId) -> bool:
        """Cancel an in-flight command; False when it is unknown or already complete."""
        cancel = self._cancel.pop(command_id, None)
        if cancel is None:
            return False
        cancel()
        return True

    def __len__(self) -> int:
        return len(self._cancel)


class Running:
    """A command registered while a ``with`` block runs (see
    :meth:`ActiveCommands.running`); it never swallows the block's exception."""

    def __init__(
        self, commands: ActiveCommands, command_id: CommandId, cancel: Callable[[], None]
    ) -> None:
        self._commands = commands
        self._command_id = command_id
        self._cancel = cancel

    def __enter__(self) -> None:
        self._commands.register(self._command_id, self._cancel)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._commands.finish(self._command_id)
