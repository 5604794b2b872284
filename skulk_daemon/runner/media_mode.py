"""The runner's ``"render"`` mode: one media engine (video or music), one job at a time.

The model directory holds ``engine.json`` naming its engine (``MediaEngineFile``). One
worker thread answers each :class:`RenderVideo` / :class:`ComposeMusic` in arrival
order with :class:`MediaProgress` reports, then exactly one :class:`MediaRendered` or
``ErrorChunk``: a runner admits one generation at a time. ``Cancel`` marks a job: a
queued one is answered ``cancelled`` when its turn comes, a running one stops at the
engine's next step and its partial output is removed. Prompts never reach the log.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Final, Literal

import msgspec

from skulk_core.chat.generation import ERROR_ENGINE_FAILED, ERROR_INVALID_REQUEST, ErrorChunk
from skulk_core.ids import TaskId
from skulk_daemon.runner.protocol import (
    ERROR_CANCELLED,
    ComposeMusic,
    Failed,
    Load,
    MediaProgress,
    MediaRendered,
    MediaTask,
    Phase,
    RenderVideo,
    RunnerMessage,
)
from skulk_daemon.runner.serial_worker import SerialWorker

log = logging.getLogger("skulk.runner")
EXIT_FAILED: Final = 1
ENGINE_FILE: Final = "engine.json"
Send = Callable[[RunnerMessage], None]
DOES: Final = "serves media jobs, not text, embeddings or speech"
"""What this runner answers a request of another kind."""
Stage = Literal["encoding", "sampling", "decoding", "muxing"]


class MediaEngineFile(msgspec.Struct, frozen=True, kw_only=True):
    """``engine.json`` in a media model's directory."""

    engine: Literal["skulk-test-video", "skulk-test-music"]


class _Cancelled(Exception):
    pass


def _delay(name: str) -> float:
    try:
        return max(0.0, float(os.environ.get(name, "0") or 0))
    except ValueError:
        return 0.0


class MediaWorker(SerialWorker[MediaTask]):
    """One thread serving the engine's jobs in order, each answered exactly once."""

    def __init__(self, engine: str, send: Send) -> None:
        self._engine = engine
        super().__init__(send, "media")

    def _answer(self, task: MediaTask) -> RunnerMessage:
        task_id = task.task_id
        output_dir = Path(task.output_dir)
        if self._is_cancelled(task_id):
            return _error(task_id, ERROR_CANCELLED, "the job was cancelled")
        try:
            return self._run(task)
        except _Cancelled:
            shutil.rmtree(output_dir, ignore_errors=True)
            return _error(task_id, ERROR_CANCELLED, "the job was cancelled")
        except ValueError as exc:
            shutil.rmtree(output_dir, ignore_errors=True)
            return _error(task_id, ERROR_INVALID_REQUEST, str(exc))
        except Exception as exc:
            log.exception("media job %s failed", task_id)
            shutil.rmtree(output_dir, ignore_errors=True)
            return _error(task_id, ERROR_ENGINE_FAILED, f"the media engine failed: {exc}")

    def _run(self, task: MediaTask) -> MediaRendered:
        task_id = task.task_id
        started = time.monotonic()

        def report(progress: int, stage: Stage) -> None:
            self._send(MediaProgress(task_id=task_id, progress=progress, stage=stage))

        def cancelled() -> bool:
            return self._is_cancelled(task_id)

        files: tuple[Path, ...]
        match task:
            case RenderVideo(spec=spec, inputs=inputs, output_dir=output_dir):
                if self._engine != "skulk-test-video":
                    raise ValueError("this runner renders music, not video")
                from skulk_daemon.engines import test_video  # noqa: PLC0415 (lazy engine)

                try:
                    files = test_video.render(
                        spec,
                        tuple(Path(path) for path in inputs),
                        Path(output_dir),
                        report,
                        cancelled,
                        step_delay=_delay(test_video.STEP_DELAY_ENV),
                    )
                except test_video.RenderCancelled:
                    raise _Cancelled from None
                steps = spec.steps
            case ComposeMusic(spec=music, output_dir=output_dir):
                if self._engine != "skulk-test-music":
                    raise ValueError("this runner renders video, not music")
                from skulk_daemon.engines import test_music  # noqa: PLC0415 (lazy engine)

                try:
                    files = (
                        test_music.compose(
                            music,
                            Path(output_dir),
                            report,
                            cancelled,
                            block_delay=_delay(test_music.BLOCK_DELAY_ENV),
                        ),
                    )
                except test_music.ComposeCancelled:
                    raise _Cancelled from None
                steps = music.seconds
        return MediaRendered(
            task_id=task_id,
            files=tuple(str(path) for path in files),
            steps=steps,
            total_generation_time=time.monotonic() - started,
            peak_memory_bytes=_peak_rss(),
            engine=self._engine,
        )


def _peak_rss() -> int | None:
    try:
        import resource  # noqa: PLC0415 (POSIX only)
    except ImportError:
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _error(task_id: TaskId, code: str, message: str) -> ErrorChunk:
    return ErrorChunk(task_id=task_id, code=code, message=message)


def serve_media(stdin: BinaryIO, send: Send, load: Load) -> int:
    """Open the media engine ``load``'s directory names, then serve jobs until Shutdown."""
    try:
        raw = (Path(load.model_path) / ENGINE_FILE).read_bytes()
        engine = msgspec.json.decode(raw, type=MediaEngineFile).engine
    except (OSError, msgspec.DecodeError) as exc:
        send(Failed(message=f"cannot open the media model: {exc}"))
        return EXIT_FAILED
    send(Phase(phase="loaded"))
    send(Phase(phase="warming_up"))
    send(Phase(phase="ready"))
    worker = MediaWorker(engine, send)
    return worker.serve(
        stdin, "serves media jobs, not text, embeddings or speech", media=worker.submit
    )
