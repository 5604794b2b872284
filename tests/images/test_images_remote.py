"""An image edit whose runner is on another node: both ends of :class:`RemoteImages`
over a two-node stand-in fabric, every frame through the real fabric encoder and
decoder. The input image crosses in bounded frames and reaches the serving runner
intact, previews and pictures larger than a frame come back whole, and an input
that does not match its announcement never reaches the runner (``image_mismatch``).
The daemon-level remote render is in ``test_images_daemon.py``.
"""

from __future__ import annotations

import asyncio
import hashlib

import msgspec

from skulk_core.chat.generation import ErrorChunk
from skulk_core.cluster.fabric import (
    MAX_SPEECH_FRAME_BYTES,
    PLANE_OF,
    Body,
    CancelTask,
    DataFrame,
    RunImages,
    decode_body,
    encode,
)
from skulk_core.ids import CommandId, InstanceId, NodeId, TaskId
from skulk_daemon.fabric.data_plane import DataPlane
from skulk_daemon.fabric.link import LinkCounters
from skulk_daemon.fabric.remote_images import RemoteImages
from skulk_daemon.runner.client import Answer, PreviewSink
from skulk_daemon.runner.protocol import ImagePreview, ImagesRendered, RenderImages
from tests.core.fabric_samples import header

OWNER = NodeId("12D3KooWowner")
SERVER = NodeId("12D3KooWserver")
CMD = CommandId("cmd-images")
INSTANCE = InstanceId("i-images")
TASK = TaskId("t-images")


def noise(size: int, seed: bytes) -> bytes:
    return hashlib.shake_256(seed).digest(size)


PICTURE = noise(MAX_SPEECH_FRAME_BYTES + 300, b"picture")
PREVIEW = noise(MAX_SPEECH_FRAME_BYTES * 2 + 7, b"preview")


class Fabric:
    """Two nodes' links; ``tamper`` rewrites a run message on its way."""

    def __init__(self, tamper: bool = False) -> None:
        self.tamper = tamper
        self.owner = RemoteImages(Link(self, OWNER))
        self.server = RemoteImages(Link(self, SERVER))

    def deliver(self, source: NodeId, target: NodeId, body: Body) -> bool:
        body = decode_body(encode(header(plane=PLANE_OF[type(body)]), body))
        end = self.owner if target == OWNER else self.server
        match body:
            case DataFrame():
                end._link.data.deliver(body)
            case RunImages():
                if self.tamper:
                    job = msgspec.structs.replace(body.job, image_sha256="0" * 64)
                    body = msgspec.structs.replace(body, job=job)
                end.serve(source, body)
            case CancelTask(command_id=command_id):
                end.stop(command_id)
            case _:
                raise AssertionError(f"unexpected {body!r}")
        return True


class Link:
    def __init__(self, fabric: Fabric, own: NodeId) -> None:
        self._fabric = fabric
        self._own = own
        self.data = DataPlane(own, lambda node, frame: fabric.deliver(own, node, frame))
        self.counters = LinkCounters()

    def send_control(self, node_id: NodeId, body: Body) -> bool:
        return self._fabric.deliver(self._own, node_id, body)

    def is_live(self, node_id: NodeId) -> bool:
        return True


class Worker:
    """The serving node's supervisor: one preview, then one picture."""

    def __init__(self) -> None:
        self.tasks: list[RenderImages] = []

    async def render(
        self,
        instance_id: InstanceId,
        task: RenderImages,
        command_id: CommandId,
        previews: PreviewSink = None,
    ) -> Answer:
        self.tasks.append(task)
        if previews is not None:
            previews(ImagePreview(task_id=task.task_id, index=0, number=0, png=PREVIEW))
        return ImagesRendered(task_id=task.task_id, images=(PICTURE,), width=64, height=64)

    def cancel(self, instance_id: InstanceId, task_id: TaskId) -> None:
        raise AssertionError("nothing is cancelled here")


def edit(image: bytes) -> RenderImages:
    return RenderImages(
        task_id=TASK,
        prompt="a fox",
        width=64,
        height=64,
        seed=1,
        steps=2,
        guidance=1.0,
        init_image=image,
        previews=1,
    )


def render(fabric: Fabric, task: RenderImages) -> tuple[Answer, list[ImagePreview], Worker]:
    worker = Worker()
    fabric.server.attach(worker)
    previews: list[ImagePreview] = []

    async def go() -> Answer:
        return await asyncio.wait_for(
            fabric.owner.run(SERVER, INSTANCE, task, CMD, previews.append), 30
        )

    return asyncio.run(go()), previews, worker


def test_an_edit_crosses_in_frames_and_its_pictures_come_back_whole() -> None:
    image = noise(MAX_SPEECH_FRAME_BYTES * 2 + 11, b"input")  # three frames
    answer, previews, worker = render(Fabric(), edit(image))
    assert [task.init_image for task in worker.tasks] == [image]
    assert isinstance(answer, ImagesRendered), answer
    assert answer.images == (PICTURE,) and (answer.width, answer.height) == (64, 64)
    assert [(p.index, p.number, p.png) for p in previews] == [(0, 0, PREVIEW)]


def test_an_input_that_does_not_match_its_announcement_never_reaches_the_runner() -> None:
    answer, previews, worker = render(Fabric(tamper=True), edit(b"an input image"))
    assert isinstance(answer, ErrorChunk), answer
    assert answer.code == "image_mismatch" and "SHA-256" in answer.message
    assert worker.tasks == [] and previews == []
