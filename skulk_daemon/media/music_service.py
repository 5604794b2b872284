"""The music job family: admission against the card's ``music`` contract, the runner
task, the WAV check, and the music object (logic under ``api/music.py``)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Final

import msgspec

from skulk_core.ids import TaskId
from skulk_core.media.jobs import Job, JobFamily, JobRefused, Page, present
from skulk_core.media.music_wire import (
    MAX_SEED,
    MUSIC_CONTENT_TYPE,
    MUSIC_FILE,
    MusicList,
    MusicObject,
    MusicOutput,
    MusicRequest,
    MusicSpec,
    MusicStats,
    music_spec,
)
from skulk_core.models.cards import ModelTask
from skulk_daemon.media.containers import ContainerRejected, verify_music
from skulk_daemon.media.family_service import FamilyService
from skulk_daemon.media.jobs_service import Content
from skulk_daemon.runner.protocol import ComposeMusic, MediaRendered, MediaTask

_SPEC: Final = msgspec.json.Decoder(MusicSpec)
_OUTPUT: Final = msgspec.json.Decoder(MusicOutput)
_STATS: Final = msgspec.json.Decoder(MusicStats)


class MusicFamily:
    family: JobFamily = "music"
    task = ModelTask.TEXT_TO_MUSIC

    def runner_task(self, job: Job, task_id: TaskId, work_dir: Path) -> MediaTask:
        return ComposeMusic(
            task_id=task_id, spec=_SPEC.decode(job.request), output_dir=str(work_dir)
        )

    def stats(self, job: Job, rendered: MediaRendered) -> msgspec.Raw:
        stats = MusicStats(
            total_generation_time=round(rendered.total_generation_time, 6),
            seed=_SPEC.decode(job.request).seed,
            engine=rendered.engine,
        )
        return msgspec.Raw(msgspec.json.encode(stats))

    def verify(self, job: Job, files: list[Path]) -> msgspec.Raw:
        wav = next((path for path in files if path.name == MUSIC_FILE), None)
        if wav is None:
            raise ContainerRejected("the render delivered no WAV")
        return msgspec.Raw(msgspec.json.encode(verify_music(wav)))


def music_object(job: Job) -> MusicObject:
    spec = _SPEC.decode(job.request)
    return MusicObject(
        id=job.id,
        model=job.model,
        prompt=spec.prompt,
        lyrics=spec.lyrics,
        seconds=spec.seconds,
        seed=spec.seed,
        status=job.status,
        progress=job.progress,
        created_at=job.created_at,
        completed_at=job.completed_at,
        expires_at=job.expires_at,
        error=job.error,
        output=_OUTPUT.decode(job.output) if present(job.output) and job.content_bytes else None,
        stats=_STATS.decode(job.stats) if present(job.stats) else None,
    )


class MusicService(FamilyService[MusicObject, MusicList]):
    """``/v1/music*`` below the HTTP layer."""

    def _object(self, job: Job) -> MusicObject:
        return music_object(job)

    def _list(self, data: tuple[MusicObject, ...], page: Page) -> MusicList:
        return MusicList(
            data=data, first_id=page.first_id, last_id=page.last_id, has_more=page.has_more
        )

    def create(self, request: MusicRequest) -> MusicObject:
        card = self.jobs.card(request.model)
        if card.music is None:
            raise JobRefused(400, f"model {request.model} declares no music contract", "wrong_task")
        spec = music_spec(request, card.music, secrets.randbelow(MAX_SEED + 1))
        job = self.jobs.create(request.model, msgspec.Raw(msgspec.json.encode(spec)))
        return music_object(job)

    def content(self, music_id: str) -> Content:
        return self.jobs.content(music_id, MUSIC_FILE, MUSIC_CONTENT_TYPE)
