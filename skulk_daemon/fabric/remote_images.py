"""Image renders whose runner lives on another node: the image kind of
:class:`~skulk_daemon.fabric.remote_relay.RemoteRelay`.

The owner sends :class:`RunImages`; an edit's input image follows as the command's
data stream, checked (size, frames, SHA-256) before the runner sees it. The serving
node sends each preview and picture back as ``ImagePart`` frames, then ``ImagesDone``
(:mod:`skulk_daemon.fabric.image_frames`). Pictures never enter State or the event log.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from skulk_core.cluster.fabric import RunImages
from skulk_core.ids import CommandId, InstanceId, TaskId
from skulk_daemon.fabric.image_frames import (
    MAX_INIT_IMAGE_BYTES,
    Pictures,
    job_of,
    send_answer,
    send_png,
    task_of,
)
from skulk_daemon.fabric.relay_frames import Announced, Assembler, FrameSender, InputKind
from skulk_daemon.fabric.remote_relay import RemoteRelay
from skulk_daemon.runner.client import Answer, PreviewSink
from skulk_daemon.runner.protocol import ImagePreview, RenderImages

ERROR_IMAGE_MISMATCH: Final = "image_mismatch"


class ImageWorker(Protocol):
    """What the serving end needs of the node's supervisor."""

    async def render(
        self,
        instance_id: InstanceId,
        task: RenderImages,
        command_id: CommandId,
        previews: PreviewSink = None,
    ) -> Answer: ...

    def cancel(self, instance_id: InstanceId, task_id: TaskId) -> None: ...


class RemoteImages(RemoteRelay[RunImages, RenderImages, ImageWorker, ImagePreview]):
    """Both ends of remote renders for one node."""

    ANSWER = "pictures"
    TASK = "render"
    INPUT = InputKind(limit=MAX_INIT_IMAGE_BYTES, what="image", mismatch=ERROR_IMAGE_MISMATCH)

    def _message(
        self, command_id: CommandId, instance_id: InstanceId, task: RenderImages
    ) -> RunImages:
        return RunImages(command_id=command_id, instance_id=instance_id, job=job_of(task))

    def _input(self, task: RenderImages) -> bytes | None:
        return task.init_image or None

    def _task_id(self, task: RenderImages) -> TaskId:
        return task.task_id

    def _assembler(self, task_id: TaskId, sink: PreviewSink) -> Assembler:
        return Pictures(task_id, sink)

    def _announced(self, message: RunImages) -> Announced | None:
        job = message.job
        if not job.image_bytes:
            return None
        return Announced(job.image_bytes, job.image_frames, job.image_sha256)

    def _task(self, message: RunImages, upload: bytes | None) -> RenderImages:
        return task_of(message.job, upload)

    def _work(
        self,
        worker: ImageWorker,
        message: RunImages,
        task: RenderImages,
        sender: FrameSender,
        lost: Callable[[], None],
    ) -> Awaitable[Answer]:
        def preview(part: ImagePreview) -> None:
            if not sender.failed and not send_png(
                sender, task.task_id, part.index, part.number, part.png
            ):
                lost()

        previews = preview if task.previews else None
        return worker.render(message.instance_id, task, message.command_id, previews)

    def _send_answer(self, sender: FrameSender, answer: Answer) -> bool:
        return send_answer(sender, answer)
