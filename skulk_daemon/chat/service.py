"""The chat service: one turn from a normalized task to the events a wire format shapes.

Every chat wire format (Chat Completions, Responses, Claude Messages, Ollama
chat/generate, the bench route) decodes its body into a
:class:`~skulk_daemon.chat.task.ChatTask` and asks :class:`ChatService` for a turn:
the hooks' transform, then admission (a transformed request that admission refuses
falls back to the request as the client sent it), then the lazy generation. The
controller shapes ``turn.events`` into its bytes and passes them through
``turn.respond`` so that the hooks' observers run once the response has been sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import msgspec

from skulk_core.ids import CommandId, new_command_id
from skulk_core.models.cards import ModelTask
from skulk_core.models.catalog import Catalog
from skulk_daemon.chat.admission import Admitted, admit
from skulk_daemon.chat.cancellation import ActiveCommands
from skulk_daemon.chat.coalesce import Backlog, coalesced
from skulk_daemon.chat.generation import generation_events
from skulk_daemon.chat.hooks import NO_HOOKS, ChatHooks, ObservedEvents
from skulk_daemon.chat.steward_seam import StewardTurns
from skulk_daemon.chat.task import ChatTask, TaskMessage, as_history
from skulk_daemon.chat.turn import TurnEvent, turn_events
from skulk_daemon.errors import ApiError
from skulk_daemon.node.node import Node
from skulk_daemon.placement.on_demand import OnDemandLoader
from skulk_daemon.worker.supervisor import Supervisor

log = logging.getLogger("skulk.extensions")

KeepAlive = float | None | msgspec.UnsetType
"""A request's keep-alive in seconds (``None``: forever); unset: the configured one."""


@dataclass(frozen=True, slots=True)
class OpenedTurn:
    admitted: Admitted
    events: AsyncIterator[TurnEvent]
    """The turn's events, for the wire format to shape."""
    _observed: ObservedEvents
    _backlog: Backlog | None = None

    def respond(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """The shaped body, unchanged but for fewer, larger pieces when tokens arrive
        together (see :mod:`~skulk_daemon.chat.coalesce`); observers are scheduled
        after its last byte."""
        if self._backlog is not None:
            body = coalesced(body, self._backlog)
        return self._observed.respond(body)


class ChatService:
    """Admission, dispatch and cancellation of chat turns on this node."""

    def __init__(
        self,
        node: Node,
        worker: Supervisor,
        *,
        commands: ActiveCommands | None = None,
        hooks: ChatHooks = NO_HOOKS,
        on_demand: OnDemandLoader | None = None,
    ) -> None:
        self._node = node
        self._worker = worker
        self._commands = commands if commands is not None else ActiveCommands()
        self._hooks = hooks
        self._on_demand = on_demand
        self._steward: StewardTurns | None = None

    @property
    def commands(self) -> ActiveCommands:
        """The in-flight commands this node can cancel (shared with embeddings)."""
        return self._commands

    def attach_hooks(self, hooks: ChatHooks) -> None:
        """Hook ``hooks`` into every turn opened from now on (extensions, once loaded)."""
        self._hooks = hooks

    def attach_steward(self, steward: StewardTurns) -> None:
        """Serve the reserved ``skulk/steward`` id with ``steward``'s turns."""
        self._steward = steward

    def is_steward_turn(self, command_id: CommandId) -> bool:
        return self._steward is not None and self._steward.owns(command_id)

    async def open_steward_turn(self, task: ChatTask, *, operator: bool) -> OpenedTurn:
        """A turn of the reserved steward id, through the hooks (the spec's "Extensions
        on a steward turn"): the middleware sees the steward's prompt as instructions
        and the user/assistant history as input, and only those two are read back; a
        transform that leaves no trailing user message is discarded whole. Client system
        messages are ignored; ``operator`` arms the inert proposal tools."""
        steward = self._steward
        if steward is None:
            raise ApiError(404, "this node serves no steward", code="model_not_found")
        status = steward.check(task)
        history = as_history(task.messages)
        if not history or history[-1].role != "user":
            raise ApiError(
                400, "a steward turn needs a trailing user message", code="invalid_messages"
            )
        prompt = steward.system_prompt
        canonical = ChatTask(
            model=task.model, messages=(TaskMessage(role="system", content=prompt), *history)
        )
        transformed = await self._hooks.transform(canonical)
        if transformed is not canonical:
            system = "\n\n".join(
                m.content for m in transformed.messages if m.role == "system" and m.content
            )
            changed = as_history(transformed.messages)
            if changed and changed[-1].role == "user":
                prompt, history = system or prompt, changed
        effective = ChatTask(
            model=task.model, messages=(TaskMessage(role="system", content=prompt), *history)
        )
        command_id = new_command_id()
        admitted = steward.wire_admitted(command_id, status, task.include_usage)
        events = steward.turn(
            command_id, status, prompt, history, operator=operator, max_tokens=task.max_tokens
        )
        observed = self._hooks.observe_turn(effective, command_id, events)
        return OpenedTurn(admitted=admitted, events=observed.events, _observed=observed)

    def catalog(self) -> Catalog:
        """The node's catalog, for formats that resolve a model name themselves."""
        return self._node.catalog()

    async def admit(self, task: ChatTask, *, keep_alive: KeepAlive = msgspec.UNSET) -> Admitted:
        """Admission alone (``ApiError`` when refused); nothing is dispatched. With
        ``inference.load_on_demand`` an unplaced model is placed first (Ollama's load
        probe), kept ``keep_alive`` idle seconds when that is given."""
        await self._serve(task.model, keep_alive)
        return await asyncio.to_thread(admit, self._node, task)

    async def open_turn(
        self, task: ChatTask, *, keep_alive: KeepAlive = msgspec.UNSET
    ) -> OpenedTurn:
        """Transform ``task`` (the hooks), admit it, and start its generation lazily.

        Raises :class:`ApiError` for a request admission refuses. With
        ``inference.load_on_demand`` an installed, unplaced model is placed first and
        waited for; ``keep_alive`` (Ollama's, seconds, ``None`` forever) is how long
        the model's on-demand instances stay idle once this turn has ended.
        """
        await self._serve(task.model, keep_alive)
        transformed = await self._hooks.transform(task)
        # NOTE: admission runs off the event loop (here and in admit()): it renders the
        # card's chat template and compiles grammars, bounded but not free.
        admitted, dispatched = await asyncio.to_thread(self._admit_transformed, task, transformed)
        backlog = Backlog()
        events = self._events(admitted, backlog)
        if not isinstance(keep_alive, msgspec.UnsetType):
            events = self._then_keep_alive(events, admitted.model, keep_alive)
        observed = self._hooks.observe_turn(dispatched, admitted.command_id, events)
        return OpenedTurn(
            admitted=admitted, events=observed.events, _observed=observed, _backlog=backlog
        )

    async def open_plain_turn(self, task: ChatTask) -> tuple[Admitted, AsyncIterator[TurnEvent]]:
        """A turn without the hooks (the bench route measures the engine alone)."""
        admitted = await self.admit(task)
        return admitted, self._events(admitted)

    def keep_alive(self, model: str, seconds: float | None) -> None:
        """``model``'s on-demand instances stay ``seconds`` idle from now (0: unloaded
        once idle; Ollama's ``keep_alive`` on a request that generates nothing)."""
        if self._on_demand is not None:
            self._on_demand.keep_alive_after(model, seconds)

    async def _serve(self, model: str, keep_alive: KeepAlive) -> None:
        if self._on_demand is not None:
            await self._on_demand.serve(model, ModelTask.TEXT_GENERATION, keep_alive=keep_alive)

    async def _then_keep_alive(
        self, events: AsyncIterator[TurnEvent], model: str, seconds: float | None
    ) -> AsyncIterator[TurnEvent]:
        # NOTE: set once the turn has ended, never before: a keep-alive of 0 set
        # while the task is not yet ordered would let the master unload the
        # instance under this very request.
        try:
            async for event in events:
                yield event
        finally:
            self.keep_alive(model, seconds)

    def cancel(self, command_id: CommandId) -> bool:
        """Cancel an in-flight command; False when it is unknown or already complete."""
        return self._commands.cancel(command_id)

    def _events(
        self, admitted: Admitted, backlog: Backlog | None = None
    ) -> AsyncIterator[TurnEvent]:
        return turn_events(
            admitted, generation_events(self._worker, self._commands, admitted, backlog)
        )

    def _admit_transformed(
        self, original: ChatTask, transformed: ChatTask
    ) -> tuple[Admitted, ChatTask]:
        """Admit the transformed request; if admission refuses it, the client's own."""
        try:
            return admit(self._node, transformed), transformed
        except ApiError as exc:
            if transformed is original:
                raise
            # The client's own request decides: refused as sent, or served as sent.
            admitted = admit(self._node, original)
            log.error(
                "the chat middleware's transformed request was refused (%s: %s); "
                "the request runs as the client sent it",
                exc.code,
                exc.message,
            )
            return admitted, original
