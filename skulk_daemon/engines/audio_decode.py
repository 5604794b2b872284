"""Decoding an uploaded audio file to 16 kHz mono samples, bounded while it decodes.

The upload is bounded in bytes (25 MiB) before it reaches a runner, but compressed
audio is not bounded by its size: a megabyte of FLAC can hold hours of silence, and
decoding it whole (as ``faster_whisper.audio.decode_audio`` does) grows the runner by
gigabytes before anything looks at the length. Here frames are counted as PyAV yields
them and decoding stops at :data:`MAX_DECODED_SECONDS`; a container that declares a
longer duration is refused before its first frame. PyAV reads every format the speech
paths accept (WAV, MP3, FLAC, OGG/Opus, WebM, MP4/M4A), so this one loop bounds them all.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Final

import av
import numpy as np
import numpy.typing as npt

MAX_DECODED_SECONDS: Final = 30 * 60
"""The longest recording one transcription decodes. Whisper reads 30 s windows, so the
cost of a request grows with its duration, not its upload size; thirty minutes is more
than any 25 MiB upload of speech-grade audio (16 kHz PCM WAV holds about 13 minutes)."""


class AudioTooLong(ValueError):
    """The recording decodes to more than the bound; the message is safe to show a user."""


class AudioUndecodable(ValueError):
    """The bytes are not audio PyAV can decode; the message is safe to show a user."""


def too_long_message(max_seconds: int) -> str:
    return f"the audio is longer than {max_seconds} seconds once decoded"


def decode_bounded(
    data: bytes, *, sample_rate: int, max_seconds: int = MAX_DECODED_SECONDS
) -> npt.NDArray[np.float32]:
    """The recording's first audio stream as float32 mono at ``sample_rate``.

    Raises :class:`AudioTooLong` as soon as more than ``max_seconds`` have decoded (or
    the container declares more), so memory never holds more than the bound.
    """
    max_samples = sample_rate * max_seconds
    chunks: list[npt.NDArray[np.int16]] = []
    total = 0
    resampler = av.AudioResampler(format="s16", layout="mono", rate=sample_rate)
    try:
        with av.open(io.BytesIO(data), mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise AudioUndecodable("the file could not be decoded as audio: no audio stream")
            declared = container.duration  # in av.time_base units, when the header says
            if declared is not None and declared > max_seconds * av.time_base:
                raise AudioTooLong(too_long_message(max_seconds))
            for frame in _frames(container):
                for resampled in resampler.resample(frame):
                    array = resampled.to_ndarray().reshape(-1).astype(np.int16, copy=False)
                    total += array.size
                    if total > max_samples:
                        raise AudioTooLong(too_long_message(max_seconds))
                    chunks.append(array)
    except (AudioTooLong, AudioUndecodable):
        raise
    except Exception as exc:  # PyAV raises many error types for bad input
        raise AudioUndecodable(f"the file could not be decoded as audio: {exc}") from None
    if not chunks:
        return np.zeros(0, dtype=np.float32)
    samples = np.concatenate(chunks)
    chunks.clear()
    return samples.astype(np.float32) / 32768.0


def _frames(container: av.container.InputContainer) -> Iterator[av.AudioFrame | None]:
    """Every decodable frame of the first audio stream, then ``None`` (which flushes the
    resampler). Frames PyAV finds invalid are skipped, as faster-whisper does."""
    frames = container.decode(audio=0)
    while True:
        try:
            frame = next(frames)
        except StopIteration:
            break
        except av.InvalidDataError:
            continue
        frame.pts = None  # the resampler checks timestamps; decoders' are not reliable
        yield frame
    yield None
