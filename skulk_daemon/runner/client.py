"""The daemon's handle on one runner subprocess.

:meth:`RunnerProcess.start` spawns ``python -m skulk_daemon.runner``, sends
:class:`~skulk_daemon.runner.protocol.Load` and returns once the runner is
``ready`` (reporting each phase on the way). After that, one reader task routes
every frame to the generation (or embedding task) it belongs to. When the
process dies, for any reason, every open :meth:`~RunnerProcess.generate` and
:meth:`~RunnerProcess.embed` receives a ``runner_failed`` error at once and
``on_exit`` fires: nothing waits on a dead runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Final, TypeVar

from skulk_core.chat.generation import (
    EngineChunk,
    ErrorChunk,
    FinishChunk,
    GenerationRequest,
    TokenChunk,
)
from skulk_core.ids import TaskId
from skulk_daemon.runner.inbound import RunnerGeneration, StdoutReader
from skulk_daemon.runner.protocol import (
    Cancel,
    Embed,
    Embedded,
    Failed,
    Generate,
    ImagePreview,
    ImagesRendered,
    Load,
    MediaProgress,
    MediaRendered,
    MediaTask,
    ParentMessage,
    Phase,
    ProtocolError,
    RealtimeAudio,
    RenderImages,
    RunnerMessage,
    RunnerPhase,
    RunnerSpeechTask,
    Shutdown,
    SpeechPartial,
    Synthesized,
    Transcribed,
    encode_frame,
)
from skulk_daemon.runner.routing import (
    ERROR_CONSUMER_TOO_SLOW,
    ERROR_RUNNER_FAILED,
    Answer,
    PartSink,
    PreviewSink,
    ProgressSink,
    TaskRouter,
    runner_failed,
)
from skulk_daemon.runner.spawn import (
    RunnerExit,
    RunnerFailed,
    exit_message,
    runner_reaped,
    runner_started,
    spawn_runner,
    spawned_runner_pids,
)

__all__ = [
    "ERROR_CONSUMER_TOO_SLOW",
    "ERROR_RUNNER_FAILED",
    "Answer",
    "PartSink",
    "PreviewSink",
    "RunnerExit",
    "RunnerFailed",
    "RunnerGeneration",
    "RunnerProcess",
    "exit_message",
    "spawned_runner_pids",
]

log = logging.getLogger(__name__)

FLIGHT_RECORDER_LENGTH: Final = 64
"""Phase transitions and lifecycle events kept per runner for post-mortems."""
TASK_QUEUE_CHUNKS: Final = 4096
"""Chunks buffered per generation for a consumer that reads slower than the
runner writes; past this the generation is cancelled rather than letting one
slow reader stall every other generation on the runner."""
STDERR_TAIL_LINES: Final = 20
"""Runner stderr lines kept to explain an unexpected exit."""
DEFAULT_SHUTDOWN_GRACE_S: Final = 10.0
FAILED_EXIT_GRACE_S: Final = 5.0
"""How long a runner that reported ``Failed`` gets to exit before SIGKILL."""


async def _set_within(event: asyncio.Event, grace_s: float) -> bool:
    """Whether ``event`` is set within ``grace_s`` seconds (a runner's exit)."""
    try:
        await asyncio.wait_for(event.wait(), grace_s)
    except TimeoutError:
        return False
    return True


_Sink = TypeVar("_Sink")
"""What a task's parts go to (speech parts, media progress, image previews)."""


class RunnerProcess:
    """A started runner. Build it with :meth:`start`; end it with :meth:`shutdown`."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        stdout: int,
        on_phase: Callable[[RunnerPhase], None],
        on_exit: Callable[[RunnerExit], None] | None,
        queue_chunks: int,
    ) -> None:
        self._process = process
        self._on_phase = on_phase
        self._on_exit = on_exit
        self._tasks = TaskRouter(queue_chunks, self.cancel, lambda: self._exit is None)
        self._flight: deque[tuple[float, str]] = deque(maxlen=FLIGHT_RECORDER_LENGTH)
        self._stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._failure: str | None = None
        self._failure_code = ""
        self._shutdown_requested = False
        self._started = False
        self._exit: RunnerExit | None = None
        self._exited = asyncio.Event()
        self._record(f"spawned pid {process.pid}")
        self._stderr_task = asyncio.create_task(self._pump_stderr())
        self._reader_task = asyncio.create_task(self._read(stdout))

    @classmethod
    async def start(
        cls,
        load: Load,
        on_phase: Callable[[RunnerPhase], None],
        *,
        on_exit: Callable[[RunnerExit], None] | None = None,
        env: Mapping[str, str] | None = None,
        queue_chunks: int = TASK_QUEUE_CHUNKS,
    ) -> RunnerProcess:
        """Spawn a runner, load ``load.model_path`` and wait until it is ready.

        ``on_phase`` sees every phase (``loading`` … ``ready``, later
        ``shutting_down``, ``shutdown``). ``on_exit`` fires once if the runner
        ends after ``start`` returned, with a message an operator can act on.
        Raises :class:`RunnerFailed` if the runner reports ``Failed`` or dies
        first; cancelling ``start`` kills the runner.
        """
        process, stdout = await spawn_runner(env)
        runner_started(process.pid)
        runner = cls(process, stdout, on_phase, on_exit, queue_chunks)
        try:
            runner._send(load)
            await runner._ready
        except BaseException:
            runner._ready.cancel()  # nobody will await it now
            await runner._kill()
            raise
        runner._started = True
        return runner

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once the runner has ended (negative: killed by that signal)."""
        return self._exit.returncode if self._exit is not None else None

    @property
    def exit(self) -> RunnerExit | None:
        return self._exit

    async def wait(self) -> RunnerExit:
        """Wait for the runner to end, however it ends."""
        await self._exited.wait()
        assert self._exit is not None
        return self._exit

    def flight_record(self) -> list[tuple[float, str]]:
        """The last :data:`FLIGHT_RECORDER_LENGTH` events as (monotonic time, what)."""
        return list(self._flight)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[EngineChunk]:
        """:meth:`open_generation` as an iterator of its chunks (the last a
        :class:`FinishChunk` or :class:`ErrorChunk`). Leaving early cancels the
        generation on the runner: iterate inside ``contextlib.aclosing`` so that
        happens promptly."""
        generation = await self.open_generation(request)
        try:
            while not generation.finished:
                for chunk in await generation.take() or ():
                    yield chunk
        finally:
            generation.close()

    async def open_generation(
        self, request: GenerationRequest, keepalive_s: float | None = None
    ) -> RunnerGeneration:
        """Start one generation, read a take at a time (see :class:`RunnerGeneration`;
        ``None`` after ``keepalive_s`` without a chunk). Closed before its last chunk,
        it is cancelled. A runner that has ended answers with ``runner_failed``."""
        task_id = request.task_id
        if self._tasks.generating(task_id):
            raise ValueError(f"task {task_id} is already generating on this runner")
        generation = self._tasks.open_generation(task_id, keepalive_s)
        if self._exit is not None:
            self._tasks.fail(task_id, self._exit.message)
            return generation
        try:
            self._send(Generate(request=request))
            with contextlib.suppress(ConnectionError):
                await self._drain()
        except BaseException:
            generation.close()
            raise
        return generation

    async def embed(self, task_id: TaskId, inputs: Sequence[str]) -> Embedded | ErrorChunk:
        """Embed ``inputs`` on a runner loaded in ``"embed"`` mode.

        The answer is the vectors or the error the runner (or its death) gave.
        Cancelling the caller cancels the task on the runner.
        """
        answer = await self._ask(task_id, Embed(task_id=task_id, inputs=tuple(inputs)))
        assert isinstance(answer, Embedded | ErrorChunk), "the runner answered out of kind"
        return answer

    async def speech(
        self, task: RunnerSpeechTask, on_partial: PartSink = None
    ) -> Synthesized | Transcribed | ErrorChunk:
        """Run one speech task on a runner loaded in ``"speak"``/``"transcribe"`` mode;
        a streamed task's parts go to ``on_partial`` (in order) before the answer.
        Cancelling the caller cancels the task on the runner."""
        answer = await self._ask_with(task, self._tasks.listen, on_partial)
        assert isinstance(answer, Synthesized | Transcribed | ErrorChunk), "answered out of kind"
        return answer

    async def media(
        self, task: MediaTask, on_progress: ProgressSink = None
    ) -> MediaRendered | ErrorChunk:
        """Run one media job on a runner loaded in ``"render"`` mode; its progress goes
        to ``on_progress``. Cancelling the caller cancels the task on the runner."""
        answer = await self._ask_with(task, self._tasks.listen_progress, on_progress)
        assert isinstance(answer, MediaRendered | ErrorChunk), "the runner answered out of kind"
        return answer

    async def render(
        self, task: RenderImages, on_preview: PreviewSink = None
    ) -> ImagesRendered | ErrorChunk:
        """Render images on a runner loaded in ``"image"`` mode; previews go to
        ``on_preview`` (in order) before the answer. Cancelling the caller cancels the
        task on the runner."""
        answer = await self._ask_with(task, self._tasks.preview, on_preview)
        assert isinstance(answer, ImagesRendered | ErrorChunk), "the runner answered out of kind"
        return answer

    async def _ask_with(
        self,
        task: RunnerSpeechTask | MediaTask | RenderImages,
        listen: Callable[[TaskId, _Sink | None], None],
        sink: _Sink | None,
    ) -> Answer:
        """:meth:`_ask`, with the task's parts sent to ``sink`` while it runs."""
        listen(task.task_id, sink)
        try:
            return await self._ask(task.task_id, task)
        finally:
            listen(task.task_id, None)

    async def _ask(
        self, task_id: TaskId, message: Embed | RunnerSpeechTask | MediaTask | RenderImages
    ) -> Answer:
        """Send a task answered by one message and wait for that answer."""
        if self._tasks.running(task_id):
            raise ValueError(f"task {task_id} is already running on this runner")
        if self._exit is not None:
            return runner_failed(task_id, self._exit.message)
        answer = self._tasks.open_answer(task_id)
        try:
            self._send(message)
            with contextlib.suppress(ConnectionError):
                await self._drain()
            return await answer
        finally:
            self._tasks.close_answer(task_id, answer)

    async def send_audio(self, packet: RealtimeAudio) -> bool:
        """One packet of a running ``TranscribeRealtime`` task's audio, with flow
        control (waits while the runner's stdin is backed up); ``False`` once the runner
        has gone."""
        if self._exit is not None:
            return False
        self._send(packet)
        with contextlib.suppress(ConnectionError):
            await self._drain()
        return self._exit is None

    def cancel(self, task_id: TaskId) -> None:
        """Ask the runner to stop a task; a generation's stream ends with
        ``"cancelled"``, an embedding with a ``"cancelled"`` error."""
        self._send(Cancel(task_id=task_id))

    async def shutdown(self, grace_s: float = DEFAULT_SHUTDOWN_GRACE_S) -> int:
        """Stop the runner: ``Shutdown``, then SIGTERM, then SIGKILL, each step
        given ``grace_s`` seconds. Returns the exit status.

        (A grace per escalation step rather than an overall deadline, so it is
        not spelled ``timeout``.)"""
        if self._exit is None:
            self._shutdown_requested = True
            self._record("shutdown requested")
            self._send(Shutdown())
            if not await _set_within(self._exited, grace_s):
                self._record("no exit after Shutdown: SIGTERM")
                self._signal(signal.SIGTERM)
                if not await _set_within(self._exited, grace_s):
                    self._record("no exit after SIGTERM: SIGKILL")
                    self._signal(signal.SIGKILL)
        await self._exited.wait()
        assert self._exit is not None
        return self._exit.returncode

    # -- internals -----------------------------------------------------------

    def _record(self, what: str) -> None:
        self._flight.append((time.monotonic(), what))

    def _send(self, message: ParentMessage) -> None:
        stdin = self._process.stdin
        if self._exit is not None or stdin is None or stdin.is_closing():
            return
        stdin.write(encode_frame(message))

    async def _drain(self) -> None:
        stdin = self._process.stdin
        if stdin is not None and not stdin.is_closing():
            await stdin.drain()

    def _signal(self, signum: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._process.send_signal(signum)

    async def _kill(self) -> None:
        # A runner that reported Failed exits by itself; let it, so its exit
        # status (not our SIGKILL) is what the flight record shows.
        if self._failure is None or not await _set_within(self._exited, FAILED_EXIT_GRACE_S):
            self._signal(signal.SIGKILL)
        await self._exited.wait()

    async def _read(self, stdout: int) -> None:
        reader = StdoutReader(self._dispatch)
        pipe = os.fdopen(stdout, "rb", buffering=0)  # from here on, the transport's to close
        error: Exception | None
        try:
            await asyncio.get_running_loop().connect_read_pipe(lambda: reader, pipe)
        except Exception as exc:
            pipe.close()
            error = exc
        else:
            error = await reader.ended
        match error:
            case None:
                pass
            case ProtocolError():
                # A runner that garbles its stdout cannot be trusted with more work.
                self._failure = self._failure or str(error)
                self._record(f"protocol error: {error}")
                self._signal(signal.SIGKILL)
            case _:
                # Nobody would read this runner's output any more: end it.
                log.error("reading runner %d failed", self._process.pid, exc_info=error)
                self._failure = self._failure or f"the daemon stopped reading the runner: {error}"
                self._signal(signal.SIGKILL)
        returncode = await self._process.wait()
        runner_reaped(self._process.pid)
        await self._stderr_task
        self._finish(returncode)

    def _dispatch(self, message: RunnerMessage) -> None:
        match message:
            case (
                TokenChunk()
                | FinishChunk()
                | ErrorChunk()
                | Embedded()
                | Synthesized()
                | Transcribed()
                | SpeechPartial()
                | MediaProgress()
                | MediaRendered()
                | ImagesRendered()
                | ImagePreview()
            ):
                self._tasks.deliver(message)
            case Phase(phase=phase, detail=detail):
                self._record(f"phase {phase}" + (f": {detail}" if detail else ""))
                try:
                    self._on_phase(phase)
                except Exception:
                    log.exception("on_phase callback failed")
                if phase == "ready" and not self._ready.done():
                    self._ready.set_result(None)
            case Failed(message=failure, code=code):
                self._record(f"failed: {failure}")
                self._failure = failure
                self._failure_code = code
                if not self._ready.done():
                    self._ready.set_exception(RunnerFailed(failure, code))

    async def _pump_stderr(self) -> None:
        stderr = self._process.stderr
        assert stderr is not None
        while True:
            try:
                line = await stderr.readline()
            except ValueError:
                continue  # a line past the stream limit; asyncio has dropped it
            if not line:
                return
            text = line.decode("utf-8", errors="replace").rstrip()
            self._stderr_tail.append(text)
            log.info("runner %d: %s", self._process.pid, text)

    def _finish(self, returncode: int) -> None:
        message = exit_message(
            self._process.pid,
            returncode,
            shutdown_requested=self._shutdown_requested,
            failure=self._failure,
            last_log=self._stderr_tail[-1] if self._stderr_tail else None,
        )
        self._exit = RunnerExit(
            pid=self._process.pid,
            returncode=returncode,
            expected=self._shutdown_requested,
            message=message,
            code=self._failure_code,
        )
        self._record(f"exited: {message}")
        if not self._ready.done():
            self._ready.set_exception(RunnerFailed(message, self._failure_code))
        self._tasks.fail_all(message)
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._exited.set()
        if self._started and self._on_exit is not None:
            try:
                self._on_exit(self._exit)
            except Exception:
                log.exception("on_exit callback failed")
