"""Chat middleware: the hooks an extension gets on the chat path, and their guard.

Every wire format (Chat Completions, Responses, Claude Messages, Ollama) normalizes a
request into one :class:`ChatTaskParams` before admission. When extensions with chat
middleware are loaded, :class:`ChatMiddlewareRunner`:

- runs each middleware's ``transform_chat_request`` on those params, in load order,
  before admission and dispatch. A hook that raises, returns something that is not
  ``ChatTaskParams``, or returns a turn the model cannot answer (no messages, or no
  trailing user message where the request had one) is logged and its result discarded
  wholesale: the request goes on with the params that hook was given.
- accumulates the turn's events as the wire format shapes them (never altering,
  delaying or reordering one) and, once the response has finished streaming, runs every
  ``observe_chat_response`` as a background task with an immutable
  :class:`ChatResponseSummary`. An observer that raises is logged and skipped.

With no middleware loaded the runner is inert: the chat path is exactly what it is
without extensions.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from skulk_core.chat.tools import ToolCall
from skulk_daemon.chat.task import ChatTask, TaskMessage
from skulk_daemon.chat.turn import ContentDelta, ReasoningDelta, TurnEnd, TurnError, TurnEvent

if TYPE_CHECKING:
    from skulk_daemon.extensions.context import ExtensionContext

log = logging.getLogger("skulk.extensions")

ChatTaskParams = ChatTask
"""The normalized chat request a middleware transforms (the spec's
``TextGenerationTaskParams``): a frozen dataclass; change it with
``dataclasses.replace(params, ...)`` and return the copy."""

ChatMessage = TaskMessage
"""One message of :data:`ChatTaskParams` ``.messages`` (role, content, ...)."""

CLIENT_DISCONNECTED: Final = "client_disconnected"
"""``ChatResponseSummary.error_code`` when the client went away mid-response."""


@dataclass(frozen=True, slots=True)
class ChatResponseSummary:
    """What an observer learns about a finished response; immutable.

    ``text`` is the answer as the client received it and ``thinking`` the reasoning
    text; ``finish_reason`` is ``"stop"``, ``"length"`` or ``"tool_calls"``, or ``None``
    when the turn ended in an error (``error`` is then true and ``error_code`` says
    which, e.g. ``"cancelled"`` or ``"client_disconnected"``).
    """

    text: str
    thinking: str
    finish_reason: str | None
    error: bool
    error_code: str | None = None
    model: str = ""
    command_id: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tool_calls: tuple[ToolCall, ...] = ()


class BaseChatMiddleware:
    """A no-op middleware: subclass it and override only the hook you need.

    Both hooks are async and run on the API node's event loop. A transform runs
    inline before dispatch, so it delays the request it transforms: keep it fast.
    An observer runs as a background task after the response; it cannot touch it.
    """

    async def transform_chat_request(
        self, context: ExtensionContext, task_params: ChatTaskParams
    ) -> ChatTaskParams:
        """Return the (possibly modified) params; returning them unchanged is a no-op."""
        return task_params

    async def observe_chat_response(
        self,
        context: ExtensionContext,
        task_params: ChatTaskParams,
        summary: ChatResponseSummary,
    ) -> None:
        """Learn from a finished response; the return value is ignored."""


@dataclass(frozen=True, slots=True)
class NamedMiddleware:
    """One loaded extension's middleware, with the extension's name for the logs."""

    extension: str
    middleware: BaseChatMiddleware


def answerable(before: ChatTaskParams, after: ChatTaskParams) -> str | None:
    """Why a transform's result cannot replace ``before``, or ``None`` if it can.

    The model answers the trailing turn: a request that ended in a user message must
    still end in one (a tool result or assistant prefill must keep its role).
    """
    if not after.messages:
        return "it has no messages"
    if not before.messages:
        return None
    wanted = before.messages[-1].role
    if after.messages[-1].role != wanted:
        return f"its last message is {after.messages[-1].role!r}, not a trailing {wanted!r} turn"
    return None


@dataclass(slots=True)
class _Accumulator:
    """The turn as the client sees it, gathered from its events."""

    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    end: TurnEnd | None = None
    error: TurnError | None = None

    def feed(self, event: TurnEvent) -> None:
        match event:
            case ContentDelta():
                self.text.append(event.text)
            case ReasoningDelta():
                self.thinking.append(event.text)
            case TurnEnd():
                self.end = event
            case TurnError():
                self.error = event
            case _:
                pass

    def summary(self, task: ChatTaskParams, command_id: str) -> ChatResponseSummary:
        end = self.end
        if end is None:
            code = self.error.code if self.error is not None else CLIENT_DISCONNECTED
        return ChatResponseSummary(
            text="".join(self.text),
            thinking="".join(self.thinking),
            finish_reason=end.finish_reason if end is not None else None,
            error=end is None,
            error_code=None if end is not None else code,
            model=task.model,
            command_id=command_id,
            prompt_tokens=end.prompt_tokens if end is not None else None,
            completion_tokens=end.completion_tokens if end is not None else None,
            tool_calls=end.tool_calls if end is not None else (),
        )


async def _close(iterator: AsyncIterator[object]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


class ObservedTurn:
    """Taps one turn's events and schedules the observers once its response is sent.

    ``events`` passes every event through unchanged; ``respond`` wraps the wire body
    and, when it has been sent whole (or the client went away), hands the summary to
    the observers. Both are identity wrappers when no middleware is loaded.
    """

    def __init__(
        self,
        runner: ChatMiddlewareRunner,
        task: ChatTaskParams,
        command_id: str,
        events: AsyncIterator[TurnEvent],
    ) -> None:
        self._runner = runner
        self._task = task
        self._command_id = command_id
        self._seen = _Accumulator()
        self.events: AsyncIterator[TurnEvent] = self._tap(events) if runner.active else events

    async def _tap(self, events: AsyncIterator[TurnEvent]) -> AsyncIterator[TurnEvent]:
        try:
            async for event in events:
                self._seen.feed(event)
                yield event
        finally:
            # NOTE: closing this tap closes the generation under it at once (freeing
            # the runner), exactly as closing the untapped events would.
            await _close(events)

    def respond(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """``body`` unchanged; observers are scheduled after its last byte."""
        return self._respond(body) if self._runner.active else body

    async def _respond(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        try:
            async for chunk in body:
                yield chunk
        finally:
            # NOTE: a `finally`, so a client that disconnects (the generator is closed)
            # is observed too; scheduling never awaits, so it is safe while closing.
            self._runner.observe(self._task, self._seen.summary(self._task, self._command_id))
            await _close(body)


class ChatMiddlewareRunner:
    """Runs the loaded middleware on the chat path, guarding every hook."""

    def __init__(
        self,
        middleware: Sequence[NamedMiddleware] = (),
        context: ExtensionContext | None = None,
    ) -> None:
        self._middleware = tuple(middleware)
        self._context = context
        self._observers: set[asyncio.Task[None]] = set()

    @property
    def active(self) -> bool:
        """Whether any middleware is loaded (otherwise the chat path is untouched)."""
        return bool(self._middleware) and self._context is not None

    async def transform(self, task: ChatTaskParams) -> ChatTaskParams:
        """The params after every middleware's transform, each guarded."""
        if not self.active:
            return task
        assert self._context is not None
        current = task
        for entry in self._middleware:
            try:
                # NOTE: a private copy, so a hook that edits a nested dict in place and
                # then raises (or is discarded) leaves the request it was given intact.
                given = copy.deepcopy(current)
                result = await entry.middleware.transform_chat_request(self._context, given)
            except Exception:
                log.exception(
                    "extension %s: transform_chat_request raised; skipped", entry.extension
                )
                continue
            if not isinstance(result, ChatTask):
                log.error(
                    "extension %s: transform_chat_request returned %s, not ChatTaskParams; "
                    "discarded",
                    entry.extension,
                    type(result).__name__,
                )
                continue
            reason = answerable(current, result)
            if reason is not None:
                log.error(
                    "extension %s: transform_chat_request result discarded: %s",
                    entry.extension,
                    reason,
                )
                continue
            current = result
        return current

    def observe_turn(
        self, task: ChatTaskParams, command_id: str, events: AsyncIterator[TurnEvent]
    ) -> ObservedTurn:
        """Wrap one turn so its observers run once the response has been sent."""
        return ObservedTurn(self, task, command_id, events)

    def observe(self, task: ChatTaskParams, summary: ChatResponseSummary) -> None:
        """Run every observer in its own background task; never raises, never waits.

        One task per observer, so an observer that hangs holds up no other.
        """
        if not self.active:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (closing): there is nobody left to observe
            return
        for entry in self._middleware:
            spawned = loop.create_task(self._observe_one(entry, copy.deepcopy(task), summary))
            # NOTE: the set keeps a strong reference: the loop holds tasks only weakly.
            self._observers.add(spawned)
            spawned.add_done_callback(self._observers.discard)

    async def _observe_one(
        self, entry: NamedMiddleware, task: ChatTaskParams, summary: ChatResponseSummary
    ) -> None:
        assert self._context is not None
        try:
            await entry.middleware.observe_chat_response(self._context, task, summary)
        except Exception:
            log.exception("extension %s: observe_chat_response raised; skipped", entry.extension)

    async def drain(self, grace: float) -> None:
        """Give observers in flight ``grace`` seconds to finish, then cancel them."""
        pending = set(self._observers)
        if not pending:
            return
        _, late = await asyncio.wait(pending, timeout=grace)
        for spawned in late:
            spawned.cancel()
        if late:
            await asyncio.wait(late)
