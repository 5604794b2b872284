"""Images from placed ``TextToImage``/``ImageToImage`` models: lookup, dispatch, answer.

:mod:`skulk_daemon.images.admission` checks the request; here the model's card and
instance are found (404 ``No instance found`` for an unknown or unplaced model, 400 for
a model without the task), the render goes to the instance's runner (this node's, or
the serving node's over the fabric) as one cancellable command, and each PNG the runner
made is re-encoded as asked (png, jpeg, webp) and answered inline (``b64_json``) or
stored on this node for an hour (``url``). Prompts and pictures never enter State or
the event log; ``/state`` shows the task only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Final

from skulk_core.chat.generation import ErrorChunk
from skulk_core.cluster.routing import select_instance
from skulk_core.ids import CommandId, InstanceId, ModelId, NodeId, new_command_id, new_task_id
from skulk_core.models.cards import ModelTask
from skulk_core.models.image_cards import native_canvas
from skulk_core.state.shards import serving_node
from skulk_core.state.state import TaskStatus
from skulk_daemon.chat.cancellation import ActiveCommands
from skulk_daemon.embeddings.service import refusal
from skulk_daemon.errors import ApiError
from skulk_daemon.errors import bad_request as _bad
from skulk_daemon.images.admission import ImagePlan
from skulk_daemon.images.protocol import (
    MEDIA_TYPES,
    CompletedImageEvent,
    ImageDatum,
    ImageGenerationStats,
    ImagesResponse,
    PartialImageEvent,
    StoredImageEntry,
    StoredImageList,
)
from skulk_daemon.images.store import ImageStore
from skulk_daemon.node.node import Node
from skulk_daemon.runner.client import Answer, PreviewSink
from skulk_daemon.runner.protocol import ImagePreview, ImagesRendered, RenderImages
from skulk_daemon.runner.remote import RemoteRunner
from skulk_daemon.worker.supervisor import Supervisor

REMOTE_FAILURES: Final = frozenset({"node_lost", "stream_broken", "image_mismatch"})
"""How a render on another node's runner fails on the way (503: retry)."""
LIVE_TASKS: Final = frozenset({TaskStatus.PENDING, TaskStatus.RUNNING})


@dataclass(frozen=True, slots=True)
class AdmittedImages:
    command_id: CommandId
    instance_id: InstanceId
    plan: ImagePlan
    task: RenderImages
    created: int
    in_flight: int = 0
    """The instance's tasks already running or queued when this one was admitted."""


@dataclass(frozen=True, slots=True)
class Rendered:
    """A finished render, encoded as the request asked."""

    response: ImagesResponse
    stats: ImageGenerationStats | None


class ImageService:
    """Admission and dispatch of image requests on this node."""

    def __init__(
        self,
        node: Node,
        worker: Supervisor,
        commands: ActiveCommands,
        store: ImageStore,
        *,
        remote: RemoteRunner[RenderImages, ImagePreview] | None = None,
    ) -> None:
        self._node = node
        self._worker = worker
        self._commands = commands
        self.store = store
        self._remote = remote

    def admit(self, plan: ImagePlan, *, editing: bool, bench: bool = False) -> AdmittedImages:
        task = ModelTask.IMAGE_TO_IMAGE if editing else ModelTask.TEXT_TO_IMAGE
        instance_id = self._instance(plan.model, task)
        entry = self._node.catalog().get(plan.model)
        if plan.auto_size and entry is not None:
            width, height = native_canvas(entry.card)
            plan = replace(plan, width=width, height=height, size=f"{width}x{height}")
        render = RenderImages(
            task_id=new_task_id(),
            prompt=plan.prompt,
            negative_prompt=plan.negative_prompt,
            width=plan.width,
            height=plan.height,
            count=plan.count,
            seed=plan.seed,
            steps=plan.steps,
            guidance=plan.guidance,
            init_image=plan.init_image,
            strength=plan.strength,
            previews=plan.partial_images,
            collect_stats=bench,
        )
        in_flight = sum(
            1
            for running in self._node.state.tasks.values()
            if running.instance_id == instance_id and running.task_status in LIVE_TASKS
        )
        return AdmittedImages(
            command_id=new_command_id(),
            instance_id=instance_id,
            plan=plan,
            task=render,
            created=int(time.time()),
            in_flight=in_flight,
        )

    def _instance(self, model: str, task: ModelTask) -> InstanceId:
        model_id = ModelId(model)
        entry = self._node.catalog().get(model_id)
        if entry is not None and task not in entry.card.tasks:
            what = "image editing" if task == ModelTask.IMAGE_TO_IMAGE else "image generation"
            raise _bad(f"model {model} does not support {what} ({task.value})", code="wrong_task")
        instance = select_instance(self._node.state, model_id)
        if entry is None or instance is None:
            raise ApiError(404, f"No instance found for model {model}", code="model_not_found")
        host = serving_node(instance)
        if host != self._node.node_id and self._remote is None:
            raise ApiError(
                503,
                f"model {model} is served by node {host}, and this node has no fabric to "
                "reach it; send the request to that node's API",
                code="instance_unavailable",
            )
        return instance.instance_id

    def _remote_host(self, instance_id: InstanceId) -> NodeId | None:
        instance = self._node.state.instances.get(instance_id)
        host = None if instance is None else serving_node(instance)
        return None if host is None or host == self._node.node_id else host

    async def run(self, admitted: AdmittedImages, previews: PreviewSink = None) -> Answer:
        """The render on the instance's runner, cancellable by command id meanwhile."""
        command_id, instance_id, task = admitted.command_id, admitted.instance_id, admitted.task
        host = self._remote_host(instance_id)
        remote = self._remote
        if host is not None and remote is not None:
            with self._commands.running(command_id, lambda: remote.cancel(host, command_id)):
                return await remote.run(host, instance_id, task, command_id, previews)
        worker = self._worker
        with self._commands.running(command_id, lambda: worker.cancel(instance_id, task.task_id)):
            return await worker.render(instance_id, task, command_id, previews)

    async def render(self, admitted: AdmittedImages, base_url: str) -> Rendered:
        """Run the render and answer it as one JSON body."""
        answer = await self.run(admitted)
        rendered = _rendered(answer)
        plan = admitted.plan
        data = [await self._datum(png, plan, base_url) for png in rendered.images]
        response = ImagesResponse(
            created=admitted.created,
            data=data,
            output_format=plan.output_format,
            quality=plan.quality,
            size=plan.size,
            seed=plan.seed,
        )
        stats = None
        if rendered.stats is not None:
            stats = ImageGenerationStats(
                render_seconds=rendered.stats.render_seconds,
                seconds_per_step=rendered.stats.seconds_per_step,
                steps=rendered.stats.steps,
                images=rendered.stats.images,
                model_load_seconds=rendered.stats.load_seconds,
                # One render at a time per runner: requests queue, they never batch.
                serving_batches=False,
                in_flight_at_admission=admitted.in_flight,
            )
        return Rendered(response=response, stats=stats)

    async def stream(
        self, admitted: AdmittedImages, *, editing: bool
    ) -> AsyncIterator[PartialImageEvent | CompletedImageEvent]:
        """Each preview as it is made, then each finished image. Leaving early (the
        client went away) cancels the render."""
        queue: asyncio.Queue[ImagePreview | Answer | BaseException] = asyncio.Queue()
        job = asyncio.create_task(self.run(admitted, queue.put_nowait))

        def ended(done: asyncio.Task[Answer]) -> None:
            if not done.cancelled():
                failure = done.exception()
                queue.put_nowait(done.result() if failure is None else failure)

        job.add_done_callback(ended)
        prefix = "image_edit" if editing else "image_generation"
        plan = admitted.plan
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, ImagePreview):
                    encoded = await asyncio.to_thread(_encode, item.png, plan)
                    yield PartialImageEvent(
                        type=f"{prefix}.partial_image",
                        b64_json=base64.b64encode(encoded).decode(),
                        created_at=int(time.time()),
                        size=plan.size,
                        quality=plan.quality,
                        output_format=plan.output_format,
                        partial_image_index=item.number,
                        image_index=item.index,
                    )
                    continue
                for index, png in enumerate(_rendered(item).images):
                    encoded = await asyncio.to_thread(_encode, png, plan)
                    yield CompletedImageEvent(
                        type=f"{prefix}.completed",
                        b64_json=base64.b64encode(encoded).decode(),
                        created_at=int(time.time()),
                        size=plan.size,
                        quality=plan.quality,
                        output_format=plan.output_format,
                        image_index=index,
                    )
                return
        finally:
            if not job.done():
                job.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await job

    async def _datum(self, png: bytes, plan: ImagePlan, base_url: str) -> ImageDatum:
        encoded = await asyncio.to_thread(_encode, png, plan)
        if plan.response_format == "b64_json":
            return ImageDatum(b64_json=base64.b64encode(encoded).decode())
        fmt = plan.output_format
        stored = await asyncio.to_thread(self.store.put, encoded, MEDIA_TYPES[fmt], fmt)
        return ImageDatum(url=f"{base_url.rstrip('/')}/images/{stored.image_id}")

    def stored(self, base_url: str) -> StoredImageList:
        return StoredImageList(
            data=[
                StoredImageEntry(
                    image_id=image.image_id,
                    url=f"{base_url.rstrip('/')}/images/{image.image_id}",
                    content_type=image.content_type,
                    expires_at=int(image.expires_at),
                )
                for image in self.store.live()
            ]
        )

    def stored_image(self, image_id: str) -> tuple[bytes, str]:
        found = self.store.get(image_id)
        if found is None:
            raise ApiError(404, "Image not found or expired", code="image_not_found")
        stored, data = found
        return data, stored.content_type


def _rendered(answer: Answer) -> ImagesRendered:
    if isinstance(answer, ErrorChunk):
        if answer.code in REMOTE_FAILURES:
            raise ApiError(503, answer.message, code=answer.code)
        raise refusal(answer.code, answer.message)
    if not isinstance(answer, ImagesRendered):
        raise ApiError(500, "the runner answered out of kind", code="engine_failed")
    return answer


def _encode(png: bytes, plan: ImagePlan) -> bytes:
    """The runner's PNG in the requested format (PNG passes through)."""
    if plan.output_format == "png":
        return png
    from PIL import Image  # noqa: PLC0415 (imported where images are encoded)

    picture = Image.open(io.BytesIO(png)).convert("RGB")
    out = io.BytesIO()
    picture.save(out, format=plan.output_format.upper(), quality=plan.compression)
    return out.getvalue()
