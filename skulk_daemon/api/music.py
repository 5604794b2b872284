"""The six ``/v1/music*`` routes (the logic is :mod:`skulk_daemon.media.music_service`).

The create body is strict: unknown fields, blank text and values out of range are 422
before a job exists."""

from __future__ import annotations

from typing import Final

import msgspec
from litestar import Controller, delete, get, post
from litestar.response import File

from skulk_core.media.jobs import LIST_LIMIT_DEFAULT
from skulk_core.media.music_wire import MusicDeleted, MusicList, MusicObject, MusicRequest
from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.job_refusals import JOB_REFUSALS
from skulk_daemon.api.openapi import OPENAI, documented, errors, raw_of
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.errors import ApiError
from skulk_daemon.media.music_service import MusicService

MAX_MUSIC_BODY_BYTES: Final = 1024 * 1024
"""8,000 characters of prompt and 20,000 of lyrics, with room for JSON escaping."""
_REQUEST: Final = msgspec.json.Decoder(MusicRequest)


class MusicController(Controller):
    tags = ("Music",)
    opt = declare(Requirement.OPEN)
    exception_handlers = JOB_REFUSALS

    @post(
        "/v1/music",
        status_code=200,
        summary="Create a music job",
        request_max_body_size=MAX_MUSIC_BODY_BYTES,
        responses=errors(OPENAI, 400, 404, 413, 422, 503),
        operation_class=documented(body=MusicRequest),
    )
    async def create_music(self, request: HttpRequest, music_jobs: MusicService) -> MusicObject:
        raw = await request.body()
        try:
            body = _REQUEST.decode(raw)
        except msgspec.ValidationError as exc:
            raise ApiError(422, f"invalid music request: {exc}", code="invalid_request") from None
        except msgspec.DecodeError as exc:
            raise ApiError(400, f"the body is not JSON: {exc}", code="invalid_json") from None
        return music_jobs.create(body)

    @get("/v1/music", summary="List music jobs", responses=errors(OPENAI, 400))
    async def list_music(
        self, music_jobs: MusicService, limit: int = LIST_LIMIT_DEFAULT, after: str | None = None
    ) -> MusicList:
        return music_jobs.list(limit, after)

    @get("/v1/music/{music_id:str}", summary="Poll a music job", responses=errors(OPENAI, 404))
    async def get_music(self, music_id: str, music_jobs: MusicService) -> MusicObject:
        return music_jobs.get(music_id)

    @delete(
        "/v1/music/{music_id:str}",
        status_code=200,
        summary="Delete a music job",
        responses=errors(OPENAI, 404),
    )
    async def delete_music(self, music_id: str, music_jobs: MusicService) -> MusicDeleted:
        music_jobs.delete(music_id)
        return MusicDeleted(id=music_id)

    @post(
        "/v1/music/{music_id:str}/cancel",
        status_code=200,
        summary="Cancel a music job",
        responses=errors(OPENAI, 404),
    )
    async def cancel_music(self, music_id: str, music_jobs: MusicService) -> MusicObject:
        return music_jobs.cancel(music_id)

    @get(
        "/v1/music/{music_id:str}/content",
        summary="Download a music job's WAV",
        responses=errors(OPENAI, 404, 409),
        operation_class=documented(ok={"audio/wav": raw_of(description="the WAV", binary=True)}),
    )
    async def music_content(self, music_id: str, music_jobs: MusicService) -> File:
        content = music_jobs.content(music_id)
        return File(
            path=content.path, media_type=content.media_type, content_disposition_type="inline"
        )
