"""The second plane's check: what a render delivered, read back from the files
themselves (PyAV for the MP4, the ``wave`` module for WAV) before a job completes.
A file that does not hold what the job asked for fails the job; nothing is trusted
from the runner's report."""

from __future__ import annotations

import hashlib
import wave
from pathlib import Path
from typing import Final

from skulk_core.media.music_wire import MAX_MUSIC_BYTES, MusicOutput
from skulk_core.media.video_wire import VideoOutput, VideoSpec

_CHUNK: Final = 1024 * 1024


class ContainerRejected(ValueError):
    """The delivered file is not what the job asked for."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify_video(spec: VideoSpec, video: Path, thumbnail: Path | None) -> VideoOutput:
    """Facts of the delivered MP4 (and thumbnail). Raises :class:`ContainerRejected`
    for a file PyAV cannot read, one without video, or one without the audio track
    the job required."""
    import av  # noqa: PLC0415 (PyAV loads where a render is checked: issue 43)

    try:
        with av.open(str(video)) as container:
            if container.format.name.split(",")[0] not in ("mov", "mp4"):
                raise ContainerRejected(f"the render is {container.format.name}, not MP4")
            if not container.streams.video:
                raise ContainerRejected("the render holds no video stream")
            stream = container.streams.video[0]
            audio = container.streams.audio[0] if container.streams.audio else None
            width, height = stream.codec_context.width, stream.codec_context.height
            video_codec = stream.codec_context.name
            fps = float(stream.average_rate or stream.base_rate or 0)
            sample_rate = audio.codec_context.sample_rate if audio is not None else None
            channels = audio.codec_context.channels if audio is not None else None
            audio_codec = audio.codec_context.name if audio is not None else None
            frames = sum(1 for _ in container.demux(stream) if _.size)
    except av.FFmpegError as exc:
        raise ContainerRejected(f"the render is not a readable MP4: {exc}") from None
    if spec.audio and audio_codec is None:
        raise ContainerRejected("the job required an audio track and the render carries none")
    if frames == 0:
        raise ContainerRejected("the render holds no frames")
    has_thumbnail = thumbnail is not None and thumbnail.is_file()
    return VideoOutput(
        sha256=sha256_of(video),
        size_bytes=video.stat().st_size,
        width=width,
        height=height,
        frame_count=frames,
        fps=fps,
        seconds=round(frames / fps, 3) if fps else 0.0,
        audio_sample_rate=sample_rate,
        audio_channels=channels,
        video_codec=video_codec,
        audio_codec=audio_codec,
        has_thumbnail=has_thumbnail,
        thumbnail_sha256=sha256_of(thumbnail) if has_thumbnail and thumbnail else None,
        thumbnail_size_bytes=thumbnail.stat().st_size if has_thumbnail and thumbnail else None,
    )


def verify_music(path: Path) -> MusicOutput:
    """Facts of the delivered WAV, measured from its header and data. Raises
    :class:`ContainerRejected` past 64 MiB (never truncated) or for a file that is not
    16-bit PCM WAV."""
    size = path.stat().st_size
    if size > MAX_MUSIC_BYTES:
        raise ContainerRejected(f"the WAV is {size} bytes, over the 64 MiB limit")
    try:
        with wave.open(str(path), "rb") as source:
            rate, channels, frames = (
                source.getframerate(),
                source.getnchannels(),
                source.getnframes(),
            )
    except (wave.Error, EOFError) as exc:
        raise ContainerRejected(f"the render is not a readable WAV: {exc}") from None
    if rate <= 0 or frames == 0:
        raise ContainerRejected("the WAV holds no audio")
    return MusicOutput(
        duration_seconds=round(frames / rate, 3),
        sample_rate=rate,
        channels=channels,
        size_bytes=size,
        sha256=sha256_of(path),
    )
