"""The provider side of one admitted stream: the frame lifecycle Skulk guarantees.

Skulk emits ``started`` (sequence 0), then forwards the handler's frames while
checking each (this call, provider direction, the next sequence, a chunk payload
matching ``output_chunk_schema``, a completed payload matching ``output_schema``,
inline media at most 1 MiB). The handler's terminal is *withheld*: Skulk keeps
advancing the iterator to exhaustion, so the handler's ``finally`` cleanup has run
before any caller sees the end. Output that is malformed, or that continues after
the terminal, closes the iterator and then ends the stream with a synthetic
``failed`` terminal. A raising handler fails only its own stream. Cancellation (the
caller, or input that breaks the rules) and the call's deadline stop the handler,
wait for its cleanup, then emit ``cancelled`` or ``failed``. Exactly one terminal is
emitted, always last.

For client-streaming and bidirectional calls the handler reads the caller's ordered
lifecycle (``started``, chunks, ``completed``) from a bounded queue; each caller
frame is checked against ``input_chunk_schema`` first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

from skulk_core.extensions.capabilities import (
    CapabilityCall,
    CapabilityError,
    CapabilityErrorCode,
    CapabilityStreamFrame,
    FrameKind,
)
from skulk_core.extensions.ordering import FrameOrder, SequenceGap
from skulk_daemon.capabilities.frames import (
    frame,
    input_problem,
    output_problem,
    renumber,
    settle_terminal,
)
from skulk_daemon.capabilities.guards import describe_exception
from skulk_daemon.capabilities.registry import Registration

log = logging.getLogger(__name__)

MAX_INPUT_FRAMES: Final = 64
"""Caller frames queued for one provider; more arriving at once is ``overloaded``."""

Emit = Callable[[CapabilityStreamFrame], Awaitable[bool]]
"""Deliver one provider frame to the caller; ``False`` when nobody will receive it."""


async def close_iterator(source: object) -> None:
    """Close a closable iterator (running its ``finally``); a raise is only logged."""
    aclose = getattr(source, "aclose", None)
    if callable(aclose):
        try:
            await aclose()
        except Exception:
            log.warning("closing a capability handler's iterator raised", exc_info=True)


class ProviderStream:
    def __init__(
        self,
        registration: Registration,
        call: CapabilityCall,
        *,
        emit: Emit,
        deadline: float,
        on_done: Callable[[], None],
    ) -> None:
        self.registration = registration
        self.call = call
        self._emit = emit
        self._deadline = deadline
        self._on_done = on_done
        self._input: asyncio.Queue[CapabilityStreamFrame] = asyncio.Queue(MAX_INPUT_FRAMES)
        self._input_order: FrameOrder[CapabilityStreamFrame] = FrameOrder(start=1)
        self._input_done = False
        self._stop = asyncio.Event()
        self._stop_kind: FrameKind = "cancelled"
        self._stop_error: CapabilityError | None = None
        self._emitted = 0
        self.finished = False
        self._task: asyncio.Task[None] | None = None

    @property
    def takes_input(self) -> bool:
        return self.registration.descriptor.io_mode in ("client_streaming", "bidirectional")

    async def start(self) -> None:
        """Emit ``started`` (so a caller holding the admission already has it), then
        run the handler in its own task."""
        started = frame(self.call.call_id, "provider_to_caller", 0, "started")
        try:
            delivered = await self._emit(started)
        except asyncio.CancelledError:
            self.finished = True
            self._on_done()
            raise
        except Exception:
            log.exception("capability stream %s could not start", self.call.qualified_id)
            delivered = False
        if not delivered:
            self._end("cancelled", "cancelled", "the caller stopped receiving")
        self._task = asyncio.create_task(self._run(), name=f"capability-{self.call.call_id}")

    async def wait(self) -> None:
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # -- ending ------------------------------------------------------------------------

    def cancel(self, message: str | None = None) -> bool:
        """End the call with a ``cancelled`` terminal; ``False`` if it already ended."""
        if self.finished or self._stop.is_set():
            return False
        self._end("cancelled", "cancelled", message or "the caller cancelled the call")
        return True

    def _end(self, kind: FrameKind, code: CapabilityErrorCode, message: str) -> None:
        if not self._stop.is_set():
            self._stop_kind = kind
            self._stop_error = CapabilityError(code=code, message=message)
            self._stop.set()

    # -- caller input ------------------------------------------------------------------

    def offer_input(self, item: CapabilityStreamFrame) -> None:
        """A caller frame from the fabric (any order within the window; never blocks)."""
        if self.finished or self._stop.is_set():
            return
        try:
            released = self._input_order.accept(item.sequence, item)
        except SequenceGap as exc:
            self._end("failed", "invalid_payload", f"caller frames were lost: {exc}")
            return
        for ready in released:
            if not self._admit_input(ready):
                return
            try:
                self._input.put_nowait(ready)
            except asyncio.QueueFull:
                self._end("failed", "overloaded", "the provider fell behind the caller's input")
                return

    async def put_input(self, item: CapabilityStreamFrame) -> bool:
        """A caller frame from this node: waits for room (backpressure) in order."""
        if self.finished or self._stop.is_set():
            return False
        if item.sequence != self._input_order.expected:
            self._end("failed", "invalid_payload", "caller frames out of order")
            return False
        self._input_order.accept(item.sequence, item)
        if not self._admit_input(item):
            return False
        await self._input.put(item)
        return not self.finished

    def _admit_input(self, item: CapabilityStreamFrame) -> bool:
        problem = input_problem(
            self.registration, self.call.call_id, item, input_done=self._input_done
        )
        if problem is not None:
            self._end("failed", problem.code, problem.message)
            return False
        if item.kind == "cancelled":
            self.cancel(item.error.message if item.error is not None else None)
            return False
        if item.kind == "completed":
            self._input_done = True
        return True

    async def _input_frames(self) -> AsyncIterator[CapabilityStreamFrame]:
        yield frame(self.call.call_id, "caller_to_provider", 0, "started")
        while True:
            item = await self._input.get()
            yield item
            if item.kind == "completed":
                return

    # -- the lifecycle -----------------------------------------------------------------

    async def _run(self) -> None:
        call_id = self.call.call_id
        pump: asyncio.Task[CapabilityStreamFrame] | None = None
        try:
            pump = asyncio.create_task(self._pump())
            stopped = asyncio.create_task(self._stop.wait())
            remaining = max(0.0, self._deadline - asyncio.get_running_loop().time())
            done, _ = await asyncio.wait(
                {pump, stopped}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            stopped.cancel()
            if pump in done and not self._stop.is_set():
                terminal = pump.result()
            else:
                self._end(
                    "failed",
                    "timeout",
                    f"{self.call.qualified_id} ran past its "
                    f"{self.call.timeout_seconds:g} s deadline",
                )
                # NOTE: the handler's cleanup finishes before the terminal goes out, so
                # nothing the caller does next can race resources the provider holds.
                await _stop_task(pump)
                terminal = frame(
                    call_id, "provider_to_caller", 0, self._stop_kind, self._stop_error
                )
            terminal = renumber(terminal, self._emitted + 1)
            await self._emit(terminal)
        except asyncio.CancelledError:
            # The node is shutting down: stop the handler, then tell the caller.
            if pump is not None:
                await _stop_task(pump)
            with contextlib.suppress(Exception):
                error = CapabilityError(code="cancelled", message="the provider node is stopping")
                end = frame(call_id, "provider_to_caller", self._emitted + 1, "cancelled", error)
                await asyncio.wait_for(self._emit(end), 1.0)
            raise
        except Exception:
            log.exception("capability stream %s failed", self.call.qualified_id)
        finally:
            self.finished = True
            self._drain_input()
            self._on_done()

    def _drain_input(self) -> None:
        # Frees a local caller blocked on a full queue; its frame goes nowhere.
        while not self._input.empty():
            self._input.get_nowait()

    async def _pump(self) -> CapabilityStreamFrame:
        """Drive the handler; the terminal to publish (the handler's, or synthetic)."""
        handler = self.registration.handler()
        context = self.registration.context
        try:
            if self.takes_input:
                source = handler(context, self.call, self._input_frames())
            else:
                source = handler(context, self.call)
        except Exception as exc:
            return self._failed("provider_error", describe_exception(exc))
        next_item = getattr(source, "__anext__", None)
        if not callable(next_item):
            await close_iterator(source)
            return self._failed("provider_error", "the handler must return an async iterator")
        withheld: CapabilityStreamFrame | None = None
        try:
            while True:
                try:
                    item = await next_item()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    log.warning("capability stream %s raised", self.call.qualified_id, exc_info=exc)
                    return self._failed("provider_error", describe_exception(exc))
                if withheld is not None:
                    problem: CapabilityError | None = CapabilityError(
                        code="provider_error",
                        message="the handler yielded after its terminal frame",
                    )
                else:
                    problem = output_problem(
                        self.registration, self.call.call_id, item, expected=self._emitted + 1
                    )
                if problem is not None:
                    await close_iterator(source)
                    return self._failed(problem.code, problem.message)
                assert isinstance(item, CapabilityStreamFrame)
                if item.terminal:
                    # NOTE: withheld until the iterator is exhausted (its cleanup ran).
                    withheld = item
                    continue
                if not await self._emit(item):
                    await close_iterator(source)
                    return frame(
                        self.call.call_id,
                        "provider_to_caller",
                        0,
                        "cancelled",
                        CapabilityError(code="cancelled", message="the caller stopped receiving"),
                    )
                self._emitted = item.sequence
        except asyncio.CancelledError:
            await close_iterator(source)
            raise
        if withheld is None:
            return self._failed("provider_error", "the handler ended without a terminal frame")
        return settle_terminal(withheld)

    def _failed(self, code: CapabilityErrorCode, message: str) -> CapabilityStreamFrame:
        error = CapabilityError(code=code, message=message)
        return frame(self.call.call_id, "provider_to_caller", 0, "failed", error)


async def _stop_task(task: asyncio.Task[CapabilityStreamFrame]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
