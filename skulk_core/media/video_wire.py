"""The video job family's wire types: the request (JSON body or multipart form
fields), the resolved render spec, and the video object every route answers with."""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from skulk_core.media.jobs import JobError, JobStage, JobStatus
from skulk_core.models.media_cards import VideoMode

VIDEO_CONTENT_TYPE: Final = "video/mp4"
THUMBNAIL_CONTENT_TYPE: Final = "image/jpeg"
VIDEO_FILE: Final = "video.mp4"
"""What a video job's runner writes (the test engine and the service agree on it)."""
THUMBNAIL_FILE: Final = "thumbnail.jpg"
AttachmentRole = Literal[
    "first_frame", "last_frame", "keyframe", "reference", "control", "mask", "source_video"
]


class VideoRequest(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /v1/videos``'s fields (JSON keys or form fields)."""

    model: str = ""
    prompt: str | None = None
    seconds: int | str | None = None
    size: str | None = None
    aspect_ratio: str | None = None
    mode: str | None = None
    steps: int | None = None
    seed: int | None = None
    lora: str | None = None
    lora_strength: float | None = None
    audio: bool = True
    sampler: str | None = None
    scheduler: str | None = None
    video_shift: float | None = None
    audio_shift: float | None = None
    reference_fidelity: str | None = None
    styles: tuple[str, ...] = ()
    codec: str | None = None
    control_strength: float | None = None
    control_start: float | None = None
    control_end: float | None = None
    control_kind: str | None = None


class Attachment(msgspec.Struct, frozen=True, kw_only=True):
    """One uploaded part as admission sees it (its bytes stay with the store)."""

    role: AttachmentRole
    content_type: str
    size: int
    at: float | None = None
    """A keyframe's time into the clip, seconds."""


class VideoSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What the render runs with once the request and the card are resolved."""

    prompt: str
    mode: VideoMode
    seconds: int
    size: str | None
    width: int
    height: int
    fps: int
    frame_count: int
    steps: int
    seed: int
    audio: bool
    sampler: str | None = None
    scheduler: str | None = None
    codec: str | None = None
    styles: tuple[str, ...] = ()
    attachments: tuple[Attachment, ...] = ()


class VideoOutput(msgspec.Struct, frozen=True, kw_only=True):
    """Container facts read back from the stored MP4 (and its thumbnail)."""

    sha256: str
    size_bytes: int
    content_type: str = VIDEO_CONTENT_TYPE
    width: int
    height: int
    frame_count: int
    fps: float
    seconds: float
    audio_sample_rate: int | None
    audio_channels: int | None
    video_codec: str
    audio_codec: str | None
    has_thumbnail: bool
    thumbnail_sha256: str | None = None
    thumbnail_size_bytes: int | None = None


class EngineSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What the render ran with (``stats.engine``)."""

    sampler: str | None
    scheduler: str | None
    steps: int
    seed: int
    video_shift: float | None = None
    audio_shift: float | None = None
    adapter: str | None = None
    adapter_strength: float | None = None
    width: int
    height: int
    frame_count: int
    styles: tuple[str, ...] = ()
    codec: str | None


class RenderStats(msgspec.Struct, frozen=True, kw_only=True):
    steps: int
    seconds_per_step: float
    total_generation_time: float
    peak_memory_bytes: int | None
    engine: EngineSettings | None = None


class VideoObject(msgspec.Struct, frozen=True, kw_only=True):
    """The video object (OpenAI's schema first, Skulk's extensions after ``error``)."""

    id: str
    object: Literal["video"] = "video"
    model: str
    status: JobStatus
    progress: int
    created_at: int
    completed_at: int | None
    expires_at: int | None
    seconds: str
    size: str | None
    error: JobError | None
    prompt: str
    mode: VideoMode
    audio: bool
    stage: JobStage | None
    output: VideoOutput | None
    stats: RenderStats | None


class VideoList(msgspec.Struct, frozen=True, kw_only=True):
    object: Literal["list"] = "list"
    data: tuple[VideoObject, ...]
    first_id: str | None
    last_id: str | None
    has_more: bool


class VideoDeleted(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["video.deleted"] = "video.deleted"
    deleted: bool = True
