"""The six ``/v1/videos*`` routes (the logic is :mod:`skulk_daemon.media.video_service`).

A create request is JSON, or multipart when it carries attachments: the string fields
are the same, and each file part's name is its role. Refusals leave in the OpenAI
envelope with the spec's statuses (400, 404, 409, 413, 503)."""

from __future__ import annotations

from typing import Final, Literal

import msgspec
from litestar import Controller, delete, get, post
from litestar.datastructures import UploadFile
from litestar.response import File

from skulk_core.media.jobs import LIST_LIMIT_DEFAULT
from skulk_core.media.video_admission import MAX_UPLOAD_BYTES
from skulk_core.media.video_wire import (
    Attachment,
    AttachmentRole,
    VideoDeleted,
    VideoList,
    VideoObject,
    VideoRequest,
)
from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.job_refusals import JOB_REFUSALS
from skulk_daemon.api.openapi import OPENAI, documented, errors, raw_of
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.errors import ApiError
from skulk_daemon.media.video_service import VideoService

MAX_VIDEO_BODY_BYTES: Final = MAX_UPLOAD_BYTES + 1024 * 1024
"""256 MiB of attachments plus the form's fields and multipart framing."""
MULTIPART: Final = "multipart/form-data"
PART_ROLES: Final[dict[str, AttachmentRole]] = {
    "input_reference": "first_frame",
    "first_frame": "first_frame",
    "last_frame": "last_frame",
    "keyframe": "keyframe",
    "reference": "reference",
    "control": "control",
    "mask": "mask",
    "source_video": "source_video",
}
_NUMBERS: Final = ("steps", "seed")
_FLOATS: Final = (
    "lora_strength",
    "video_shift",
    "audio_shift",
    "control_strength",
    "control_start",
    "control_end",
)
_REQUEST: Final = msgspec.json.Decoder(VideoRequest)


def _bad(message: str) -> ApiError:
    return ApiError(400, message, code="invalid_request")


def _form_request(fields: dict[str, str]) -> VideoRequest:
    """The form's string fields as the JSON body would carry them."""
    values: dict[str, object] = {}
    for name, value in fields.items():
        if name in _NUMBERS:
            try:
                values[name] = int(value)
            except ValueError:
                raise _bad(f"{name} must be an integer") from None
        elif name in _FLOATS:
            try:
                values[name] = float(value)
            except ValueError:
                raise _bad(f"{name} must be a number") from None
        elif name == "audio":
            if value.strip().lower() not in ("true", "false", "1", "0"):
                raise _bad("audio must be true or false")
            values[name] = value.strip().lower() in ("true", "1")
        elif name == "styles":
            values[name] = [style.strip() for style in value.split(",") if style.strip()]
        elif name != "keyframe_at":
            values[name] = value
    try:
        return msgspec.convert(values, VideoRequest)
    except msgspec.ValidationError as exc:
        raise _bad(f"invalid video request: {exc}") from None


async def _multipart(request: HttpRequest) -> tuple[VideoRequest, list[tuple[Attachment, bytes]]]:
    form = await request.form()
    fields: dict[str, str] = {}
    times: list[float] = []
    uploads: list[tuple[Attachment, bytes]] = []
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            role = PART_ROLES.get(name)
            if role is None:
                raise _bad(f"unknown file part {name!r}")
            data = await value.read()
            uploads.append(
                (Attachment(role=role, content_type=value.content_type or "", size=len(data)), data)
            )
        elif name == "keyframe_at":
            try:
                times.append(float(value))
            except ValueError:
                raise _bad("keyframe_at must be seconds") from None
        elif name in PART_ROLES:
            raise _bad(f"{name} must be an uploaded file, not a form field")
        else:
            fields[name] = value
    keyframes = [index for index, (part, _) in enumerate(uploads) if part.role == "keyframe"]
    if len(times) > len(keyframes):
        raise _bad("every keyframe_at value needs a keyframe part")
    for index, at in zip(keyframes, times, strict=False):
        part, data = uploads[index]
        uploads[index] = (msgspec.structs.replace(part, at=at), data)
    return _form_request(fields), uploads


class VideosController(Controller):
    tags = ("Videos",)
    opt = declare(Requirement.OPEN)
    exception_handlers = JOB_REFUSALS

    @post(
        "/v1/videos",
        status_code=200,
        summary="Create a video job",
        # JSON, or multipart when it carries attachments.
        opt=declare(Requirement.OPEN, json_body=False),
        request_max_body_size=MAX_VIDEO_BODY_BYTES,
        responses=errors(OPENAI, 400, 404, 413, 503),
        operation_class=documented(
            body=VideoRequest, body_media_types=("application/json", MULTIPART)
        ),
    )
    async def create_video(self, request: HttpRequest, videos: VideoService) -> VideoObject:
        content_type = request.headers.get("content-type", "")
        if content_type.startswith(MULTIPART):
            body, uploads = await _multipart(request)
        else:
            try:
                body, uploads = _REQUEST.decode(await request.body()), []
            except msgspec.DecodeError as exc:
                raise _bad(f"invalid video request: {exc}") from None
        return videos.create(body, uploads)

    @get(
        "/v1/videos",
        summary="List video jobs",
        responses=errors(OPENAI, 400),
    )
    async def list_videos(
        self,
        videos: VideoService,
        limit: int = LIST_LIMIT_DEFAULT,
        after: str | None = None,
        order: Literal["asc", "desc"] = "desc",
    ) -> VideoList:
        return videos.list(limit, after, order)

    @get(
        "/v1/videos/{video_id:str}",
        summary="Poll a video job",
        responses=errors(OPENAI, 404),
    )
    async def get_video(self, video_id: str, videos: VideoService) -> VideoObject:
        return videos.get(video_id)

    @delete(
        "/v1/videos/{video_id:str}",
        status_code=200,
        summary="Delete a video job",
        responses=errors(OPENAI, 404),
    )
    async def delete_video(self, video_id: str, videos: VideoService) -> VideoDeleted:
        videos.delete(video_id)
        return VideoDeleted(id=video_id)

    @post(
        "/v1/videos/{video_id:str}/cancel",
        status_code=200,
        summary="Cancel a video job",
        responses=errors(OPENAI, 404),
    )
    async def cancel_video(self, video_id: str, videos: VideoService) -> VideoObject:
        return videos.cancel(video_id)

    @get(
        "/v1/videos/{video_id:str}/content",
        summary="Download a video job's MP4 or thumbnail",
        responses=errors(OPENAI, 400, 404, 409),
        operation_class=documented(
            ok={
                "video/mp4": raw_of(description="the MP4", binary=True),
                "image/jpeg": raw_of(description="the thumbnail", binary=True),
            }
        ),
    )
    async def video_content(
        self, video_id: str, videos: VideoService, variant: str = "video"
    ) -> File:
        content = videos.content(video_id, variant)
        return File(
            path=content.path, media_type=content.media_type, content_disposition_type="inline"
        )
