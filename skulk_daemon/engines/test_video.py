"""The spec's test video engine: small seeded synthetic clips through the whole
pipeline (``SKULK_TEST_VIDEO_ENGINE=1``, the bundled ``foxlight/test-video`` card).

Each frame is a colour field drawn from the seed and the prompt, with a bar that
sweeps across the clip and, for fl2va, the first and last frames tinted by the
keyframe images' mean colour. The audio track is a seeded tone. The clip is MJPEG
frames with 16-bit PCM audio in an MP4 container (PyAV), as the spec documents; a
JPEG thumbnail of the first frame rides beside it. The "sampling" loop is real work
per step (a seeded noise field denoised toward the frame), so progress, cancellation
and the stage reports behave as a real engine's do, only quicker.
"""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal

import av
import numpy as np

from skulk_core.media.video_wire import THUMBNAIL_FILE, VIDEO_FILE, VideoSpec
from skulk_daemon.engines.test_media_format import AUDIO_SAMPLE_RATE

ENGINE_NAME: Final = "skulk-test-video"
STEP_DELAY_ENV: Final = "SKULK_TEST_VIDEO_STEP_SECONDS"
"""Optional seconds each sampling step takes at least (a test that cancels mid-render
sets it so the render is still running when the cancel lands)."""

Stage = Literal["encoding", "sampling", "decoding", "muxing"]
Report = Callable[[int, Stage], None]


class RenderCancelled(Exception):
    """The render was cancelled between steps or frames."""


def _seed_rng(spec: VideoSpec) -> np.random.Generator:
    digest = hashlib.sha256(f"{spec.seed}\0{spec.prompt}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _mean_colour(path: Path) -> np.ndarray | None:
    """An image attachment's mean RGB, decoded with PyAV (None for non-images)."""
    try:
        with av.open(str(path)) as container:
            frame = next(container.decode(video=0))
            pixels = np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.float32)
            mean: np.ndarray = pixels.mean(axis=(0, 1))
            return mean
    except (av.FFmpegError, StopIteration, ValueError):
        return None


def render(
    spec: VideoSpec,
    inputs: tuple[Path, ...],
    output_dir: Path,
    report: Report,
    cancelled: Callable[[], bool],
    *,
    step_delay: float = 0.0,
) -> tuple[Path, Path]:
    """Write ``video.mp4`` and ``thumbnail.jpg`` into ``output_dir``; raises
    :class:`RenderCancelled` when ``cancelled()`` turns true."""
    rng = _seed_rng(spec)
    report(2, "encoding")
    base = rng.uniform(40, 215, size=3).astype(np.float32)
    tints = [
        _mean_colour(path)
        for path, part in zip(inputs, spec.attachments, strict=True)
        if part.role in ("first_frame", "last_frame") and part.content_type.startswith("image/")
    ]
    height, width = spec.height, spec.width
    field = np.broadcast_to(base, (height, width, 3)).copy()
    noise = rng.standard_normal((height, width, 3)).astype(np.float32) * 60
    for step in range(spec.steps):
        if cancelled():
            raise RenderCancelled
        # One denoising step: the noise shrinks toward the colour field.
        noise *= 0.5
        if step_delay:
            time.sleep(step_delay)
        report(5 + int(70 * (step + 1) / spec.steps), "sampling")
    report(76, "decoding")
    frames: list[np.ndarray] = []
    for index in range(spec.frame_count):
        if cancelled():
            raise RenderCancelled
        frame = field + noise
        bar = int((index / max(1, spec.frame_count - 1)) * (width - 1))
        frame[:, max(0, bar - 2) : bar + 2] = 255 - base
        if tints and index == 0 and tints[0] is not None:
            frame = frame * 0.5 + tints[0] * 0.5
        if len(tints) > 1 and index == spec.frame_count - 1 and tints[-1] is not None:
            frame = frame * 0.5 + tints[-1] * 0.5
        frames.append(np.clip(frame, 0, 255).astype(np.uint8))
    report(88, "muxing")
    output_dir.mkdir(parents=True, exist_ok=True)
    video = output_dir / VIDEO_FILE
    _write_clip(video, frames, spec, rng)
    thumbnail = output_dir / THUMBNAIL_FILE
    thumbnail.write_bytes(_jpeg(frames[0]))
    return video, thumbnail


def _write_clip(
    path: Path, frames: list[np.ndarray], spec: VideoSpec, rng: np.random.Generator
) -> None:
    with av.open(str(path), mode="w", format="mp4") as container:
        stream = container.add_stream("mjpeg", rate=spec.fps)
        stream.width, stream.height = spec.width, spec.height
        stream.pix_fmt = "yuvj420p"
        audio = None
        if spec.audio:
            audio = container.add_stream("pcm_s16le", rate=AUDIO_SAMPLE_RATE)
            audio.layout = "mono"
        for pixels in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
        if audio is not None:
            samples = int(AUDIO_SAMPLE_RATE * len(frames) / spec.fps)
            pitch = float(rng.uniform(220, 660))
            tone = np.sin(2 * np.pi * pitch * np.arange(samples) / AUDIO_SAMPLE_RATE) * 6000
            block = av.AudioFrame.from_ndarray(
                tone.astype(np.int16).reshape(1, -1), format="s16", layout="mono"
            )
            block.sample_rate = AUDIO_SAMPLE_RATE
            block.pts = 0
            for packet in audio.encode(block):
                container.mux(packet)
            for packet in audio.encode():
                container.mux(packet)


def _jpeg(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mjpeg") as container:
        stream = container.add_stream("mjpeg", rate=1)
        stream.width, stream.height = pixels.shape[1], pixels.shape[0]
        stream.pix_fmt = "yuvj420p"
        for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
            container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buffer.getvalue()
