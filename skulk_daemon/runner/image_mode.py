"""The runner's ``"image"`` mode: one stable-diffusion.cpp model, one render at a time.

The host (:mod:`skulk_daemon.runner.host`) hands the runner over here after ``Load``.
The engine is loaded and warmed (reporting each phase), then one worker thread answers
every :class:`~skulk_daemon.runner.protocol.RenderImages` in arrival order with exactly
one ``ImagesRendered`` or ``ErrorChunk``, its previews first. ``Cancel`` marks a task:
a queued one is answered ``cancelled`` when its turn comes, a running one before its
next image. Prompts and pictures never reach the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Final

from skulk_core.chat.generation import ERROR_ENGINE_FAILED, ERROR_INVALID_REQUEST, ErrorChunk
from skulk_core.ids import TaskId
from skulk_daemon.engines.base import EngineLoadError
from skulk_daemon.engines.sd_cpp import (
    RenderCancelled,
    RenderRefused,
    StableDiffusionEngine,
    open_image,
)
from skulk_daemon.runner.protocol import (
    ERROR_CANCELLED,
    Failed,
    ImagePreview,
    ImagesRendered,
    ImageStats,
    Load,
    Phase,
    RenderImages,
    RunnerMessage,
)
from skulk_daemon.runner.serial_worker import SerialWorker

log = logging.getLogger("skulk.runner")
EXIT_FAILED: Final = 1
Send = Callable[[RunnerMessage], None]
DOES: Final = "renders images; it does not generate text, embed or speak"
"""What this runner answers a request of another kind."""


class ImageWorker(SerialWorker[RenderImages]):
    """One thread rendering tasks in order, each answered exactly once."""

    def __init__(self, engine: StableDiffusionEngine, send: Send) -> None:
        self._engine = engine
        super().__init__(send, "images")

    def _answer(self, task: RenderImages) -> RunnerMessage:
        task_id = task.task_id
        try:
            return self._render(task)
        except RenderCancelled:
            return _error(task_id, ERROR_CANCELLED, "the image request was cancelled")
        except RenderRefused as exc:
            return _error(task_id, ERROR_INVALID_REQUEST, str(exc))
        except Exception as exc:
            log.exception("image task %s failed", task_id)
            return _error(task_id, ERROR_ENGINE_FAILED, f"the image engine failed: {exc}")

    def _render(self, task: RenderImages) -> ImagesRendered:
        init = (
            None
            if task.init_image is None
            else open_image(task.init_image, task.width, task.height)
        )
        started = time.monotonic()
        images: list[bytes] = []
        for index in range(task.count):
            if self._is_cancelled(task.task_id):
                raise RenderCancelled

            def preview(number: int, png: bytes, index: int = index) -> None:
                self._send(ImagePreview(task_id=task.task_id, index=index, number=number, png=png))

            images.append(
                self._engine.generate(
                    prompt=task.prompt,
                    negative_prompt=task.negative_prompt,
                    width=task.width,
                    height=task.height,
                    seed=task.seed + index,
                    steps=task.steps,
                    guidance=task.guidance,
                    init_image=init,
                    strength=task.strength,
                    previews=task.previews,
                    on_preview=preview if task.previews else None,
                )
            )
        seconds = time.monotonic() - started
        stats = None
        if task.collect_stats:
            stats = ImageStats(
                load_seconds=self._engine.load_seconds,
                render_seconds=seconds,
                steps=task.steps,
                images=task.count,
                seconds_per_step=seconds / max(1, task.steps * task.count),
            )
        return ImagesRendered(
            task_id=task.task_id,
            images=tuple(images),
            width=task.width,
            height=task.height,
            stats=stats,
        )


def _error(task_id: TaskId, code: str, message: str) -> ErrorChunk:
    return ErrorChunk(task_id=task_id, code=code, message=message)


def serve_images(stdin: BinaryIO, send: Send, load: Load) -> int:
    """Load the image model ``load`` names, then serve its renders until Shutdown."""
    engine = StableDiffusionEngine(Path(load.model_path), load.n_threads)
    try:
        engine.load()
        send(Phase(phase="loaded"))
        send(Phase(phase="warming_up"))
        engine.warm_up()
    except (ImportError, OSError, EngineLoadError, RuntimeError, ValueError) as exc:
        log.error("cannot load: %s", exc)
        send(Failed(message=str(exc)))
        return EXIT_FAILED
    send(Phase(phase="ready"))
    worker = ImageWorker(engine, send)
    return worker.serve(
        stdin, "renders images; it does not generate text, embed or speak", images=worker.submit
    )
