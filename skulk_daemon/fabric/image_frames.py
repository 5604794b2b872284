"""How an image render and its pictures travel as fabric values, and back.

A runner render becomes a :class:`~skulk_core.cluster.fabric.RenderJob` (an edit's
input image stays out of it: it follows as raw frames); each preview and picture
travels as :class:`ImagePart` pieces of at most 1 MiB and the render closes with
:class:`ImagesDone`, which :class:`Pictures` turns back into the same answer and
previews on the owner. Nothing here waits or decides;
:mod:`skulk_daemon.fabric.remote_images` does.
"""

from __future__ import annotations

from typing import Final

from skulk_core.cluster.fabric import DataPayload, ImagePart, ImagesDone, RenderJob
from skulk_core.ids import TaskId
from skulk_daemon.fabric.relay_frames import (
    ERROR_STREAM_BROKEN,
    ForeignFrame,
    FrameSender,
    announce,
    relay_error,
    send_other,
    split,
)
from skulk_daemon.runner.client import Answer, PreviewSink
from skulk_daemon.runner.protocol import ImagePreview, ImagesRendered, ImageStats, RenderImages

MAX_INIT_IMAGE_BYTES: Final = 24 * 1024 * 1024
"""The largest input image an edit sends to another node."""


def job_of(task: RenderImages) -> RenderJob:
    """The fabric's job for a runner render (an edit's image stays out of it)."""
    size, frames, sha256 = announce(task.init_image) if task.init_image else (0, 0, "")
    return RenderJob(
        task_id=task.task_id,
        prompt=task.prompt,
        negative_prompt=task.negative_prompt,
        width=task.width,
        height=task.height,
        count=task.count,
        seed=task.seed,
        steps=task.steps,
        guidance=task.guidance,
        strength=task.strength,
        previews=task.previews,
        collect_stats=task.collect_stats,
        image_bytes=size,
        image_frames=frames,
        image_sha256=sha256,
    )


def task_of(job: RenderJob, image: bytes | None) -> RenderImages:
    """The runner render for a job received over the fabric (with its checked image)."""
    return RenderImages(
        task_id=job.task_id,
        prompt=job.prompt,
        negative_prompt=job.negative_prompt,
        width=job.width,
        height=job.height,
        count=job.count,
        seed=job.seed,
        steps=job.steps,
        guidance=job.guidance,
        init_image=image,
        strength=job.strength,
        previews=job.previews,
        collect_stats=job.collect_stats,
    )


class Pictures:
    """The owner's view of a render as its pieces arrive."""

    def __init__(self, task_id: TaskId, previews: PreviewSink) -> None:
        self._task_id = task_id
        self._previews = previews
        self._partial = bytearray()
        self.images: list[bytes] = []

    def take(self, payload: DataPayload) -> Answer | None:
        match payload:
            case ImagePart():
                self.part(payload)
                return None
            case ImagesDone():
                return self.done(payload)
            case _:
                raise ForeignFrame

    def part(self, piece: ImagePart) -> None:
        self._partial += piece.png
        if not piece.last:
            return
        png, self._partial = bytes(self._partial), bytearray()
        if piece.number < 0:
            self.images.append(png)
        elif self._previews is not None:
            self._previews(
                ImagePreview(task_id=self._task_id, index=piece.index, number=piece.number, png=png)
            )

    def done(self, done: ImagesDone) -> Answer:
        if len(self.images) != done.count:
            return relay_error(
                self._task_id,
                ERROR_STREAM_BROKEN,
                f"{len(self.images)} of {done.count} pictures arrived",
            )
        stats = None
        if done.render_seconds is not None:
            stats = ImageStats(
                load_seconds=done.load_seconds,
                render_seconds=done.render_seconds,
                steps=done.steps,
                images=done.count,
                seconds_per_step=done.render_seconds / max(1, done.steps * done.count),
            )
        return ImagesRendered(
            task_id=self._task_id,
            images=tuple(self.images),
            width=done.width,
            height=done.height,
            stats=stats,
        )


def send_png(sender: FrameSender, task_id: TaskId, index: int, number: int, png: bytes) -> bool:
    """One picture (``number`` < 0) or preview as :class:`ImagePart` pieces."""
    pieces = split(png)
    return all(
        sender.send(
            ImagePart(
                task_id=task_id, index=index, number=number, png=piece, last=at == len(pieces) - 1
            )
        )
        for at, piece in enumerate(pieces)
    )


def send_answer(sender: FrameSender, answer: Answer) -> bool:
    """The runner's answer as pictures and a closing (final) frame."""
    match answer:
        case ImagesRendered():
            for index, png in enumerate(answer.images):
                if not send_png(sender, answer.task_id, index, -1, png):
                    return False
            stats = answer.stats
            done = ImagesDone(
                task_id=answer.task_id,
                width=answer.width,
                height=answer.height,
                count=len(answer.images),
                render_seconds=None if stats is None else stats.render_seconds,
                load_seconds=0.0 if stats is None else stats.load_seconds,
                steps=0 if stats is None else stats.steps,
            )
            return sender.send(done, final=True)
        case _:
            return send_other(sender, answer)
