"""The video job family: admission against the card's declared contract, the runner
task, the MP4 check, and the video object (logic under ``api/videos.py``)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Final

import msgspec

from skulk_core.ids import TaskId
from skulk_core.media.jobs import Job, JobFamily, JobRefused, Page, present
from skulk_core.media.video_admission import MAX_SEED, video_spec
from skulk_core.media.video_wire import (
    THUMBNAIL_CONTENT_TYPE,
    THUMBNAIL_FILE,
    VIDEO_CONTENT_TYPE,
    VIDEO_FILE,
    Attachment,
    EngineSettings,
    RenderStats,
    VideoList,
    VideoObject,
    VideoOutput,
    VideoRequest,
    VideoSpec,
)
from skulk_core.models.cards import ModelTask
from skulk_daemon.media.containers import ContainerRejected, verify_video
from skulk_daemon.media.family_service import FamilyService
from skulk_daemon.media.jobs_service import Content
from skulk_daemon.runner.protocol import MediaRendered, MediaTask, RenderVideo

_SPEC: Final = msgspec.json.Decoder(VideoSpec)
_OUTPUT: Final = msgspec.json.Decoder(VideoOutput)
_STATS: Final = msgspec.json.Decoder(RenderStats)


class VideoFamily:
    family: JobFamily = "video"
    task = ModelTask.TEXT_TO_VIDEO

    def runner_task(self, job: Job, task_id: TaskId, work_dir: Path) -> MediaTask:
        spec = _SPEC.decode(job.request)
        inputs = tuple(
            str(work_dir.parent / f"input-{index}") for index in range(len(spec.attachments))
        )
        return RenderVideo(task_id=task_id, spec=spec, inputs=inputs, output_dir=str(work_dir))

    def stats(self, job: Job, rendered: MediaRendered) -> msgspec.Raw:
        spec = _SPEC.decode(job.request)
        stats = RenderStats(
            steps=rendered.steps,
            seconds_per_step=round(rendered.total_generation_time / max(1, rendered.steps), 6),
            total_generation_time=round(rendered.total_generation_time, 6),
            peak_memory_bytes=rendered.peak_memory_bytes,
            engine=EngineSettings(
                sampler=spec.sampler,
                scheduler=spec.scheduler,
                steps=spec.steps,
                seed=spec.seed,
                width=spec.width,
                height=spec.height,
                frame_count=spec.frame_count,
                styles=spec.styles,
                codec=spec.codec,
            ),
        )
        return msgspec.Raw(msgspec.json.encode(stats))

    def verify(self, job: Job, files: list[Path]) -> msgspec.Raw:
        video = next((path for path in files if path.name == VIDEO_FILE), None)
        if video is None:
            raise ContainerRejected("the render delivered no MP4")
        thumbnail = next((path for path in files if path.name == THUMBNAIL_FILE), None)
        output = verify_video(_SPEC.decode(job.request), video, thumbnail)
        return msgspec.Raw(msgspec.json.encode(output))


def video_object(job: Job) -> VideoObject:
    spec = _SPEC.decode(job.request)
    return VideoObject(
        id=job.id,
        model=job.model,
        status=job.status,
        progress=job.progress,
        created_at=job.created_at,
        completed_at=job.completed_at,
        expires_at=job.expires_at,
        seconds=str(spec.seconds),
        size=spec.size,
        error=job.error,
        prompt=spec.prompt,
        mode=spec.mode,
        audio=spec.audio,
        stage=job.stage,
        output=_OUTPUT.decode(job.output) if present(job.output) and job.content_bytes else None,
        stats=_STATS.decode(job.stats) if present(job.stats) else None,
    )


class VideoService(FamilyService[VideoObject, VideoList]):
    """``/v1/videos*`` below the HTTP layer."""

    def _object(self, job: Job) -> VideoObject:
        return video_object(job)

    def _list(self, data: tuple[VideoObject, ...], page: Page) -> VideoList:
        return VideoList(
            data=data, first_id=page.first_id, last_id=page.last_id, has_more=page.has_more
        )

    def create(
        self,
        request: VideoRequest,
        uploads: list[tuple[Attachment, bytes]] = [],  # noqa: B006
    ) -> VideoObject:
        card = self.jobs.card(request.model)
        if card.video is None:
            raise JobRefused(400, f"model {request.model} declares no video contract", "wrong_task")
        attachments = [attachment for attachment, _ in uploads]
        spec = video_spec(request, attachments, card.video, secrets.randbelow(MAX_SEED + 1))
        inputs = [(f"input-{index}", data) for index, (_, data) in enumerate(uploads)]
        job = self.jobs.create(request.model, msgspec.Raw(msgspec.json.encode(spec)), inputs)
        return video_object(job)

    def content(self, video_id: str, variant: str) -> Content:
        if variant == "thumbnail":
            return self.jobs.content(video_id, THUMBNAIL_FILE, THUMBNAIL_CONTENT_TYPE)
        if variant != "video":
            raise JobRefused(400, "variant must be video or thumbnail", "invalid_variant")
        return self.jobs.content(video_id, VIDEO_FILE, VIDEO_CONTENT_TYPE)
