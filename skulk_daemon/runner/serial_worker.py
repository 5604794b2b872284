"""One thread serving a runner's tasks in order, each answered exactly once: the shape
the image and media runner modes share (a render takes the engine whole)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import BinaryIO, Generic, Protocol, TypeVar

from skulk_core.chat.generation import ERROR_INVALID_REQUEST, ErrorChunk
from skulk_core.ids import TaskId
from skulk_daemon.runner.protocol import (
    MediaTask,
    Phase,
    RenderImages,
    RunnerMessage,
    serve_frames,
)


class _Task(Protocol):
    @property
    def task_id(self) -> TaskId: ...


T = TypeVar("T", bound=_Task)


class SerialWorker(Generic[T]):
    """Tasks queue in arrival order; a cancel marks its task, and :meth:`_answer` (the
    mode's own) checks :meth:`_is_cancelled` between steps."""

    def __init__(self, send: Callable[[RunnerMessage], None], name: str) -> None:
        self._send = send
        self._queue: queue.Queue[T | None] = queue.Queue()
        self._cancelled: set[TaskId] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def serve(
        self,
        stdin: BinaryIO,
        does: str,
        *,
        media: Callable[[MediaTask], None] | None = None,
        images: Callable[[RenderImages], None] | None = None,
    ) -> int:
        """Serve the parent's frames until it says shutdown, this worker taking the
        runner's one kind of task (``media`` or ``images``: its :meth:`submit`); a text,
        embedding or speech request is refused saying what the runner ``does``. Then
        the worker stops; the runner's exit code."""

        def refuse(task_id: TaskId) -> None:
            self._send(ErrorChunk(task_id=task_id, code=ERROR_INVALID_REQUEST, message=does))

        serve_frames(
            stdin,
            generate=lambda request: refuse(request.task_id),
            embed=lambda task_id, _: refuse(task_id),
            cancel=self.cancel,
            speech=lambda task: refuse(task.task_id),
            media=media,
            images=images,
        )
        self._send(Phase(phase="shutting_down"))
        self.stop()
        self._send(Phase(phase="shutdown"))
        return 0

    def submit(self, task: T) -> None:
        self._queue.put(task)

    def cancel(self, task_id: TaskId) -> None:
        with self._lock:
            self._cancelled.add(task_id)

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _is_cancelled(self, task_id: TaskId) -> bool:
        with self._lock:
            return task_id in self._cancelled

    def _loop(self) -> None:
        while (task := self._queue.get()) is not None:
            self._send(self._answer(task))
            with self._lock:
                self._cancelled.discard(task.task_id)
            self._finished(task)

    def _answer(self, task: T) -> RunnerMessage:
        raise NotImplementedError

    def _finished(self, task: T) -> None:
        """After ``task`` was answered (a mode with per-task state drops it here)."""
