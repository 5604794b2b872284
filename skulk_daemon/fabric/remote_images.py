"""Image renders whose runner lives on another node.

The API node that accepted an image request owns its command, as for speech
(:mod:`skulk_daemon.fabric.remote_speech`): it sends :class:`RunImages` to the node that
hosts the instance's runner; an edit's input image follows as the command's data stream
in raw frames of at most 1 MiB, checked (size, frames, SHA-256) before the runner sees
it. The serving node runs the render through its own supervisor exactly as a local
request and sends each preview and picture back as :class:`ImagePart` frames, then
:class:`ImagesDone`. Pictures never enter State or the event log.

A cancelled owner sends ``CancelTask``; a serving node that goes silent, or a stream
that loses a frame, ends the call with an error instead of a hang; an owner that goes
silent makes the serving node cancel the render.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from skulk_core.chat.generation import ErrorChunk
from skulk_core.cluster.fabric import (
    MAX_SPEECH_FRAME_BYTES,
    CancelTask,
    ImagePart,
    ImagesDone,
    RenderJob,
    RunImages,
    SpeechAccepted,
)
from skulk_core.ids import CommandId, InstanceId, NodeId, TaskId
from skulk_daemon.fabric.data_plane import DataStream, StreamBroken
from skulk_daemon.fabric.speech_frames import FrameSender, split
from skulk_daemon.runner.client import Answer, PreviewSink
from skulk_daemon.runner.protocol import (
    ERROR_CANCELLED,
    ImagePreview,
    ImagesRendered,
    ImageStats,
    RenderImages,
)

if TYPE_CHECKING:
    from skulk_daemon.fabric.link import FabricLink

log = logging.getLogger(__name__)

LIVENESS_CHECK_SECONDS: Final = 1.0
FIRST_FRAME_SECONDS: Final = 30.0
"""How long a serving node may take to accept a render before the owner gives up."""
UPLOAD_IDLE_SECONDS: Final = 30.0
MAX_INIT_IMAGE_BYTES: Final = 24 * 1024 * 1024
UPLOAD_STREAM_FRAMES: Final = MAX_INIT_IMAGE_BYTES // MAX_SPEECH_FRAME_BYTES + 8

ERROR_IMAGE_MISMATCH: Final = "image_mismatch"
ERROR_NODE_LOST: Final = "node_lost"
ERROR_STREAM_BROKEN: Final = "stream_broken"
ERROR_UNAVAILABLE: Final = "instance_unavailable"


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


def _error(task_id: TaskId, code: str, message: str) -> ErrorChunk:
    return ErrorChunk(task_id=task_id, code=code, message=message)


def job_of(task: RenderImages) -> RenderJob:
    image = task.init_image or b""
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
        image_bytes=len(image),
        image_frames=len(split(image)) if image else 0,
        image_sha256=hashlib.sha256(image).hexdigest() if image else "",
    )


def task_of(job: RenderJob, image: bytes | None) -> RenderImages:
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


class _Pictures:
    """The owner's view of a render as its pieces arrive."""

    def __init__(self, task_id: TaskId, previews: PreviewSink) -> None:
        self._task_id = task_id
        self._previews = previews
        self._partial = bytearray()
        self.images: list[bytes] = []

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
            return _error(
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


def _send_png(sender: FrameSender, task_id: TaskId, index: int, number: int, png: bytes) -> bool:
    pieces = split(png)
    return all(
        sender.send(
            ImagePart(
                task_id=task_id, index=index, number=number, png=piece, last=at == len(pieces) - 1
            )
        )
        for at, piece in enumerate(pieces)
    )


def _send_answer(sender: FrameSender, answer: Answer) -> bool:
    match answer:
        case ImagesRendered():
            for index, png in enumerate(answer.images):
                if not _send_png(sender, answer.task_id, index, -1, png):
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
        case ErrorChunk():
            return sender.send(answer, final=True)
        case _:
            failure = _error(answer.task_id, "engine_failed", "the runner answered out of kind")
            return sender.send(failure, final=True)


@dataclass(slots=True)
class _Serving:
    task: asyncio.Task[None]
    instance_id: InstanceId
    task_id: TaskId
    running: bool = False
    cancelled: bool = False


class RemoteImages:
    """Both ends of remote renders for one node."""

    def __init__(self, link: FabricLink) -> None:
        self._link = link
        self._worker: ImageWorker | None = None
        self._serving: dict[CommandId, _Serving] = {}

    def attach(self, worker: ImageWorker) -> None:
        self._worker = worker

    # -- the owner's end ---------------------------------------------------------------

    async def render(
        self,
        node: NodeId,
        instance_id: InstanceId,
        task: RenderImages,
        command_id: CommandId,
        previews: PreviewSink = None,
    ) -> Answer:
        """``task`` rendered by ``node``'s runner. Always answers (an error chunk when
        the node or the stream fails); cancelling the caller cancels it there."""
        link = self._link
        task_id = task.task_id
        stream = link.data.open(command_id, sender=node)
        ended = False
        try:
            message = RunImages(command_id=command_id, instance_id=instance_id, job=job_of(task))
            if not link.send_control(node, message):
                ended = True
                return _error(task_id, ERROR_UNAVAILABLE, f"node {node} cannot be reached")
            if task.init_image:
                sender = FrameSender(link, node, command_id)
                pieces = split(task.init_image)
                sent = all(
                    sender.send(piece, final=at == len(pieces) - 1)
                    for at, piece in enumerate(pieces)
                )
                if not sent:
                    return _error(task_id, ERROR_UNAVAILABLE, f"the image could not reach {node}")
            answer = await self._answer(node, stream, task_id, previews)
            ended = True
            return answer
        finally:
            stream.close()
            if not ended:
                link.send_control(node, CancelTask(command_id=command_id))

    async def _answer(
        self, node: NodeId, stream: DataStream, task_id: TaskId, previews: PreviewSink
    ) -> Answer:
        pictures = _Pictures(task_id, previews)
        started = time.monotonic()
        accepted = False
        while True:
            try:
                if stream.ready():
                    payload = await stream.next()
                else:
                    async with asyncio.timeout(LIVENESS_CHECK_SECONDS):
                        payload = await stream.next()
            except TimeoutError:
                if not self._link.is_live(node):
                    return _error(task_id, ERROR_NODE_LOST, f"node {node} rendering it went away")
                if not accepted and time.monotonic() - started > FIRST_FRAME_SECONDS:
                    return _error(task_id, ERROR_UNAVAILABLE, f"node {node} did not start it")
                continue
            except StreamBroken as exc:
                return _error(
                    task_id, ERROR_STREAM_BROKEN, f"pictures from {node} were lost: {exc}"
                )
            accepted = True
            match payload:
                case SpeechAccepted():
                    pass
                case ImagePart():
                    pictures.part(payload)
                case ImagesDone():
                    return pictures.done(payload)
                case ErrorChunk():
                    return payload
                case None:
                    return _error(task_id, ERROR_STREAM_BROKEN, "the stream ended early")
                case _:
                    return _error(task_id, ERROR_STREAM_BROKEN, f"node {node} sent another kind")

    # -- the serving end ---------------------------------------------------------------

    def serve(self, owner: NodeId, message: RunImages) -> None:
        """Take ``owner``'s render (called by the agent, never raises)."""
        command_id = message.command_id
        if command_id in self._serving:
            return
        job = message.job
        # The input image's frames follow this message: the stream must exist first.
        inbound = (
            self._link.data.open(command_id, UPLOAD_STREAM_FRAMES, sender=owner)
            if job.image_bytes
            else None
        )
        task = asyncio.create_task(self._serve(owner, message, inbound))
        self._serving[command_id] = _Serving(task, message.instance_id, job.task_id)
        task.add_done_callback(lambda _: self._serving.pop(command_id, None))

    async def _serve(self, owner: NodeId, message: RunImages, inbound: DataStream | None) -> None:
        command_id, job = message.command_id, message.job
        sender = FrameSender(self._link, owner, command_id)
        worker = self._worker
        try:
            if worker is None:
                failure = _error(job.task_id, ERROR_UNAVAILABLE, "this node serves no runners")
                sender.send(failure, final=True)
                return
            sender.send(SpeechAccepted(task_id=job.task_id))
            image = None
            if inbound is not None:
                received = await self._receive(owner, inbound, job)
                if isinstance(received, ErrorChunk):
                    sender.send(received, final=True)
                    return
                image = received
            await self._run(worker, owner, message, task_of(job, image), sender)
        except asyncio.CancelledError:
            serving = self._serving.get(command_id)
            cancelled = serving is not None and serving.cancelled
            code, why = (
                (ERROR_CANCELLED, "the request was cancelled")
                if cancelled
                else (ERROR_UNAVAILABLE, "the serving node is shutting down")
            )
            sender.send(_error(job.task_id, code, why), final=True)
            raise
        except Exception:
            log.exception("serving render %s for %s failed", job.task_id, owner)
            failure = _error(job.task_id, "engine_failed", "the serving node failed the render")
            sender.send(failure, final=True)
        finally:
            if inbound is not None:
                inbound.close()

    async def _receive(
        self, owner: NodeId, inbound: DataStream, job: RenderJob
    ) -> bytes | ErrorChunk:
        task_id = job.task_id
        if not 0 < job.image_bytes <= MAX_INIT_IMAGE_BYTES:
            return _error(task_id, ERROR_IMAGE_MISMATCH, f"{job.image_bytes} bytes is refused")
        image = bytearray()
        frames = 0
        idle_since = time.monotonic()
        while True:
            try:
                if inbound.ready():
                    payload = await inbound.next()
                else:
                    async with asyncio.timeout(LIVENESS_CHECK_SECONDS):
                        payload = await inbound.next()
            except TimeoutError:
                if not self._link.is_live(owner):
                    return _error(task_id, ERROR_NODE_LOST, f"node {owner} went away mid-upload")
                if time.monotonic() - idle_since > UPLOAD_IDLE_SECONDS:
                    return _error(task_id, ERROR_STREAM_BROKEN, "the image upload stalled")
                continue
            except StreamBroken as exc:
                return _error(task_id, ERROR_STREAM_BROKEN, f"image frames were lost: {exc}")
            idle_since = time.monotonic()
            match payload:
                case None:
                    break
                case bytes() if len(payload) <= MAX_SPEECH_FRAME_BYTES:
                    image += payload
                    frames += 1
                    if len(image) > job.image_bytes or frames > job.image_frames:
                        break
                case _:
                    return _error(task_id, ERROR_IMAGE_MISMATCH, "the image came in another frame")
        if len(image) != job.image_bytes or frames != job.image_frames:
            return _error(
                task_id,
                ERROR_IMAGE_MISMATCH,
                f"the image arrived as {len(image)} bytes in {frames} frames; "
                f"{job.image_bytes} bytes in {job.image_frames} frames were sent",
            )
        if hashlib.sha256(image).hexdigest() != job.image_sha256:
            return _error(task_id, ERROR_IMAGE_MISMATCH, "the image's SHA-256 does not match")
        return bytes(image)

    async def _run(
        self,
        worker: ImageWorker,
        owner: NodeId,
        message: RunImages,
        task: RenderImages,
        sender: FrameSender,
    ) -> None:
        command_id, instance_id, task_id = message.command_id, message.instance_id, task.task_id
        serving = self._serving.get(command_id)
        if serving is not None:
            if serving.cancelled:
                failure = _error(task_id, ERROR_CANCELLED, "the request was cancelled")
                sender.send(failure, final=True)
                return
            serving.running = True

        def preview(part: ImagePreview) -> None:
            if not sender.failed and not _send_png(
                sender, task_id, part.index, part.number, part.png
            ):
                log.warning("owner %s of %s stopped receiving; cancelling", owner, command_id)
                worker.cancel(instance_id, task_id)

        rendering = asyncio.ensure_future(
            worker.render(instance_id, task, command_id, preview if task.previews else None)
        )
        watching = True
        try:
            while not rendering.done():
                await asyncio.wait({rendering}, timeout=LIVENESS_CHECK_SECONDS)
                if watching and not rendering.done() and not self._link.is_live(owner):
                    watching = False  # nobody will read the answer: stop the work
                    worker.cancel(instance_id, task_id)
            answer = rendering.result()
        except asyncio.CancelledError:
            worker.cancel(instance_id, task_id)
            rendering.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await rendering
            raise
        if not _send_answer(sender, answer):
            log.warning("could not send the pictures of %s to %s", command_id, owner)

    def stop(self, command_id: CommandId) -> None:
        """The owner cancelled: cancel the runner's render (its ``cancelled`` answer
        still goes back), or stop the upload."""
        serving = self._serving.get(command_id)
        if serving is None:
            return
        serving.cancelled = True
        if serving.running:
            if self._worker is not None:
                self._worker.cancel(serving.instance_id, serving.task_id)
        else:
            serving.task.cancel()

    def cancel(self, node: NodeId, command_id: CommandId) -> None:
        """``/v1/cancel`` on the owner: the serving node cancels the render."""
        self._link.send_control(node, CancelTask(command_id=command_id))

    async def close(self) -> None:
        tasks = [serving.task for serving in self._serving.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
