"""Which of a runner's tasks each message it writes belongs to.

A generation reads its chunks from a bounded :class:`TaskStream`; a task answered by
one message (an embedding, a speech task) awaits a future; a streamed speech task's
parts go to its sink. A task nobody listens to any more is *abandoned*: cancelled on
the runner, its messages dropped up to its terminal one. When the runner ends, every
open task is answered with a ``runner_failed`` error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from skulk_core.chat.generation import ErrorChunk, FinishChunk, TokenChunk
from skulk_core.ids import TaskId
from skulk_daemon.runner.inbound import RunnerGeneration, TaskStream
from skulk_daemon.runner.protocol import (
    Embedded,
    ImagePreview,
    ImagesRendered,
    MediaProgress,
    MediaRendered,
    SpeechPartial,
    Synthesized,
    TaskMessage,
    Transcribed,
)

ERROR_RUNNER_FAILED: Final = "runner_failed"
ERROR_CONSUMER_TOO_SLOW: Final = "consumer_too_slow"

Answer = Embedded | Synthesized | Transcribed | MediaRendered | ImagesRendered | ErrorChunk
"""What answers a task that gets one message back (an embedding, a speech task, a
media job or an image render)."""
PartSink = Callable[[SpeechPartial], None] | None
"""Where a streamed speech task's parts go, in order (``None``: not streamed)."""
ProgressSink = Callable[[MediaProgress], None] | None
"""Where a media job's progress reports go."""
PreviewSink = Callable[[ImagePreview], None] | None
"""Where a render's previews go, in order (``None``: none asked for)."""


def runner_failed(task_id: TaskId, message: str) -> ErrorChunk:
    return ErrorChunk(task_id=task_id, code=ERROR_RUNNER_FAILED, message=message)


class TaskRouter:
    """The open tasks of one runner; ``cancel`` asks the runner to stop one, ``alive``
    says whether the runner still runs."""

    def __init__(
        self, queue_chunks: int, cancel: Callable[[TaskId], None], alive: Callable[[], bool]
    ) -> None:
        self._queue_chunks = queue_chunks
        self._cancel = cancel
        self._alive = alive
        self._streams: dict[TaskId, TaskStream] = {}
        # Tasks answered by one message (embeddings, speech), awaiting their answer.
        self._answers: dict[TaskId, asyncio.Future[Answer]] = {}
        self._partials: dict[TaskId, Callable[[SpeechPartial], None]] = {}
        self._progress: dict[TaskId, Callable[[MediaProgress], None]] = {}
        self._previews: dict[TaskId, Callable[[ImagePreview], None]] = {}
        # Tasks we stopped listening to; their messages are dropped until the
        # runner's terminal message for them arrives (see deliver).
        self._abandoned: set[TaskId] = set()

    # -- opening and closing ----------------------------------------------------------

    def generating(self, task_id: TaskId) -> bool:
        return task_id in self._streams

    def running(self, task_id: TaskId) -> bool:
        return task_id in self._streams or task_id in self._answers

    def open_stream(self, task_id: TaskId, keepalive_s: float | None = None) -> TaskStream:
        stream = TaskStream(self._queue_chunks, keepalive_s)
        self._streams[task_id] = stream
        return stream

    def open_generation(self, task_id: TaskId, keepalive_s: float | None) -> RunnerGeneration:
        """A generation's stream, closed (and the task abandoned unless it finished)
        when its reader closes it."""
        stream = self.open_stream(task_id, keepalive_s)
        return RunnerGeneration(
            stream, lambda finished: self.close_stream(task_id, stream, finished=finished)
        )

    def fail(self, task_id: TaskId, message: str) -> None:
        """End ``task_id``'s open stream with ``runner_failed`` (its runner has ended)."""
        stream = self._streams.get(task_id)
        if stream is not None:
            stream.close(runner_failed(task_id, message))

    def close_stream(self, task_id: TaskId, stream: TaskStream, *, finished: bool) -> None:
        stream.release()
        if self._streams.get(task_id) is stream:
            del self._streams[task_id]
        if not finished:
            self.abandon(task_id)

    def open_answer(self, task_id: TaskId) -> asyncio.Future[Answer]:
        answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._answers[task_id] = answer
        return answer

    def close_answer(self, task_id: TaskId, answer: asyncio.Future[Answer]) -> None:
        if self._answers.get(task_id) is answer:
            del self._answers[task_id]
        # NOTE: cancelling the caller also cancels ``answer`` (the future it was
        # awaiting), so a cancelled future, like an unresolved one, means the
        # runner has not answered and must be told to stop.
        if answer.cancelled() or not answer.done():
            answer.cancel()
            self.abandon(task_id)

    def listen(self, task_id: TaskId, parts: PartSink) -> None:
        """Send ``task_id``'s parts to ``parts`` (None: stop)."""
        if parts is None:
            self._partials.pop(task_id, None)
        else:
            self._partials[task_id] = parts

    def listen_progress(self, task_id: TaskId, progress: ProgressSink) -> None:
        """Send a media job's progress to ``progress`` (None: stop)."""
        if progress is None:
            self._progress.pop(task_id, None)
        else:
            self._progress[task_id] = progress

    def preview(self, task_id: TaskId, previews: PreviewSink) -> None:
        """Send ``task_id``'s image previews to ``previews`` (None: stop)."""
        if previews is None:
            self._previews.pop(task_id, None)
        else:
            self._previews[task_id] = previews

    def abandon(self, task_id: TaskId) -> None:
        """Cancel a task nobody reads any more.

        NOTE: the runner answers every submission with exactly one terminal
        message, and handles Cancel before any later task, so dropping this
        task's messages up to that terminal can never swallow a reused id's output.
        """
        if self._alive():
            self._abandoned.add(task_id)
            self._cancel(task_id)

    # -- delivering ------------------------------------------------------------------

    def deliver(self, message: TaskMessage) -> None:
        # NOTE: a token is most of what a runner sends (one a token, every stream):
        # it skips the dozen class tests below that other messages need.
        if type(message) is TokenChunk and message.task_id not in self._abandoned:
            self._token(message)
            return
        match message:
            case (
                TokenChunk(task_id=task_id)
                | SpeechPartial(task_id=task_id)
                | MediaProgress(task_id=task_id)
                | ImagePreview(task_id=task_id)
            ) if task_id in self._abandoned:
                pass
            case MediaProgress(task_id=task_id):
                report = self._progress.get(task_id)
                if report is not None:
                    report(message)
            case SpeechPartial(task_id=task_id):
                deliver = self._partials.get(task_id)
                if deliver is not None:
                    deliver(message)
            case ImagePreview(task_id=task_id):
                show = self._previews.get(task_id)
                if show is not None:
                    show(message)
            case (
                FinishChunk(task_id=task_id)
                | ErrorChunk(task_id=task_id)
                | Embedded(task_id=task_id)
                | Synthesized(task_id=task_id)
                | Transcribed(task_id=task_id)
                | MediaRendered(task_id=task_id)
                | ImagesRendered(task_id=task_id)
            ) if task_id in self._abandoned:
                self._abandoned.discard(task_id)
            case (
                Embedded(task_id=task_id)
                | Synthesized(task_id=task_id)
                | Transcribed(task_id=task_id)
                | MediaRendered(task_id=task_id)
                | ImagesRendered(task_id=task_id)
            ):
                self._answer(task_id, message)
            case TokenChunk():
                self._token(message)
            case FinishChunk(task_id=task_id) | ErrorChunk(task_id=task_id):
                stream = self._streams.get(task_id)
                if stream is not None:
                    stream.close(message)
                elif isinstance(message, ErrorChunk):
                    self._answer(task_id, message)

    def _token(self, chunk: TokenChunk) -> None:
        task_id = chunk.task_id
        stream = self._streams.get(task_id)
        if stream is not None and not stream.push(chunk):
            stream.close(
                ErrorChunk(
                    task_id=task_id,
                    code=ERROR_CONSUMER_TOO_SLOW,
                    message=f"the reader fell {self._queue_chunks} chunks behind "
                    "the runner; the generation was cancelled",
                )
            )
            self.abandon(task_id)

    def _answer(self, task_id: TaskId, message: Answer) -> None:
        answer = self._answers.get(task_id)
        if answer is not None and not answer.done():
            answer.set_result(message)

    def fail_all(self, message: str) -> None:
        """The runner ended: every open task gets ``runner_failed`` with ``message``."""
        for task_id, stream in list(self._streams.items()):
            stream.close(runner_failed(task_id, message))
        for task_id in list(self._answers):
            self._answer(task_id, runner_failed(task_id, message))
